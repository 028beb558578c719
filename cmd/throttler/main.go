// Command throttler is Sluice's API server and dispatcher: it reads the
// configuration, connects to Redis, serves the HTTP API and /metrics, runs
// the dispatch loops (internal/dispatch) and shuts down gracefully on
// SIGTERM or SIGINT.
//
//	throttler [--config PATH]
//	throttler migrate --from URL [--config PATH] [--dry-run]
//	throttler rebuild-aggregates [--config PATH]
//
// The second form copies a stopped deployment from the Redis at URL to the
// one the configuration names (internal/migrate), e.g. onto a Cluster. The
// third builds every shard's observation aggregates anew from its tenants
// (store.RebuildAggregates): after a rolling upgrade from a release before
// them.
//
// See docs/design.md §7 for the configuration; SLUICE_CONFIG, SLUICE_REDIS_URL and
// SLUICE_LISTEN override it.
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

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/api"
	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/console"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/httpserver"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/store"
)

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
		fmt.Fprintln(os.Stderr, "throttler:", err)
		os.Exit(1)
	}
}

// run serves until ctx is done, then drains. ready, when not nil, is called
// with the listening address once the server accepts connections. Each
// value received on hup (SIGHUP in main; nil: none) reloads the
// configuration file (reloader), as POST /v1/admin/reload does.
func run(ctx context.Context, args []string, getenv func(string) string, logOut io.Writer, ready func(addr string), hup <-chan os.Signal) error {
	if len(args) > 0 && args[0] == "migrate" {
		return runMigrate(ctx, args[1:], getenv, logOut)
	}
	if len(args) > 0 && args[0] == "rebuild-aggregates" {
		return runRebuildAggregates(ctx, args[1:], getenv, logOut)
	}
	cfg, err := config.FromFlags(args, getenv)
	if err != nil {
		return err
	}
	log := cfg.Log.NewLogger(logOut)
	cfg.Auth.WarnPlaintextKeys(log)
	rdb, err := cfg.Redis.Client()
	if err != nil {
		return err
	}
	defer rdb.Close()
	batcher, err := bucket.NewBatcher(rdb, bucket.BatcherConfig{})
	if err != nil {
		return err
	}
	defer batcher.Close()
	before, _, err := store.WriteMeta(ctx, rdb, cfg.Meta())
	if err != nil {
		return err
	}
	if diffs := before.Diff(cfg.Meta().Settings); len(diffs) > 0 {
		log.Info("deployment settings in Redis changed to this configuration's; workers follow", "changes (before, now)", diffs)
	}
	st, err := store.NewStore(rdb, storeConfig(cfg))
	if err != nil {
		return err
	}
	warnHashListpack(ctx, rdb, log)
	if err := st.SeedPolicies(ctx, cfg.Defaults, cfg.Tenants, log); err != nil {
		return err
	}
	if err := st.SeedUpstreams(ctx, cfg.Upstreams, log); err != nil {
		return err
	}
	// The tenant index's backfill runs beside the server and is stopped and
	// waited for on the way out, before Redis is closed.
	backfillCtx, stopBackfill := context.WithCancel(ctx)
	backfillDone := make(chan struct{})
	go func() { defer close(backfillDone); backfillTenantIndex(backfillCtx, st, log) }()
	defer func() { stopBackfill(); <-backfillDone }()

	reg := prometheus.NewRegistry()
	httpserver.RegisterProcessMetrics(reg)
	httpserver.RegisterRedisPoolMetrics(reg, map[string]redis.UniversalClient{"sluice": rdb})
	opts, err := apiOptions(cfg, rdb, batcher, reg, log)
	if err != nil {
		return err
	}
	opts.Store = st
	rl := &reloader{args: args, getenv: getenv, log: log, rdb: rdb, batcher: batcher, st: st, cfg: cfg}
	opts.Reload = rl.reload
	if cfg.UI.On() { // the console's overview: a page opened finds the summary read
		opts.SummaryWarm = api.SummaryWarmDefault
	}
	srv, err := api.New(opts)
	if err != nil {
		return err
	}
	rl.srv = srv
	stopHUP := config.OnSignal(ctx, hup, func(ctx context.Context) {
		log.Info("SIGHUP: reloading the configuration")
		_, _ = rl.reload(ctx) // logged by reload
	})
	defer stopHUP()
	// The summary's warmer stops after the HTTP drain, before Redis is closed.
	if err := srv.Start(ctx); err != nil {
		return err
	}
	defer srv.Stop()
	stateCfg := dispatch.StateConfig{TopTenants: cfg.Metrics.TopTenants, CacheFor: cfg.Metrics.CacheFor}
	reg.MustRegister(dispatch.NewStateCollector(st, rdb, stateCfg, cfg.SluiceQueues(), log),
		dispatch.NewRedisCollector(rdb, log))
	disp, err := dispatch.New(dispatch.Config{Store: st, Asynq: asynq.NewClientFromRedisClient(rdb), Redis: rdb,
		Prefix: cfg.Redis.Prefix, Pass: passConfig(cfg), BatchMax: cfg.Dispatch.BatchMax, BatchSpan: cfg.Dispatch.BatchSpan,
		MaxSleep: cfg.Dispatch.MaxSleep, Registerer: reg, Logger: log.With("component", "dispatcher")})
	if err != nil {
		return err
	}
	// The dispatcher starts once the API is built and stops after the HTTP
	// drain, before Redis is closed (deferred above, so it runs later).
	if err := disp.Start(ctx); err != nil {
		return err
	}
	defer disp.Stop()
	handler := srv.Handler()
	if cfg.UI.On() { // the console at /ui/ (internal/console)
		if handler, err = console.With(handler); err != nil {
			return err
		}
	}
	return httpserver.Serve(ctx, "throttler", cfg.Listen, handler, log, ready)
}

// backfillTenantIndex runs store.BackfillTenantIndex once and logs its
// end, then store.BuildAggregates.
func backfillTenantIndex(ctx context.Context, st *store.Store, log *slog.Logger) {
	start := time.Now()
	added, err := st.BackfillTenantIndex(ctx)
	if err != nil {
		if ctx.Err() == nil {
			log.Error("tenant index backfill failed; the next start retries", "added", added, "err", err)
		}
		return
	}
	log.Info("tenant index backfill done", "added", added, "took", time.Since(start).Round(time.Millisecond))
	// Then the observation aggregates of any shard without them (a
	// deployment from before them; a new one's empty shards): built from
	// the index, so after its backfill.
	start = time.Now()
	built, err := st.BuildAggregates(ctx)
	if err != nil {
		if ctx.Err() == nil {
			log.Error("building the observation aggregates failed; the first read retries", "err", err)
		}
		return
	}
	if built > 0 {
		log.Info("observation aggregates built", "shards", built, "took", time.Since(start).Round(time.Millisecond))
	}
}

// apiOptions builds the API's options, with one limiter per configured
// limit, all sharing batcher.
func apiOptions(cfg *config.Config, rdb redis.UniversalClient, batcher *bucket.Batcher, reg *prometheus.Registry, log *slog.Logger) (api.Options, error) {
	allow, err := cfg.Egress.Prefixes()
	if err != nil {
		return api.Options{}, err
	}
	limiters, err := cfg.Limiters(rdb, batcher)
	if err != nil {
		return api.Options{}, err
	}
	ring, err := cfg.Secrets.Keyring()
	if err != nil {
		return api.Options{}, fmt.Errorf("secrets: %w", err)
	}
	fileKeys, _, err := policy.SigningKeys(cfg.Defaults, cfg.Tenants)
	if err != nil {
		return api.Options{}, err
	}
	opts := api.Options{EgressAllow: allow, Keys: cfg.Auth.ByHash(), Limits: map[string]api.Limit{}, Redis: rdb,
		Registry: reg, Logger: log, MaxBodyBytes: int64(cfg.LimitsBytes.MaxBatchBytes), TaskQueues: cfg.TaskQueues,
		Defaults: cfg.Defaults, MaxJobBytes: int64(cfg.LimitsBytes.MaxJobBytes), MaxBatchBytes: int64(cfg.LimitsBytes.MaxBatchBytes),
		RequestTimeout: cfg.Redis.RequestTimeout, Secrets: ring, MemoryHighWater: cfg.Redis.HighWater(),
		FileSigned: func(tenant string) bool { return len(fileKeys(tenant)) > 0 },
		ShardOwners: func(ctx context.Context) ([]string, error) {
			return dispatch.ShardOwners(ctx, rdb, cfg.Redis.Prefix, cfg.Redis.Shards)
		}}
	for name, lim := range limiters {
		lc := cfg.Limits[name]
		if name == config.APILimitName {
			opts.APILimiter, opts.APILimit, opts.APIFailOpen = lim, lc.Bucket(), lc.FailsOpen()
			if lc.Costs != nil {
				opts.APICosts = *lc.Costs
			}
			continue
		}
		opts.Limits[name] = api.Limit{Limiter: lim, Limit: lc.Bucket(), Shared: lc.Shared()}
	}
	return opts, nil
}

// storeConfig is the store.Config of cfg: redis.prefix and shards, the
// canceled and idempotency retention, redis.wait_replicas and
// wait_timeout; redis.memory_high_water, up to which finishes keep
// results' bodies; dispatch.planner, where the passes decide.
func storeConfig(cfg *config.Config) store.Config {
	planner := store.PlannerLua
	if cfg.Dispatch.Planner == config.PlannerGo {
		planner = store.PlannerGo
	}
	return store.Config{Prefix: cfg.Redis.Prefix, Shards: cfg.Redis.Shards,
		CanceledRetention: cfg.Retention.Canceled, IdempotencyRetention: cfg.Retention.Idempotency,
		WaitReplicas: cfg.Redis.WaitReplicas, WaitTimeout: cfg.Redis.WaitTimeout, MemoryHighWater: cfg.Redis.HighWater(),
		Planner: planner}
}

// passConfig is the dispatcher's pass bounds (docs/design.md §2.2) from cfg's
// dispatch timing and the retention the sweep applies to the jobs it
// retires.
func passConfig(cfg *config.Config) store.PassConfig {
	return store.PassConfig{
		Lead:             cfg.Dispatch.Lead,
		MinLead:          cfg.Dispatch.MinLead,
		Grace:            cfg.Dispatch.Grace,
		MaxPromotions:    cfg.Dispatch.MaxPromotions,
		MaxTenants:       cfg.Dispatch.MaxTenants,
		DeadRetention:    cfg.Retention.Dead,
		DeadMaxPerTenant: cfg.Retention.DeadMaxPerTenant,
		AttemptLog:       cfg.Retention.AttemptLog,
		Preclaim:         preclaim(cfg.Dispatch),
	}
}

// preclaim is the pass's pre-claim ε: dispatch.tolerance, or 0 (none) with
// dispatch.preclaim_disabled.
func preclaim(d config.DispatchConfig) time.Duration {
	if d.PreclaimDisabled {
		return 0
	}
	return d.Tolerance
}

// warnHashListpack logs a warning when a Redis master keeps
// hash-max-listpack-value below store.HashListpackValueWant (queued jobs
// then take about 1.5 × the memory); a Redis that refuses CONFIG GET is
// left alone (debug).
func warnHashListpack(ctx context.Context, rdb redis.UniversalClient, log *slog.Logger) {
	low, err := store.LowHashListpack(ctx, rdb)
	if err != nil {
		log.Debug("could not read Redis hash-max-listpack-value", "err", err)
		return
	}
	if len(low) > 0 {
		log.Warn(fmt.Sprintf("Redis hash-max-listpack-value is below %d: a queued job with a 1 KiB body takes about 2.2 KB of Redis "+
			"instead of 1.4 KB; set it to %d (docs/operations.md, Sizing)", store.HashListpackValueWant, store.HashListpackValueWant),
			"masters", low)
	}
}
