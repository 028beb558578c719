// Command throttler is Sluice's API server and dispatcher: it reads the
// configuration, connects to Redis, serves the HTTP API and /metrics, runs
// the dispatch loops (internal/dispatch) and shuts down gracefully on
// SIGTERM or SIGINT.
//
//	throttler [--config PATH]
//
// See DESIGN §7 for the configuration; SLUICE_CONFIG, SLUICE_REDIS_URL and
// SLUICE_LISTEN override it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/api"
	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// shutdownTimeout bounds the graceful drain of in-flight HTTP requests.
const shutdownTimeout = 10 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr, nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "throttler:", err)
		os.Exit(1)
	}
}

// run serves until ctx is done, then drains. ready, when not nil, is called
// with the listening address once the server accepts connections.
func run(ctx context.Context, args []string, getenv func(string) string, logOut io.Writer, ready func(addr string)) error {
	cfg, err := config.FromFlags(args, getenv)
	if err != nil {
		return err
	}
	log := cfg.Log.NewLogger(logOut)
	for _, k := range cfg.Auth.Keys {
		if k.FromPlaintext {
			log.Warn("API key given in plaintext: for local use only, list it by sha256 in production", "key", k.Name)
		}
	}
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

	if _, err := store.EnsureMeta(ctx, rdb, wire.Meta{
		Prefix: cfg.Redis.Prefix, Shards: cfg.Redis.Shards, Lead: cfg.Dispatch.Lead, MinLead: cfg.Dispatch.MinLead,
	}); err != nil {
		return err
	}
	st, err := store.NewStore(rdb, store.Config{
		Prefix: cfg.Redis.Prefix, Shards: cfg.Redis.Shards, CanceledRetention: cfg.Retention.Canceled,
		IdempotencyRetention: cfg.Retention.Idempotency,
	})
	if err != nil {
		return err
	}
	if err := seedPolicies(ctx, st, cfg, log); err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	opts, err := apiOptions(cfg, rdb, batcher, reg, log)
	if err != nil {
		return err
	}
	opts.Store = st
	srv, err := api.New(opts)
	if err != nil {
		return err
	}
	reg.MustRegister(dispatch.NewStateCollector(st, rdb, labeledTenants(cfg), sluiceQueues(cfg), log))
	disp, err := newDispatcher(cfg, rdb, st, reg, log)
	if err != nil {
		return err
	}
	// The dispatcher starts once the API is built and stops after the HTTP
	// drain, before Redis is closed (deferred above, so it runs later).
	if err := disp.Start(ctx); err != nil {
		return err
	}
	defer disp.Stop()
	return serve(ctx, cfg.Listen, srv.Handler(), log, ready)
}

// newDispatcher builds the dispatch loops (DESIGN §2.2) from the dispatch
// timing and the retention the sweep applies to jobs it retires.
func newDispatcher(cfg *config.Config, rdb redis.UniversalClient, st *store.Store, reg *prometheus.Registry, log *slog.Logger) (*dispatch.Dispatcher, error) {
	return dispatch.New(dispatch.Config{
		Store:  st,
		Asynq:  asynq.NewClientFromRedisClient(rdb),
		Redis:  rdb,
		Prefix: cfg.Redis.Prefix,
		Pass: store.PassConfig{
			Lead:             cfg.Dispatch.Lead,
			MinLead:          cfg.Dispatch.MinLead,
			Grace:            cfg.Dispatch.Grace,
			MaxPromotions:    cfg.Dispatch.MaxPromotions,
			MaxTenants:       cfg.Dispatch.MaxTenants,
			DeadRetention:    cfg.Retention.Dead,
			DeadMaxPerTenant: cfg.Retention.DeadMaxPerTenant,
			AttemptLog:       cfg.Retention.AttemptLog,
		},
		Registerer: reg,
		Logger:     log.With("component", "dispatcher"),
	})
}

// apiOptions builds one limiter per configured limit, all sharing batcher.
func apiOptions(cfg *config.Config, rdb redis.UniversalClient, batcher *bucket.Batcher, reg *prometheus.Registry, log *slog.Logger) (api.Options, error) {
	allow, err := cfg.Egress.Prefixes()
	if err != nil {
		return api.Options{}, err
	}
	opts := api.Options{
		EgressAllow:   allow,
		Keys:          cfg.Auth.ByHash(),
		Limits:        map[string]api.Limit{},
		Redis:         rdb,
		Registry:      reg,
		Logger:        log,
		MaxBodyBytes:  int64(cfg.LimitsBytes.MaxBatchBytes),
		TaskQueues:    cfg.TaskQueues,
		Defaults:      cfg.Defaults,
		MaxJobBytes:   int64(cfg.LimitsBytes.MaxJobBytes),
		MaxBatchBytes: int64(cfg.LimitsBytes.MaxBatchBytes),
	}
	for name, lc := range cfg.Limits {
		lim, err := bucket.NewLimiter(rdb, cfg.Redis.Prefix, name, lc.Bucket(), bucket.WithBatcher(batcher))
		if err != nil {
			return api.Options{}, fmt.Errorf("limit %q: %w", name, err)
		}
		if name == config.APILimitName {
			opts.APILimiter, opts.APILimit, opts.APIFailOpen = lim, lc.Bucket(), lc.FailsOpen()
			continue
		}
		opts.Limits[name] = api.Limit{Limiter: lim, Limit: lc.Bucket()}
	}
	return opts, nil
}

// seedPolicies writes the configuration's policy to Redis (DESIGN §3): the
// defaults to every shard's "*" entry, on every start (the file is their
// only source), and each configured tenant's overrides only when the tenant
// has none yet (If-Match version 0), so a restart never reverts a change
// made through PUT /v1/tenants/{tenant}/policy; a tenant whose stored
// overrides differ from the file is logged and left as stored.
func seedPolicies(ctx context.Context, st *store.Store, cfg *config.Config, log *slog.Logger) error {
	defaults := store.ParamsFromPolicy(policy.Resolve(cfg.Defaults))
	if err := st.SeedDefaults(ctx, defaults); err != nil {
		return err
	}
	view, _ := json.Marshal(defaults.View()) // cannot fail: plain fields
	log.Info("seeded policy defaults", "shards", st.Shards(), "policy", string(view))
	for _, tenant := range slices.Sorted(maps.Keys(cfg.Tenants)) {
		o := store.OverridesFromPolicy(cfg.Tenants[tenant])
		version, err := st.PutTenantPolicy(ctx, tenant, o, 0)
		switch {
		case err == nil:
			log.Info("seeded tenant policy", "tenant", tenant, "version", version)
		case errors.Is(err, store.ErrVersionMismatch):
			if err := compareTenantPolicy(ctx, st, tenant, o, log); err != nil {
				return err
			}
		default:
			return fmt.Errorf("seed policy of tenant %q: %w", tenant, err)
		}
	}
	return nil
}

// compareTenantPolicy logs a warning when tenant's stored overrides differ
// from the configuration's.
func compareTenantPolicy(ctx context.Context, st *store.Store, tenant string, file store.Overrides, log *slog.Logger) error {
	rec, err := st.TenantPolicy(ctx, tenant)
	if err != nil {
		return fmt.Errorf("compare policy of tenant %q: %w", tenant, err)
	}
	stored, _ := json.Marshal(rec.Overrides) // cannot fail: plain fields
	want, _ := json.Marshal(file)
	if string(stored) != string(want) {
		log.Warn("tenant policy in Redis differs from the configuration file; keeping Redis's (change it with PUT /v1/tenants/{tenant}/policy)",
			"tenant", tenant, "version", rec.Version, "redis", string(stored), "file", string(want))
		return nil
	}
	log.Info("tenant policy already seeded", "tenant", tenant, "version", rec.Version)
	return nil
}

// serve runs the HTTP server on addr until ctx is done, then stops
// accepting and drains in-flight requests for up to shutdownTimeout.
func serve(ctx context.Context, addr string, h http.Handler, log *slog.Logger, ready func(string)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	log.Info("throttler listening", "addr", ln.Addr().String())
	if ready != nil {
		ready(ln.Addr().String())
	}
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: draining in-flight requests", "timeout", shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	<-served
	log.Info("stopped")
	return nil
}

// labeledTenants are the tenants the state metrics label: the configured
// ones, sorted (the collector caps them at dispatch.MaxLabeledTenants).
func labeledTenants(cfg *config.Config) []string {
	return slices.Sorted(maps.Keys(cfg.Tenants))
}

// sluiceQueues are the asynq queues Sluice feeds: webhook, http and the
// task queues of the allow-list.
func sluiceQueues(cfg *config.Config) []string {
	return append([]string{wire.WebhookQueue(cfg.Redis.Prefix), wire.HTTPQueue(cfg.Redis.Prefix)}, cfg.TaskQueues...)
}
