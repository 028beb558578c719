package dispatch

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/tuning"
	"github.com/sluicehq/sluice/internal/wire"
)

// Bounds and defaults of the state metrics' tenant labels (StateConfig).
const (
	// TopTenantsDefault is StateConfig.TopTenants' default.
	// Its value, and the two below: internal/tuning.
	TopTenantsDefault = tuning.TopTenantsDefault
	// MaxLabeledTenants bounds StateConfig.TopTenants: at most this many
	// tenants (plus OtherTenants) get label values.
	MaxLabeledTenants = tuning.MaxLabeledTenants
	// StateCacheDefault is StateConfig.CacheFor's default.
	StateCacheDefault = tuning.StateCacheDefault
	// OtherTenants is the tenant label of the tenants summed together: no
	// tenant id can be it (ids hold no underscore).
	OtherTenants = "_other"
)

// StateConfig configures a StateCollector's tenant series.
type StateConfig struct {
	// TopTenants is N: the N tenants with the largest backlogs (ties by id)
	// are re-chosen at each read and labeled; every other tenant is summed
	// under tenant="_other". 1 … MaxLabeledTenants; default
	// TopTenantsDefault.
	TopTenants int
	// CacheFor is how long one read of the tenants serves scrapes: a
	// scrape within CacheFor of the last read answers the tenant series
	// from it. Default StateCacheDefault; < 0: read at every scrape.
	CacheFor time.Duration
}

// WithDefaults returns c with every zero field set to its default, and
// TopTenants capped at MaxLabeledTenants.
func (c StateConfig) WithDefaults() StateConfig {
	c.TopTenants = min(cmp.Or(c.TopTenants, TopTenantsDefault), MaxLabeledTenants)
	c.CacheFor = cmp.Or(c.CacheFor, StateCacheDefault)
	return c
}

// stateScrapeTimeout bounds the Redis reads of one scrape.
const stateScrapeTimeout = 2 * time.Second

// StateSource is what the state collector reads: the Store's aggregates
// and tenant states, in-flight count and worker capacity.
type StateSource interface {
	Observe(ctx context.Context, o store.ObserveOptions) (store.Observation, error)
	TenantState(ctx context.Context, tenant string) (store.TenantState, error)
	InFlight(ctx context.Context) (int, error)
	Capacity(ctx context.Context) (int, error)
}

var _ StateSource = (*store.Store)(nil)

// UpstreamQuotaSource is what the collector reads for
// sluice_upstream_quota_remaining when its StateSource has it (the Store
// does): the quotas in force that pace the first limit upstreams by name
// (quota.Registry.UpstreamQuotas).
type UpstreamQuotaSource interface {
	UpstreamQuotas(ctx context.Context, limit int) (map[string]quota.UpstreamQuota, error)
}

var _ UpstreamQuotaSource = (*store.Store)(nil)

// MaxLabeledUpstreams bounds the upstream label of
// sluice_upstream_quota_remaining: the first upstreams by name, at most
// this many.
const MaxLabeledUpstreams = 100

// StateCollector is a Prometheus collector that reads Sluice's state from
// Redis at scrape time: per labeled tenant its backlog, running jobs, dead
// letters, pause state, configured and effective rate, oldest job's age
// and drain forecast (tenants.go); the jobs in flight and the workers'
// capacity; and the sizes of the asynq queues Sluice feeds, read cheaply
// (LLEN / ZCARD, never asynq's Inspector). A failed read is left out of the
// scrape and logged.
type StateCollector struct {
	src    StateSource
	rdb    redis.UniversalClient
	cfg    StateConfig
	queues []string
	log    *slog.Logger
	cache  tenantCache
	// readTimeout bounds a read of the tenant series, scrapeWait a
	// scrape's wait for it (tenantReadTimeout, tenantScrapeWait);
	// costFactor spaces slow reads (StateCostFactor; 0: CacheFor alone).
	readTimeout, scrapeWait time.Duration
	costFactor              int

	backlog, running, dead, paused, rate, effRate, paced, oldest, drain *prometheus.Desc
	inflight, capacity, queueSize, upQuota                              *prometheus.Desc
}

var _ prometheus.Collector = (*StateCollector)(nil)

// NewStateCollector builds the collector (cfg completed with WithDefaults)
// for the asynq queues named.
func NewStateCollector(src StateSource, rdb redis.UniversalClient, cfg StateConfig, queues []string, log *slog.Logger) *StateCollector {
	t := []string{"tenant"}
	return &StateCollector{
		src: src, rdb: rdb, cfg: cfg.WithDefaults(), queues: queues, log: log,
		readTimeout: tenantReadTimeout, scrapeWait: tenantScrapeWait, costFactor: StateCostFactor,
		backlog:   prometheus.NewDesc("sluice_tenant_backlog_jobs", "Jobs toward max_backlog (scheduled, queued, released, retrying), per labeled tenant.", t, nil),
		running:   prometheus.NewDesc("sluice_tenant_running_jobs", "Jobs claimed and not finished, per labeled tenant.", t, nil),
		dead:      prometheus.NewDesc("sluice_tenant_dead_letters", "Entries in the tenant's dead set, per labeled tenant.", t, nil),
		paused:    prometheus.NewDesc("sluice_tenant_paused", "1 while the tenant cannot send: admin-paused, upstream-paused or disabled by a 410.", []string{"tenant", "reason"}, nil),
		rate:      prometheus.NewDesc("sluice_tenant_rate_per_second", "The tenant's configured dispatch rate (policy rate), per labeled tenant.", t, nil),
		effRate:   prometheus.NewDesc("sluice_tenant_effective_rate_per_second", "The tenant's effective dispatch rate: the configured rate times the adaptive rate factor.", t, nil),
		paced:     prometheus.NewDesc("sluice_tenant_paced_rate", "The rate pacing by the quota the tenant's upstream reported holds it to, in the quota's unit (requests or tokens) per second; absent while pacing does not bind.", t, nil),
		oldest:    prometheus.NewDesc("sluice_tenant_oldest_job_age_seconds", "How long the tenant's oldest queued job has waited, per labeled tenant (absent for _other).", t, nil),
		drain:     prometheus.NewDesc("sluice_tenant_drain_seconds", "Drain forecast: seconds until the backlog has left at the effective rate, pauses counted; absent when disabled or paused until resumed, and for _other.", t, nil),
		inflight:  prometheus.NewDesc("sluice_inflight_jobs", "Jobs released or running, over every shard.", nil, nil),
		capacity:  prometheus.NewDesc("sluice_worker_capacity", "Sum of the live workers' concurrency (heartbeats).", nil, nil),
		queueSize: prometheus.NewDesc("sluice_asynq_queue_tasks", "Tasks in the asynq queues Sluice feeds, by queue and state.", []string{"queue", "state"}, nil),
		upQuota: prometheus.NewDesc("sluice_upstream_quota_remaining",
			"The remaining quota an upstream's answers last reported (requests or tokens), while it paces the upstream (pause_scope upstream, pacing headers) and has not reset; the first 100 upstreams by name.",
			[]string{"upstream", "unit"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *StateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.backlog, c.running, c.dead, c.paused, c.rate, c.effRate, c.paced, c.oldest, c.drain, c.inflight, c.capacity, c.queueSize, c.upQuota} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *StateCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.tenantSeries(context.Background()) { // bounded by scrapeWait
		ch <- m
	}
	ctx, cancel := context.WithTimeout(context.Background(), stateScrapeTimeout)
	defer cancel()
	if n, err := c.src.InFlight(ctx); err == nil {
		ch <- prometheus.MustNewConstMetric(c.inflight, prometheus.GaugeValue, float64(n))
	}
	if n, err := c.src.Capacity(ctx); err == nil {
		ch <- prometheus.MustNewConstMetric(c.capacity, prometheus.GaugeValue, float64(n))
	}
	c.queueMetrics(ctx, ch)
	c.upstreamQuotas(ctx, ch)
}

// upstreamQuotas sends sluice_upstream_quota_remaining for each paced
// upstream with a quota in force (UpstreamQuotaSource).
func (c *StateCollector) upstreamQuotas(ctx context.Context, ch chan<- prometheus.Metric) {
	src, ok := c.src.(UpstreamQuotaSource)
	if !ok {
		return
	}
	qs, err := src.UpstreamQuotas(ctx, MaxLabeledUpstreams)
	if err != nil {
		c.log.Warn("state metrics: upstream quotas", "err", err)
		return
	}
	for name, q := range qs {
		ch <- prometheus.MustNewConstMetric(c.upQuota, prometheus.GaugeValue, float64(q.Remaining), name, q.Unit)
	}
}

// asynqStates are the states of asynq v0.26's per-queue keys
// (wire.AsynqQueueKey): LISTs then ZSETs.
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
			key := wire.AsynqQueueKey(q, s.name)
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
