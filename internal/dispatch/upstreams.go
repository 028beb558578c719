package dispatch

import (
	"context"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/store"
)

// upstreamStore is what the Dispatcher needs of *store.Store for shared
// upstream quotas (issue #15): a pass that installs grants, and the
// coordinators' calls (aligned ones for jobs naming several upstreams). A
// Store without it (the loop tests' fake) runs plain passes.
type upstreamStore interface {
	PassGranted(ctx context.Context, shard int, cfg store.PassConfig, grants []quota.UpstreamGrant) (store.PassResult, error)
	GrantUpstreams(ctx context.Context, shard int, demand []quota.UpstreamDemand, cfg quota.GrantConfig) ([]quota.UpstreamGrant, error)
	AlignUpstreams(ctx context.Context, shard int, demand []quota.UpstreamDemand, aligned []quota.AlignedDemand,
		known quota.Calendars, cfg quota.GrantConfig) ([]quota.UpstreamGrant, error)
	DeadLetterUnknownUpstream(ctx context.Context, shard int, name string, cfg store.OrphanConfig) (int, bool, error)
}

var _ upstreamStore = (*store.Store)(nil)

// runPass runs s's pass with the grants its last demand got (handed to this
// pass and then dropped: a failed pass keeps them for the next).
func (d *Dispatcher) runPass(ctx context.Context, s *shardLoop, cfg store.PassConfig) (store.PassResult, error) {
	us, ok := d.cfg.Store.(upstreamStore)
	if !ok {
		return d.cfg.Store.Pass(ctx, s.shard, cfg)
	}
	res, err := us.PassGranted(ctx, s.shard, cfg, s.grants)
	if err == nil {
		s.grants = nil
	}
	return res, err
}

// askUpstreams calls the coordinators of the upstreams a pass found waiting
// without room (one pipelined call per upstream; for a set of upstreams
// that jobs naming several of them wait on, AlignUpstreams' probe and
// aligned request, with what the shard knows of their calendars,
// s.calendars) and keeps the grants for the shard's next pass. It returns
// when that pass should run: at once when a segment can be used now, else
// when the first grant becomes usable (its first segment's start − D, or
// the next grant round); zero when nothing was asked. An upstream that
// fails (not configured; Redis) is logged, and the next pass is handed an
// empty grant (for a set: an empty aligned grant) whose next round is
// MaxSleep after the pass (redisNow), so its shard asks again at that
// pace, not every D. An upstream its coordinator answered does not exist
// (deleted while jobs naming it were delayed, or just before they were
// enqueued) has the jobs of the shard's lanes naming it dead-lettered
// (deadLetterOrphans) and it is asked about again at the next pass (run at
// once while some are left; so a replay after the upstream is created
// again does not wait MaxSleep). A Redis error never dead-letters anything. Idle
// upstreams cost nothing: only a pass with jobs waiting on an upstream
// asks.
func (d *Dispatcher) askUpstreams(ctx context.Context, s *shardLoop, res store.PassResult, cfg store.PassConfig) time.Time {
	lead := cfg.Lead
	us, ok := d.cfg.Store.(upstreamStore)
	demand, redisNow := res.Demand, res.Now
	if !ok || len(demand) == 0 && len(res.Aligned) == 0 {
		return time.Time{}
	}
	if s.calendars == nil {
		s.calendars = quota.Calendars{}
	}
	var grants []quota.UpstreamGrant
	var err error
	if len(res.Aligned) == 0 { // the common case: no job naming several upstreams waits
		grants, err = us.GrantUpstreams(ctx, s.shard, demand, quota.GrantConfig{Horizon: lead})
		s.calendars.Learn(grants)
	} else {
		grants, err = us.AlignUpstreams(ctx, s.shard, demand, res.Aligned, s.calendars,
			quota.GrantConfig{Horizon: lead, Jitter: lead / 8})
	}
	if err != nil && ctx.Err() == nil {
		d.metrics.passErrors.Inc()
		d.cfg.Logger.Warn("upstream grant failed", "shard", s.shard, "err", err)
	}
	orphans := d.deadLetterOrphans(ctx, us, s.shard, quota.MissingUpstreams(err), redisNow, cfg)
	retry := func(names ...string) time.Time { // an unanswered call's next ask
		if slices.ContainsFunc(names, func(n string) bool { _, ok := orphans[n]; return ok }) {
			return redisNow // its orphans are handled: no wait (for a replay after it is created again)
		}
		return redisNow.Add(d.cfg.MaxSleep)
	}
	s.grants = append(s.grants, grants...)
	for _, dm := range demand {
		if !slices.ContainsFunc(grants, func(g quota.UpstreamGrant) bool { return g.Upstream == dm.Upstream }) {
			s.grants = append(s.grants, quota.UpstreamGrant{Upstream: dm.Upstream, Burst: 1,
				NextGrant: retry(dm.Upstream)})
		}
	}
	for _, a := range res.Aligned { // likewise a set some of whose calls failed
		if set := a.Set(); !slices.ContainsFunc(grants, func(g quota.UpstreamGrant) bool { return g.Set == set }) {
			s.grants = append(s.grants, quota.UpstreamGrant{Upstream: a.Upstreams[0], Set: set, Burst: 1,
				NextGrant: retry(a.Upstreams...)})
		}
	}
	var next time.Time
	now := d.cfg.clock.Now()
	for _, more := range orphans {
		if more { // orphans left: the next pass at once asks again, and they die then
			next = now
		}
	}
	for _, g := range grants {
		at := s.local(g.Usable(lead), now)
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next
}

// deadLetterOrphans dead-letters, for each upstream of missing (answered
// as not existing by its coordinator), the jobs of shard's lanes naming it
// that were created by before (the pass's Redis time, read before the
// coordinator was asked), one bounded call each
// (store.DeadLetterUnknownUpstream). It returns, for each upstream whose
// call succeeded, whether it stopped at its bound (what is left dies at
// the next pass if the upstream still does not exist). A failed call is
// logged and left out (its upstream is asked about again after MaxSleep).
func (d *Dispatcher) deadLetterOrphans(ctx context.Context, us upstreamStore, shard int, missing []string,
	before time.Time, cfg store.PassConfig) map[string]bool {
	done := map[string]bool{}
	for _, name := range missing {
		n, more, err := us.DeadLetterUnknownUpstream(ctx, shard, name, store.OrphanConfig{Before: before,
			DeadRetention: cfg.DeadRetention, DeadMaxPerTenant: cfg.DeadMaxPerTenant})
		if err != nil {
			if ctx.Err() == nil {
				d.metrics.passErrors.Inc()
				d.cfg.Logger.Warn("dead-letter jobs naming an unknown upstream failed", "shard", shard,
					"upstream", name, "err", err)
			}
			continue // asked about again after MaxSleep, as after any failure
		}
		if n > 0 {
			d.cfg.Logger.Info("jobs naming an upstream that does not exist dead-lettered", "shard", shard,
				"upstream", name, "jobs", n, "reason", store.DeadReasonUnknownUpstream, "more", more)
		}
		done[name] = more
	}
	return done
}
