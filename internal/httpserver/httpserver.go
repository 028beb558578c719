// Package httpserver runs the binaries' HTTP servers (the throttler's API,
// the worker's /metrics) with Sluice's timeouts and a graceful drain.
//
// It also registers both binaries' runtime metrics: RegisterProcessMetrics
// (client_golang's Go and process collectors and go_gc_heap_live_bytes)
// and RegisterRedisPoolMetrics (each Redis client's pool).
package httpserver

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/version"
)

// How long a shutdown drains in-flight requests.
const (
	DrainDefault        = 10 * time.Second // Serve
	BackgroundDrainTime = 2 * time.Second  // Start's stop
)

// newServer is an http.Server for h with Sluice's timeouts, logging its
// errors to log at warn level.
func newServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// Serve listens on addr and serves h until ctx is done, then stops
// accepting and drains in-flight requests for up to DrainDefault. ready,
// when not nil, is called with the bound address once connections are
// accepted. It logs "<name> listening" with the address, the drain and
// "stopped" to log.
func Serve(ctx context.Context, name, addr string, h http.Handler, log *slog.Logger, ready func(addr string)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	hs := newServer(h, log)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	log.Info(name+" listening", "addr", ln.Addr().String(), "version", version.String())
	if ready != nil {
		ready(ln.Addr().String())
	}
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: draining in-flight requests", "timeout", DrainDefault)
	sctx, cancel := context.WithTimeout(context.Background(), DrainDefault)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	<-served
	log.Info("stopped")
	return nil
}

// Start serves h on addr in the background until the returned stop is
// called (which drains for up to BackgroundDrainTime); bound is the bound
// address. With addr "" it serves nothing: stop does nothing, bound is "".
func Start(addr string, h http.Handler, log *slog.Logger) (stop func(), bound string, err error) {
	if addr == "" {
		return func() {}, "", nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("listen on %s: %w", addr, err)
	}
	hs := newServer(h, log)
	go func() { _ = hs.Serve(ln) }()
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), BackgroundDrainTime)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}, ln.Addr().String(), nil
}

// StartMetrics is Start with reg's metrics on GET /metrics.
func StartMetrics(addr string, reg *prometheus.Registry, log *slog.Logger) (stop func(), bound string, err error) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return Start(addr, mux, log)
}

// RegisterProcessMetrics registers the Go runtime's and the process's
// metrics with reg: client_golang's defaults (go_memstats_*, go_goroutines,
// process_*) and go_gc_heap_live_bytes, the heap the last GC found live —
// the figure to compare between two moments for growth, where
// go_memstats_heap_alloc_bytes also counts the garbage not yet collected
// (up to the live heap again with GOGC=100).
func RegisterProcessMetrics(reg prometheus.Registerer) {
	reg.MustRegister(
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
			collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}

// RegisterRedisPoolMetrics registers the connection pools of clients
// (name → client, the label client) with reg, read at each scrape:
// sluice_redis_pool_connections{client, state="idle"|"in_use"} and
// sluice_redis_pool_dials_total{client} (a connection the pool had to
// open: go-redis's misses). A pool keeps what it opened at its busiest
// moment, so the connections (and their read and write buffers,
// config.RedisBufferSize each) are the figure that explains a process's
// heap high-water mark.
func RegisterRedisPoolMetrics(reg prometheus.Registerer, clients map[string]redis.UniversalClient) {
	reg.MustRegister(poolCollector(clients))
}

var (
	poolConns = prometheus.NewDesc("sluice_redis_pool_connections",
		"Connections in the Redis client's pool, by state (idle, in_use).", []string{"client", "state"}, nil)
	poolDials = prometheus.NewDesc("sluice_redis_pool_dials_total",
		"Connections the Redis client's pool opened because none was idle.", []string{"client"}, nil)
)

type poolCollector map[string]redis.UniversalClient

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- poolConns
	ch <- poolDials
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	for name, client := range c {
		s := client.PoolStats()
		ch <- prometheus.MustNewConstMetric(poolConns, prometheus.GaugeValue, float64(s.IdleConns), name, "idle")
		ch <- prometheus.MustNewConstMetric(poolConns, prometheus.GaugeValue, float64(s.TotalConns-min(s.IdleConns, s.TotalConns)), name, "in_use")
		ch <- prometheus.MustNewConstMetric(poolDials, prometheus.CounterValue, float64(s.Misses), name)
	}
}
