// Command demo shows Sluice at work against a running throttler and worker:
// it starts a webhook receiver on this machine, bursts webhooks at several
// tenants at once through POST /v1/tenants/{tenant}/jobs:batch, shows each
// tenant's deliveries per second, backlog and progress live, and at the end
// writes a chart of cumulative deliveries per tenant over time (SVG) and
// prints each tenant's measured rate next to its configured one. scripts/run
// builds and runs it.
//
//	demo [--config PATH] [--api URL] [--api-key KEY] [--listen ADDR]
//	     [--jobs TENANT=N,…] [--out PATH] [--timeout D] [--stay] [--plain]
//	     [--worker-metrics URL]
//
// --config (or $SLUICE_CONFIG; $SLUICE_LISTEN applies) is the throttler's
// file: the demo reads the API's listen address and the tenants' webhook
// secrets from it, and the tenants' limits from GET /v1/tenants/{tenant}.
// --api overrides the API's base URL; --api-key (or $SLUICE_API_KEY,
// default the development key "dev-key") must be allowed for the tenants.
//
// The receiver listens on --listen (default 127.0.0.1:9000; when that is
// busy and the flag was not given, a free port) and answers POST
// /hooks/{tenant}: it verifies each delivery's Standard Webhooks signature
// with the official library and counts the first arrival of each job of
// this run. The egress allow-list of the configuration must admit it
// (examples/sluice.dev.yaml allows 127.0.0.0/8).
//
// --jobs is the burst, default acme=600,globex=300,initech=100: with the
// development configuration's limits (50/s burst 5, 20/s, 5/s) each tenant
// takes 12 to 20 s, so the demo ends in about 20 s. --out is the chart's
// path (default .sluice/demo.svg). --timeout bounds the wait for the
// deliveries (default 2m). The live table redraws in place on a terminal;
// --plain (or a non-terminal stdout) prints a line per second instead.
// --stay keeps the receiver running after the summary, printing every
// delivery, until SIGINT or SIGTERM; otherwise the demo exits.
//
// --worker-metrics is the worker's /metrics URL: the summary then counts the
// claims returned unsent during the run (a tenant at its concurrency cap or
// paused). Each forfeits its slot, which is why such a run measures a
// little below the configured rates.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/policy"
)

// Flag defaults and environment.
const (
	devAPIKey      = "dev-key" // the key of examples/sluice.dev.yaml
	envAPIKey      = "SLUICE_API_KEY"
	listenDefault  = "127.0.0.1:9000"
	jobsDefault    = "acme=600,globex=300,initech=100"
	outDefault     = ".sluice/demo.svg"
	timeoutDefault = 2 * time.Minute
	readyWithin    = 15 * time.Second
	maxJobs        = 100_000 // per tenant
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, isTerminal(os.Stdout)); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// run parses args and runs the demo, writing to out; terminal says whether
// out is a terminal (live table in place).
func run(ctx context.Context, args []string, getenv func(string) string, out io.Writer, terminal bool) error {
	o, err := parseFlags(args, getenv, terminal)
	if err != nil {
		return err
	}
	_, err = runDemo(ctx, o, out)
	return err
}

// parseFlags reads the flags and the configuration into options.
func parseFlags(args []string, getenv func(string) string, terminal bool) (options, error) {
	const usage = "usage: demo [--config PATH] [--api URL] [--api-key KEY] [--listen ADDR] " +
		"[--jobs TENANT=N,…] [--out PATH] [--timeout D] [--stay] [--plain] [--worker-metrics URL]"
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	path := fs.String("config", "", "YAML configuration file (default $SLUICE_CONFIG)")
	api := fs.String("api", "", "the throttler's base URL (default http:// + the configuration's listen)")
	key := fs.String("api-key", cmp.Or(getenv(envAPIKey), devAPIKey), "API key")
	listen := fs.String("listen", listenDefault, "the receiver's address")
	jobs := fs.String("jobs", jobsDefault, "the burst: TENANT=N,…")
	out := fs.String("out", outDefault, "the chart's path")
	timeout := fs.Duration("timeout", timeoutDefault, "bound on the wait for the deliveries")
	stay := fs.Bool("stay", false, "keep receiving after the summary until interrupted")
	plain := fs.Bool("plain", false, "print a line per second instead of redrawing the table")
	workerMetrics := fs.String("worker-metrics", "", "the worker's /metrics URL, to count late claims")
	if err := fs.Parse(args); err != nil {
		return options{}, fmt.Errorf("parse flags: %w (%s)", err, usage)
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("parse flags: unexpected argument %q (%s)", fs.Arg(0), usage)
	}
	listenSet := false
	fs.Visit(func(f *flag.Flag) { listenSet = listenSet || f.Name == "listen" })

	cfg, err := config.Load(cmp.Or(*path, getenv(config.EnvConfig)), getenv)
	if err != nil {
		return options{}, err
	}
	shares, err := parseShares(*jobs)
	if err != nil {
		return options{}, err
	}
	sec, err := newSecrets(cfg)
	if err != nil {
		return options{}, err
	}
	if *timeout <= 0 {
		return options{}, fmt.Errorf("--timeout %s: want a positive duration", *timeout)
	}
	return options{
		API: cmp.Or(strings.TrimSuffix(*api, "/"), apiBase(cfg.Listen)), APIKey: *key,
		Listen: *listen, ListenFallback: !listenSet, Shares: shares, Out: *out, Secrets: sec,
		ReadyWithin: readyWithin, Timeout: *timeout, Live: terminal && !*plain, Stay: *stay,
		WorkerMetrics: *workerMetrics,
	}, nil
}

// apiBase is the URL of an API listening on addr; an unspecified host
// (":8080", "0.0.0.0:8080") is reached on the loopback address.
func apiBase(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// parseShares reads "acme=600,globex=300": tenant ids (policy.ValidTenantID),
// each once, with 1 … maxJobs jobs.
func parseShares(s string) ([]share, error) {
	var out []share
	seen := map[string]bool{}
	for item := range strings.SplitSeq(s, ",") {
		tenant, n, ok := strings.Cut(strings.TrimSpace(item), "=")
		jobs, err := strconv.Atoi(n)
		if !ok || err != nil {
			return nil, fmt.Errorf("--jobs: %q: want TENANT=N", item)
		}
		if err := policy.ValidTenantID(tenant); err != nil {
			return nil, fmt.Errorf("--jobs: %w", err)
		}
		switch {
		case seen[tenant]:
			return nil, fmt.Errorf("--jobs: tenant %q given twice", tenant)
		case jobs < 1 || jobs > maxJobs:
			return nil, fmt.Errorf("--jobs: %s=%d: want 1 to %d jobs", tenant, jobs, maxJobs)
		}
		seen[tenant] = true
		out = append(out, share{Tenant: tenant, Jobs: jobs})
	}
	return out, nil
}

// isTerminal reports whether f is a character device (a terminal) and TERM
// is not "dumb".
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0 && os.Getenv("TERM") != "dumb"
}
