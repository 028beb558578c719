// Command worker runs Sluice's webhook and http jobs (docs/design.md §2.3) in an
// asynq server on the hand-off queues <prefix>:h0…h7 and, for earlier
// dispatchers, <prefix>:webhook and <prefix>:http (internal/worker), serves
// Prometheus metrics on /metrics, and drains on SIGTERM or SIGINT.
//
//	worker [--config PATH] [--metrics-listen ADDR|off]
//
// --config is the throttler's YAML file (docs/design.md §7); --metrics-listen
// defaults to $SLUICE_METRICS_LISTEN, else 127.0.0.1:9091. The worker refuses
// to start when redis.shards, dispatch.lead or dispatch.min_lead differ from
// <prefix>:meta, and follows the settings stored there (worker.Config.Settings).
package main

import (
	"cmp"
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
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/httpserver"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/version"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/internal/worker"
)

// The --metrics-listen default and its environment variable.
const metricsListenDefault, envMetricsListen = "127.0.0.1:9091", "SLUICE_METRICS_LISTEN"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr, nil, hup); err != nil {
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
// Each value received on hup (SIGHUP in main; nil: none) re-reads the
// configuration file's webhook secrets (fileSecrets.reload).
func run(ctx context.Context, args []string, getenv func(string) string, logOut io.Writer, ready func(metricsAddr string), hup <-chan os.Signal) error {
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
	if _, err := store.EnsureMeta(ctx, rdb, cfg.Meta()); err != nil { // fixed fields only: the throttler writes the settings
		return err
	}
	reg := prometheus.NewRegistry()
	httpserver.RegisterProcessMetrics(reg)
	files, err := newFileSecrets(cfg)
	if err != nil {
		return err
	}
	w, cb, maxTimeout, closeClient, err := newWorker(cfg, rdb, reg, log, files)
	if err != nil {
		return err
	}
	defer closeClient()
	stopHUP := config.OnSignal(ctx, hup, func(context.Context) {
		log.Info("SIGHUP: reloading the configuration's webhook secrets")
		files.reload(args, getenv, log)
	})
	defer stopHUP()
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer w.Stop()
	if err := cb.Start(ctx); err != nil {
		return err
	}
	defer cb.Stop()
	stopMetrics, addr, err := httpserver.StartMetrics(metricsAddr, reg, log)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	defer stopMetrics()
	arb, err := cfg.Redis.Client() // asynq's own: its dequeue gate answers idle polls
	if err != nil {
		return err
	}
	var stuck *worker.StuckError
	defer func() {
		if stuck == nil { // stuck servers still use it, and asynq panics when it closes under them
			_ = arb.Close()
		}
	}()
	httpserver.RegisterRedisPoolMetrics(reg, map[string]redis.UniversalClient{"sluice": rdb, "asynq": arb})
	stopGate, err := w.StartGate(ctx, rdb, arb, cfg.Worker.IdlePoll)
	if err != nil {
		return err
	}
	defer stopGate()
	err = worker.Serve(ctx, arb, w, worker.ServersConfig{Concurrency: cfg.Worker.Concurrency, Fetchers: cfg.Worker.Fetchers,
		TaskCheckInterval: cfg.Worker.TaskCheckInterval, ShutdownTimeout: cfg.Worker.ShutdownTimeout, Lead: cfg.Dispatch.Lead,
		MaxTimeout: maxTimeout, Logger: log, AsynqLogLevel: cfg.Log.AsynqSlogLevel(), LogAttrs: []any{"metrics", addr, "version", version.String()}}, func() {
		if ready != nil {
			ready(addr)
		}
	})
	if errors.As(err, &stuck) {
		log.Info("stopped, leaving asynq's servers behind")
	} else {
		log.Info("stopped")
	}
	return err
}

// newWorker builds the Worker: the Store, the webhook executor (closed by
// the returned func, signing with files' secrets) and the file's settings;
// and the callback sender, on the executor's client and signing keys. It also returns the largest
// configured attempt timeout.
func newWorker(cfg *config.Config, rdb redis.UniversalClient, reg *prometheus.Registry, log *slog.Logger, files *fileSecrets) (*worker.Worker, *worker.Callbacks, time.Duration, func(), error) {
	st, err := store.NewStore(rdb, storeConfig(cfg))
	if err != nil {
		return nil, nil, 0, nil, err
	}
	allow, err := cfg.Egress.Prefixes()
	if err != nil {
		return nil, nil, 0, nil, fmt.Errorf("egress.allow: %w", err)
	}
	ring, err := cfg.Secrets.Keyring()
	if err != nil {
		return nil, nil, 0, nil, fmt.Errorf("secrets: %w", err)
	}
	exec, maxTimeout, err := worker.NewWebhookExecutor(allow, cfg.Defaults, cfg.Tenants, st, ring, cfg.Worker.Concurrency)
	if err != nil {
		return nil, nil, 0, nil, err
	}
	exec.Signing.File = files.File     // the file's secrets, swapped on SIGHUP
	ups := worker.NewUpstreamCache(st) // one read per upstream and second, for the cost headers and the worker
	if exec.Costs, err = worker.NewCostReader(ups, reg, log); err != nil {
		exec.Close()
		return nil, nil, 0, nil, err
	}
	// The circuits follow the deployment's settings as the Worker reads
	// them from <prefix>:meta; jobs run only once w is set.
	var w *worker.Worker
	if exec.Circuits, err = worker.NewCircuits(worker.CircuitsConfig{Store: st, Settings: func() wire.Settings { return w.Settings() },
		Registerer: reg, Logger: log}); err != nil {
		exec.Close()
		return nil, nil, 0, nil, err
	}
	cb, err := worker.NewCallbacks(worker.CallbacksConfig{Store: st, Client: exec.Client, Signing: exec.Signing,
		Redis: rdb, Prefix: cfg.Redis.Prefix, Registerer: reg, Logger: log})
	if err != nil {
		exec.Close()
		return nil, nil, 0, nil, err
	}
	// The Coalescer turns the claims and finishes of one shard that meet in
	// time into one script call each (store.NewCoalescer).
	w, err = worker.New(worker.Config{Store: store.NewCoalescer(st, 0), Redis: rdb, Executor: exec, Prefix: cfg.Redis.Prefix,
		Concurrency: cfg.Worker.Concurrency, MinLead: cfg.Dispatch.MinLead, TaskCheckInterval: cfg.Worker.TaskCheckInterval,
		Settings: cfg.Meta().Settings, Registerer: reg, Logger: log, Upstreams: st,
		UpstreamRates: st, UpstreamCache: ups})
	if err != nil {
		exec.Close()
		return nil, nil, 0, nil, err
	}
	return w, cb, maxTimeout, exec.Close, nil
}

// parseFlags reads --config and --metrics-listen (default
// $SLUICE_METRICS_LISTEN, else 127.0.0.1:9091; "off" gives ""), then the
// configuration through config.FromFlags.
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

// storeConfig is the store.Config of cfg (as the throttler builds it):
// redis.prefix and shards, the canceled and idempotency retention,
// redis.wait_replicas and wait_timeout; redis.memory_high_water, up to
// which finishes keep results' bodies.
func storeConfig(cfg *config.Config) store.Config {
	return store.Config{Prefix: cfg.Redis.Prefix, Shards: cfg.Redis.Shards,
		CanceledRetention: cfg.Retention.Canceled, IdempotencyRetention: cfg.Retention.Idempotency,
		WaitReplicas: cfg.Redis.WaitReplicas, WaitTimeout: cfg.Redis.WaitTimeout, MemoryHighWater: cfg.Redis.HighWater()}
}
