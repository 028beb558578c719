// Command worker runs Sluice's webhook and http jobs (DESIGN §2.3): an asynq
// server on the queues <prefix>:webhook and <prefix>:http whose handler waits
// for each job's slot, claims, sends, classifies and finishes it. It keeps
// no state outside Redis: kill it at any moment and start it again.
//
//	worker [--config PATH] [--metrics-listen ADDR]
//
// --config (or $SLUICE_CONFIG) is the same YAML file as the throttler's
// (DESIGN §7); $SLUICE_REDIS_URL overrides redis.url. The worker refuses to
// start when redis.shards, dispatch.lead or dispatch.min_lead differ from
// <prefix>:meta (written by the first process to start). The worker uses
// worker.concurrency (split over worker.fetchers asynq servers),
// worker.task_check_interval and worker.shutdown_timeout
// (raised to 2·dispatch.lead + the largest configured timeout + 2 s when
// smaller), the dispatch timing, throttle, retention, egress.allow and the
// tenants' webhook secrets.
//
// --metrics-listen (or $SLUICE_METRICS_LISTEN; default 127.0.0.1:9091)
// serves Prometheus metrics on /metrics; "off" disables it.
//
// SIGTERM or SIGINT stops fetching tasks and waits up to the shutdown
// timeout for running ones; asynq puts unfinished tasks back, and Sluice's
// sweep recovers any job a killed worker held.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/webhook"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/internal/worker"
)

// Flag defaults and environment.
const (
	metricsListenDefault = "127.0.0.1:9091"
	envMetricsListen     = "SLUICE_METRICS_LISTEN"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr, nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// run works until ctx is done, then drains. ready, when not nil, is called
// once tasks are being fetched, with the metrics address ("" when off).
func run(ctx context.Context, args []string, getenv func(string) string, logOut io.Writer, ready func(metricsAddr string)) error {
	cfg, metricsAddr, err := parseFlags(args, getenv)
	if err != nil {
		return err
	}
	log := cfg.Log.NewLogger(logOut)
	rdb, err := cfg.Redis.Client()
	if err != nil {
		return err
	}
	defer rdb.Close()
	if _, err := store.EnsureMeta(ctx, rdb, wire.Meta{
		Prefix: cfg.Redis.Prefix, Shards: cfg.Redis.Shards, Lead: cfg.Dispatch.Lead, MinLead: cfg.Dispatch.MinLead,
	}); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	w, maxTimeout, closeClient, err := newWorker(cfg, rdb, reg, log)
	if err != nil {
		return err
	}
	defer closeClient()
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer w.Stop()

	shutdown := shutdownTimeout(cfg, maxTimeout, log)
	stopMetrics, addr, err := serveMetrics(metricsAddr, reg, log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	servers := make([]*asynq.Server, 0, cfg.Worker.Fetchers)
	shutdownAll := func() {
		var wg sync.WaitGroup
		for _, srv := range servers {
			wg.Go(srv.Shutdown) // they drain at the same time
		}
		wg.Wait()
	}
	for _, n := range split(cfg.Worker.Concurrency, cfg.Worker.Fetchers) {
		srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
			Concurrency:       n,
			TaskCheckInterval: cfg.Worker.TaskCheckInterval,
			ShutdownTimeout:   shutdown,
			Queues:            w.Queues(),
			Logger:            asynqLogger{log},
			LogLevel:          asynqLevel(cfg.Log.Level),
		})
		if err := srv.Start(w); err != nil {
			shutdownAll()
			return fmt.Errorf("start asynq server: %w", err)
		}
		servers = append(servers, srv)
	}
	log.Info("worker running", "id", w.ID(), "concurrency", cfg.Worker.Concurrency, "fetchers", len(servers),
		"task_check_interval", cfg.Worker.TaskCheckInterval, "shutdown_timeout", shutdown, "metrics", addr)
	if ready != nil {
		ready(addr)
	}
	<-ctx.Done()
	log.Info("shutting down: draining running jobs", "timeout", shutdown)
	shutdownAll()
	log.Info("stopped")
	return nil
}

// split divides total into n near-equal positive parts (n ≤ total): the
// concurrency of each of the n asynq servers (worker.fetchers). An asynq
// server dequeues one task per Redis round trip, so a process's fetch rate
// grows with its number of servers.
func split(total, n int) []int {
	parts := make([]int, n)
	for i := range parts {
		parts[i] = total / n
		if i < total%n {
			parts[i]++
		}
	}
	return parts
}

// newWorker builds the Worker: the Store, the SSRF-safe HTTP client (closed
// by the returned func), the tenants' signing keys and the finish
// configuration. It also returns the largest configured attempt timeout.
func newWorker(cfg *config.Config, rdb redis.UniversalClient, reg *prometheus.Registry, log *slog.Logger) (*worker.Worker, time.Duration, func(), error) {
	st, err := store.NewStore(rdb, store.Config{
		Prefix: cfg.Redis.Prefix, Shards: cfg.Redis.Shards, CanceledRetention: cfg.Retention.Canceled,
	})
	if err != nil {
		return nil, 0, nil, err
	}
	allow, err := cfg.Egress.Prefixes()
	if err != nil {
		return nil, 0, nil, fmt.Errorf("egress.allow: %w", err)
	}
	secrets, maxTimeout, err := tenantPolicies(cfg)
	if err != nil {
		return nil, 0, nil, err
	}
	client := webhook.NewClient(webhook.ClientConfig{Allow: allow})
	w, err := worker.New(worker.Config{
		Store:             st,
		Redis:             rdb,
		Executor:          &worker.WebhookExecutor{Client: client, Secrets: secrets},
		Prefix:            cfg.Redis.Prefix,
		Concurrency:       cfg.Worker.Concurrency,
		MinLead:           cfg.Dispatch.MinLead,
		Tolerance:         cfg.Dispatch.Tolerance,
		TaskCheckInterval: cfg.Worker.TaskCheckInterval,
		Finish:            finishConfig(cfg),
		Registerer:        reg,
		Logger:            log,
	})
	if err != nil {
		client.CloseIdleConnections()
		return nil, 0, nil, err
	}
	return w, maxTimeout, client.CloseIdleConnections, nil
}

// parseFlags reads --config and --metrics-listen, then the configuration
// through config.FromFlags.
func parseFlags(args []string, getenv func(string) string) (*config.Config, string, error) {
	const usage = "usage: worker [--config PATH] [--metrics-listen ADDR|off]"
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	path := fs.String("config", "", "YAML configuration file")
	metrics := fs.String("metrics-listen", cmp.Or(getenv(envMetricsListen), metricsListenDefault), "address of /metrics, or off")
	if err := fs.Parse(args); err != nil {
		return nil, "", fmt.Errorf("parse flags: %w (%s)", err, usage)
	}
	if fs.NArg() > 0 {
		return nil, "", fmt.Errorf("parse flags: unexpected argument %q (%s)", fs.Arg(0), usage)
	}
	var cfgArgs []string
	if *path != "" {
		cfgArgs = []string{"--config", *path}
	}
	cfg, err := config.FromFlags(cfgArgs, getenv)
	if err != nil {
		return nil, "", err
	}
	if *metrics == "off" {
		*metrics = ""
	}
	return cfg, *metrics, nil
}

// tenantPolicies resolves the configured tenants' webhook signing keys (the
// defaults' for any other tenant) and the largest configured attempt
// timeout. Secrets live only in the configuration, never in Redis.
func tenantPolicies(cfg *config.Config) (func(string) [][]byte, time.Duration, error) {
	defaults := policy.Resolve(cfg.Defaults)
	defaultKeys, err := defaults.WebhookSecrets.Keys()
	if err != nil {
		return nil, 0, fmt.Errorf("defaults: %w", err)
	}
	maxTimeout := defaults.Timeout
	keys := make(map[string][][]byte, len(cfg.Tenants))
	for tenant, o := range cfg.Tenants {
		p := policy.Resolve(cfg.Defaults, o)
		if keys[tenant], err = p.WebhookSecrets.Keys(); err != nil {
			return nil, 0, fmt.Errorf("tenant %q: %w", tenant, err)
		}
		maxTimeout = max(maxTimeout, p.Timeout)
	}
	return func(tenant string) [][]byte {
		if k, ok := keys[tenant]; ok {
			return k
		}
		return defaultKeys
	}, maxTimeout, nil
}

// shutdownTimeout is worker.shutdown_timeout, raised to 2·D + the largest
// configured attempt timeout + 2 s (DESIGN §2.3) when smaller.
func shutdownTimeout(cfg *config.Config, maxTimeout time.Duration, log *slog.Logger) time.Duration {
	need := 2*cfg.Dispatch.Lead + maxTimeout + 2*time.Second
	if cfg.Worker.ShutdownTimeout >= need {
		return cfg.Worker.ShutdownTimeout
	}
	log.Warn("worker.shutdown_timeout raised to 2·dispatch.lead + the largest timeout + 2s",
		"configured", cfg.Worker.ShutdownTimeout, "used", need)
	return need
}

// serveMetrics serves reg on addr's /metrics until the returned stop is
// called; with addr "" it does nothing.
func serveMetrics(addr string, reg *prometheus.Registry, log *slog.Logger) (stop func(), bound string, err error) {
	if addr == "" {
		return func() {}, "", nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() { _ = hs.Serve(ln) }()
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}, ln.Addr().String(), nil
}

// asynqLogger sends asynq's logs to slog.
type asynqLogger struct{ l *slog.Logger }

func (a asynqLogger) Debug(args ...any) { a.l.Debug(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Info(args ...any)  { a.l.Info(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Warn(args ...any)  { a.l.Warn(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Error(args ...any) { a.l.Error(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Fatal(args ...any) {
	a.l.Error(fmt.Sprint(args...), "component", "asynq", "fatal", true)
	os.Exit(1)
}

func asynqLevel(level string) asynq.LogLevel {
	return map[string]asynq.LogLevel{
		"debug": asynq.DebugLevel, "info": asynq.InfoLevel, "warn": asynq.WarnLevel, "error": asynq.ErrorLevel,
	}[level]
}

// finishConfig is what Store.Finish applies, from retention and throttle.
func finishConfig(cfg *config.Config) store.FinishConfig {
	return store.FinishConfig{
		SucceededRetention:   cfg.Retention.Succeeded,
		IdempotencyRetention: cfg.Retention.Idempotency,
		DeadRetention:        cfg.Retention.Dead,
		DeadMaxPerTenant:     cfg.Retention.DeadMaxPerTenant,
		AttemptLog:           cfg.Retention.AttemptLog,
		DefaultPause:         cfg.Throttle.DefaultPause,
		MaxPause:             cfg.Throttle.MaxPause,
		AdaptiveFloorPPM:     store.PPM(cfg.Throttle.AdaptiveFloor),
	}
}
