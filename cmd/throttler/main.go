// Command throttler is Sluice's API server: it reads the configuration,
// connects to Redis, serves the HTTP API and /metrics, and shuts down
// gracefully on SIGTERM or SIGINT.
//
//	throttler [--config PATH]
//
// See DESIGN §7 for the configuration; SLUICE_CONFIG, SLUICE_REDIS_URL and
// SLUICE_LISTEN override it.
package main

import (
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
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/api"
	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/config"
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

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	opts, err := apiOptions(cfg, rdb, batcher, reg, log)
	if err != nil {
		return err
	}
	srv, err := api.New(opts)
	if err != nil {
		return err
	}
	return serve(ctx, cfg.Listen, srv.Handler(), log, ready)
}

// apiOptions builds one limiter per configured limit, all sharing batcher.
func apiOptions(cfg *config.Config, rdb redis.UniversalClient, batcher *bucket.Batcher, reg *prometheus.Registry, log *slog.Logger) (api.Options, error) {
	opts := api.Options{
		Keys:         cfg.Auth.ByHash(),
		Limits:       map[string]api.Limit{},
		Redis:        rdb,
		Registry:     reg,
		Logger:       log,
		MaxBodyBytes: int64(cfg.LimitsBytes.MaxBatchBytes),
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
