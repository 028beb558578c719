// Command worker runs Sluice's webhook and http jobs (DESIGN §2.3): asynq
// servers on the queues <prefix>:webhook and <prefix>:http whose handler
// (internal/worker) waits for each job's slot, claims, sends, classifies and
// finishes it. It keeps no state outside Redis: kill it at any moment and
// start it again.
//
//	worker [--config PATH] [--metrics-listen ADDR|off]
//
// The configuration is the throttler's YAML file (DESIGN §7, see
// config.WorkerFromFlags). The worker refuses to start when redis.shards,
// dispatch.lead or dispatch.min_lead differ from <prefix>:meta; the
// adjustable settings it reads there and follows (worker.Config.Settings).
// Prometheus metrics are served on /metrics. SIGTERM or SIGINT stops
// fetching and drains running jobs (worker.Serve).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/httpserver"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/webhook"
	"github.com/sluicehq/sluice/internal/worker"
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
	cfg, metricsAddr, err := config.WorkerFromFlags(args, getenv)
	if err != nil {
		return err
	}
	log := cfg.Log.NewLogger(logOut)
	rdb, err := cfg.Redis.Client()
	if err != nil {
		return err
	}
	defer rdb.Close()
	if _, err := store.EnsureMeta(ctx, rdb, cfg.Meta()); err != nil { // fixed fields only: the throttler writes the settings
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
	stopMetrics, addr, err := httpserver.StartMetrics(metricsAddr, reg, log)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	defer stopMetrics()
	err = worker.Serve(ctx, rdb, w, worker.ServersConfig{Concurrency: cfg.Worker.Concurrency, Fetchers: cfg.Worker.Fetchers,
		TaskCheckInterval: cfg.Worker.TaskCheckInterval, ShutdownTimeout: cfg.Worker.ShutdownTimeout, Lead: cfg.Dispatch.Lead,
		MaxTimeout: maxTimeout, Logger: log, LogLevel: cfg.Log.SlogLevel(), LogAttrs: []any{"metrics", addr}}, func() {
		if ready != nil {
			ready(addr)
		}
	})
	log.Info("stopped")
	return err
}

// newWorker builds the Worker: the Store, the SSRF-safe HTTP client (closed
// by the returned func), the tenants' signing keys and the file's settings.
// It also returns the largest configured attempt timeout.
func newWorker(cfg *config.Config, rdb redis.UniversalClient, reg *prometheus.Registry, log *slog.Logger) (*worker.Worker, time.Duration, func(), error) {
	st, err := store.NewStore(rdb, cfg.StoreConfig())
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
	w, err := worker.New(worker.Config{Store: st, Redis: rdb, Executor: &worker.WebhookExecutor{Client: client, Secrets: secrets},
		Prefix: cfg.Redis.Prefix, Concurrency: cfg.Worker.Concurrency, MinLead: cfg.Dispatch.MinLead,
		TaskCheckInterval: cfg.Worker.TaskCheckInterval, Settings: cfg.Meta().Settings, Registerer: reg, Logger: log})
	if err != nil {
		client.CloseIdleConnections()
		return nil, 0, nil, err
	}
	return w, maxTimeout, client.CloseIdleConnections, nil
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
