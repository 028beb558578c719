package dispatch

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/store"
)

// tenantCache holds the tenant series of the last complete read
// (StateConfig.CacheFor) and the read under way, if any.
type tenantCache struct {
	mu      sync.Mutex
	at      time.Time     // when series were read; zero: never
	took    time.Duration // how long that read took
	series  []prometheus.Metric
	running chan struct{} // the read under way (closed when it ends); nil: none
}

// Bounds of a read of the tenant series (StateCollector's readTimeout and
// scrapeWait; tests change them). A read is the shards' aggregates (one
// script a shard, store.Observe) and the TopTenants labeled tenants' states:
// milliseconds, whatever the tenant count. It runs in the background, one
// at a time, bounded by tenantReadTimeout; a scrape waits for it at most
// tenantScrapeWait and otherwise answers the series of the read before.
const (
	tenantReadTimeout = time.Minute
	tenantScrapeWait  = stateScrapeTimeout
)

// StateCostFactor bounds the reads' share of the time: a read's series
// serve the scrapes for CacheFor or this many times the read's duration,
// whichever is longer — at most 1/StateCostFactor of the time reading
// however often Prometheus scrapes (a guard: a read of the aggregates takes
// milliseconds, so CacheFor decides).
const StateCostFactor = 20

// fresh reports whether the cached series serve a scrape now. Called with
// the cache's lock held.
func (c *StateCollector) fresh() bool {
	return !c.cache.at.IsZero() && time.Since(c.cache.at) < max(c.cfg.CacheFor, time.Duration(c.costFactor)*c.cache.took)
}

// tenantSeries returns the tenant series: those of the last read while
// they are fresh (CacheFor, or StateCostFactor times the read's duration);
// else a new read is started (unless one is under
// way) and waited for up to scrapeWait or ctx's end, and the series
// are the newest complete read's — the previous one's when the new read has
// not ended (nil before the first ends). Concurrent scrapes share one read.
func (c *StateCollector) tenantSeries(ctx context.Context) []prometheus.Metric {
	c.cache.mu.Lock()
	if c.cache.running == nil && !c.fresh() {
		done := make(chan struct{})
		c.cache.running = done
		go c.refreshTenants(done)
	}
	running := c.cache.running
	c.cache.mu.Unlock()
	if running != nil {
		wait := time.NewTimer(c.scrapeWait)
		defer wait.Stop()
		select {
		case <-running:
		case <-wait.C:
		case <-ctx.Done():
		}
	}
	c.cache.mu.Lock()
	defer c.cache.mu.Unlock()
	return c.cache.series
}

// refreshTenants is one read of the tenant series into the cache; done is
// closed when it ends. A failed read keeps the series before (logged).
func (c *StateCollector) refreshTenants(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), c.readTimeout)
	defer cancel()
	start := time.Now()
	series, err := c.readTenants(ctx)
	c.cache.mu.Lock()
	defer c.cache.mu.Unlock()
	if err != nil {
		c.log.Warn("state metrics: tenants", "err", err)
	} else {
		c.cache.at, c.cache.took, c.cache.series = time.Now(), time.Since(start), series
	}
	c.cache.running = nil
	close(done)
}

// readTenants reads the shards' aggregates (store.Observe: the totals and
// the TopTenants largest backlogs, ties by id), labels those tenants from
// their full state (one script each) and gives OtherTenants the totals
// less theirs. Its cost: one script a shard plus TopTenants, whatever the
// tenant count; the series it yields: at most TopTenants + 1 per metric.
func (c *StateCollector) readTenants(ctx context.Context) ([]prometheus.Metric, error) {
	obs, err := c.src.Observe(ctx, store.ObserveOptions{Top: c.cfg.TopTenants, Clean: true})
	if err != nil {
		return nil, err
	}
	var out []prometheus.Metric
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		out = append(out, prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...))
	}
	rest := otherOf(obs)
	for _, tb := range obs.Top {
		st, err := c.src.TenantState(ctx, tb.Tenant)
		if err != nil {
			return nil, err
		}
		c.labeled(gauge, st)
		rest.take(st)
	}
	if obs.Tenants > int64(len(obs.Top)) {
		c.other(gauge, rest)
	}
	return out, nil
}

// others is what the unlabeled tenants hold together: the totals less the
// labeled tenants'. The backlogs are the observation's own (exact at its
// read); the rest is taken from the labeled states read just after, so it
// may be off by what changed in between (never below 0).
type others struct {
	backlog, running, dead, admin, upstream, disabled int64
}

func otherOf(o store.Observation) others {
	r := others{backlog: o.Backlog, running: o.Running, dead: o.DeadLetters, admin: o.AdminPaused,
		upstream: o.UpstreamPaused, disabled: o.Disabled}
	for _, tb := range o.Top {
		r.backlog -= tb.Backlog
	}
	return r
}

// take removes a labeled tenant's figures (but its backlog, see others).
func (r *others) take(st store.TenantState) {
	r.running -= st.Running
	r.dead -= st.DeadLetters
	if st.AdminPaused || st.AdminUntil.After(st.Now) {
		r.admin--
	}
	if st.PausedUntil.After(st.Now) {
		r.upstream--
	}
	if st.Disabled {
		r.disabled--
	}
}

type gaugeFunc func(d *prometheus.Desc, v float64, labels ...string)

// labeled yields one labeled tenant's series.
func (c *StateCollector) labeled(gauge gaugeFunc, st store.TenantState) {
	tn := st.Tenant
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
	if paced, ok := st.PacedRate(); ok {
		gauge(c.paced, paced, tn)
	}
	f := st.Forecast()
	gauge(c.oldest, f.OldestJobAge.Seconds(), tn)
	if f.DrainKnown {
		gauge(c.drain, f.DrainETA.Seconds(), tn)
	}
}

// other yields the series of the unlabeled tenants: backlog, running and
// dead letters summed, and per pause reason the tenants so paused.
func (c *StateCollector) other(gauge gaugeFunc, r others) {
	for _, m := range []struct {
		d      *prometheus.Desc
		v      int64
		reason string
	}{{c.backlog, r.backlog, ""}, {c.running, r.running, ""}, {c.dead, r.dead, ""},
		{c.paused, r.admin, "admin"}, {c.paused, r.upstream, "upstream"}, {c.paused, r.disabled, "disabled"}} {
		labels := []string{OtherTenants}
		if m.reason != "" {
			labels = append(labels, m.reason)
		}
		gauge(m.d, float64(max(m.v, 0)), labels...)
	}
}
