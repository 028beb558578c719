package api

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the API's Prometheus metrics. Label values are bounded: limit
// names come from the config, routes from the registered patterns.
type Metrics struct {
	Decisions   *prometheus.CounterVec // sluice_limit_decisions_total{limit, outcome}
	RedisErrors *prometheus.CounterVec // sluice_redis_errors_total{op}
	FailOpen    prometheus.Counter     // sluice_api_limiter_fail_open_total
	StorageFull prometheus.Counter     // sluice_api_storage_full_total
	// ReplicationTimeouts counts 503 replication_timeout answers by route
	// (enqueue, enqueue_batch, replay): sluice_api_replication_timeouts_total{op}.
	ReplicationTimeouts *prometheus.CounterVec
	Latency             *prometheus.HistogramVec // sluice_http_request_duration_seconds{route, code}
}

// NewMetrics builds the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_limit_decisions_total",
			Help: "Rate-limit decisions by limit name and outcome (allowed, limited).",
		}, []string{"limit", "outcome"}),
		RedisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_redis_errors_total",
			Help: "Redis calls that failed, by operation.",
		}, []string{"op"}),
		FailOpen: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_api_limiter_fail_open_total",
			Help: "Requests let through without the API's own limiter because Redis could not be reached.",
		}),
		StorageFull: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_api_storage_full_total",
			Help: "Requests answered 507 storage_full: Redis above redis.memory_high_water of its maxmemory, or out of memory (maxmemory).",
		}),
		ReplicationTimeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_api_replication_timeouts_total",
			Help: "Writes answered 503 replication_timeout: stored on the primary, confirmed by fewer replicas than redis.wait_replicas in time.",
		}, []string{"op"}),
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_http_request_duration_seconds",
			Help:    "HTTP request latency by route pattern and status code.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"route", "code"}),
	}
	reg.MustRegister(m.Decisions, m.RedisErrors, m.FailOpen, m.StorageFull, m.ReplicationTimeouts, m.Latency)
	return m
}

func outcome(allowed bool) string {
	if allowed {
		return "allowed"
	}
	return "limited"
}
