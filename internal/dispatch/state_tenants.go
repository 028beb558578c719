package dispatch

import (
	"cmp"
	"context"
	"slices"
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
// scrapeWait; tests change them). A read walks every tenant (a few commands
// each): seconds at 100 000 tenants, more than a scrape's budget. So it
// runs in the background, one at a time, bounded by tenantReadTimeout; a
// scrape waits for it at most tenantScrapeWait and otherwise answers the
// series of the read before.
const (
	tenantReadTimeout = time.Minute
	tenantScrapeWait  = stateScrapeTimeout
)

// StateCostFactor bounds the reads' share of the time: a read's series
// serve the scrapes for CacheFor or this many times the read's duration,
// whichever is longer — at most 1/StateCostFactor of the time walking the
// tenants however often Prometheus scrapes (at 100 000 tenants a walk
// takes seconds: a new one every minute or two, not every CacheFor).
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

// readTenants reads every tenant's summary (store.Tenants), labels the
// TopTenants largest backlogs (ties by id) from their full state (one
// script each) and sums the others under OtherTenants. Its cost per read:
// the summary walk (a few commands per tenant with state) plus TopTenants
// scripts; the series it yields: at most TopTenants + 1 per metric.
func (c *StateCollector) readTenants(ctx context.Context) ([]prometheus.Metric, error) {
	all, err := c.src.Tenants(ctx)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(all, func(a, b store.TenantSummary) int {
		return cmp.Or(cmp.Compare(b.Backlog, a.Backlog), cmp.Compare(a.Tenant, b.Tenant))
	})
	top := all[:min(len(all), c.cfg.TopTenants)]
	var out []prometheus.Metric
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		out = append(out, prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...))
	}
	for _, sum := range top {
		st, err := c.src.TenantState(ctx, sum.Tenant)
		if err != nil {
			return nil, err
		}
		c.labeled(gauge, st)
	}
	if rest := all[len(top):]; len(rest) > 0 {
		c.other(gauge, rest)
	}
	return out, nil
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

// other yields the series of the unlabeled tenants: backlog, running, dead
// letters and pauses summed (a pause series counts the tenants so paused),
// the oldest job's age their maximum.
func (c *StateCollector) other(gauge gaugeFunc, rest []store.TenantSummary) {
	var backlog, running, dead, admin, upstream, disabled float64
	var oldest time.Duration
	for _, s := range rest {
		backlog += float64(s.Backlog)
		running += float64(s.Running)
		dead += float64(s.DeadLetters)
		admin += b2f(s.AdminPaused || s.AdminUntil.After(s.Now))
		upstream += b2f(s.PausedUntil.After(s.Now))
		disabled += b2f(s.Disabled)
		oldest = max(oldest, s.OldestJobAge())
	}
	gauge(c.backlog, backlog, OtherTenants)
	gauge(c.running, running, OtherTenants)
	gauge(c.dead, dead, OtherTenants)
	gauge(c.paused, admin, OtherTenants, "admin")
	gauge(c.paused, upstream, OtherTenants, "upstream")
	gauge(c.paused, disabled, OtherTenants, "disabled")
	gauge(c.oldest, oldest.Seconds(), OtherTenants)
}
