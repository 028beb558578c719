package dispatch

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/store"
)

// MaxLabeledTenants bounds the tenants that get their own label values in
// the state metrics: the configured tenants, at most this many (the first
// in the order given). Every other tenant is visible through the API only.
const MaxLabeledTenants = 100

// stateScrapeTimeout bounds the Redis reads of one scrape.
const stateScrapeTimeout = 2 * time.Second

// StateSource is what the state collector reads: the Store's tenant state,
// in-flight count and worker capacity.
type StateSource interface {
	TenantState(ctx context.Context, tenant string) (store.TenantState, error)
	InFlight(ctx context.Context) (int, error)
	Capacity(ctx context.Context) (int, error)
}

var _ StateSource = (*store.Store)(nil)

// StateCollector is a Prometheus collector that reads Sluice's state from
// Redis at scrape time: per labeled tenant its backlog, running jobs, dead
// letters, pause state and configured rate; the jobs in flight and the
// workers' capacity; and the sizes of the asynq queues Sluice feeds, read
// cheaply (LLEN / ZCARD, never asynq's Inspector). A failed read is left out
// of the scrape and logged.
type StateCollector struct {
	src     StateSource
	rdb     redis.UniversalClient
	tenants []string
	queues  []string
	log     *slog.Logger

	backlog, running, dead, paused, rate, effRate *prometheus.Desc
	inflight, capacity, queueSize                 *prometheus.Desc
}

var _ prometheus.Collector = (*StateCollector)(nil)

// NewStateCollector builds the collector for tenants (capped at
// MaxLabeledTenants) and the asynq queues named.
func NewStateCollector(src StateSource, rdb redis.UniversalClient, tenants, queues []string, log *slog.Logger) *StateCollector {
	if len(tenants) > MaxLabeledTenants {
		tenants = tenants[:MaxLabeledTenants]
	}
	t := []string{"tenant"}
	return &StateCollector{
		src: src, rdb: rdb, tenants: tenants, queues: queues, log: log,
		backlog:   prometheus.NewDesc("sluice_tenant_backlog_jobs", "Jobs toward max_backlog (scheduled, queued, released, retrying), per labeled tenant.", t, nil),
		running:   prometheus.NewDesc("sluice_tenant_running_jobs", "Jobs claimed and not finished, per labeled tenant.", t, nil),
		dead:      prometheus.NewDesc("sluice_tenant_dead_letters", "Entries in the tenant's dead set, per labeled tenant.", t, nil),
		paused:    prometheus.NewDesc("sluice_tenant_paused", "1 while the tenant cannot send: admin-paused, upstream-paused or disabled by a 410.", []string{"tenant", "reason"}, nil),
		rate:      prometheus.NewDesc("sluice_tenant_rate_per_second", "The tenant's configured dispatch rate (policy rate), per labeled tenant.", t, nil),
		effRate:   prometheus.NewDesc("sluice_tenant_effective_rate_per_second", "The tenant's effective dispatch rate: the configured rate times the adaptive rate factor.", t, nil),
		inflight:  prometheus.NewDesc("sluice_inflight_jobs", "Jobs released or running, over every shard.", nil, nil),
		capacity:  prometheus.NewDesc("sluice_worker_capacity", "Sum of the live workers' concurrency (heartbeats).", nil, nil),
		queueSize: prometheus.NewDesc("sluice_asynq_queue_tasks", "Tasks in the asynq queues Sluice feeds, by queue and state.", []string{"queue", "state"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *StateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.backlog, c.running, c.dead, c.paused, c.rate, c.effRate, c.inflight, c.capacity, c.queueSize} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *StateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), stateScrapeTimeout)
	defer cancel()
	for _, tn := range c.tenants {
		st, err := c.src.TenantState(ctx, tn)
		if err != nil {
			c.log.Warn("state metrics: tenant state", "tenant", tn, "err", err)
			continue
		}
		c.tenantMetrics(ch, tn, st)
	}
	if n, err := c.src.InFlight(ctx); err == nil {
		ch <- prometheus.MustNewConstMetric(c.inflight, prometheus.GaugeValue, float64(n))
	}
	if n, err := c.src.Capacity(ctx); err == nil {
		ch <- prometheus.MustNewConstMetric(c.capacity, prometheus.GaugeValue, float64(n))
	}
	c.queueMetrics(ctx, ch)
}

func (c *StateCollector) tenantMetrics(ch chan<- prometheus.Metric, tn string, st store.TenantState) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(c.backlog, float64(st.Backlog), tn)
	gauge(c.running, float64(st.Running), tn)
	gauge(c.dead, float64(st.DeadLetters), tn)
	gauge(c.paused, b2f(st.AdminPaused || st.AdminUntil.After(st.Now)), tn, "admin")
	gauge(c.paused, b2f(st.PausedUntil.After(st.Now)), tn, "upstream")
	gauge(c.paused, b2f(st.Disabled), tn, "disabled")
	if st.Policy.RateUS > 0 {
		gauge(c.rate, 1e6/float64(st.Policy.RateUS), tn)
		gauge(c.effRate, st.EffectiveRate(), tn)
	}
}

// asynqStates are the states of asynq v0.26's per-queue keys
// (AsynqQueueKey): LISTs then ZSETs.
var asynqStates = []struct {
	name string
	list bool
}{{"pending", true}, {"active", true}, {"scheduled", false}, {"retry", false}, {"archived", false}, {"completed", false}}

func (c *StateCollector) queueMetrics(ctx context.Context, ch chan<- prometheus.Metric) {
	if len(c.queues) == 0 {
		return
	}
	pipe := c.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, 0, len(c.queues)*len(asynqStates))
	for _, q := range c.queues {
		for _, s := range asynqStates {
			key := AsynqQueueKey(q, s.name)
			if s.list {
				cmds = append(cmds, pipe.LLen(ctx, key))
			} else {
				cmds = append(cmds, pipe.ZCard(ctx, key))
			}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		c.log.Warn("state metrics: asynq queue sizes", "err", err)
		return
	}
	for i, q := range c.queues {
		for j, s := range asynqStates {
			n := cmds[i*len(asynqStates)+j].Val()
			ch <- prometheus.MustNewConstMetric(c.queueSize, prometheus.GaugeValue, float64(n), q, s.name)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
