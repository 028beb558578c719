package worker

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// UpstreamRates is what a Worker needs to apply an upstream's pause_scope
// adaptive rate and concurrency (issue #15): its settings (read through the Worker's
// UpstreamCache), its pause (pu = max(pu, until), reason) and its rate
// factor's feedback, and its concurrency leases.
type UpstreamRates interface {
	UpstreamSettings(ctx context.Context, names []string) ([]quota.UpstreamSettings, error)
	PauseUpstream(ctx context.Context, name string, until time.Time, reason string) error
	UpstreamOutcome(ctx context.Context, name string, congested bool, slot time.Time, cfg quota.AdaptConfig) (int64, time.Duration, error)
	// The concurrency leases (upstreamrun.go).
	AcquireUpstreamRun(ctx context.Context, name, holder string, life time.Duration) (bool, error)
	ReleaseUpstreamRun(ctx context.Context, name, holder string) error
}

var _ UpstreamRates = (*store.Store)(nil)

// ReasonThrottled is the pause reason of an upstream a throttled outcome
// paused.
const ReasonThrottled = "throttled"

// throttles reports whether o asks for a pause: a throttled outcome, or
// any outcome with a pause (the quota used up) but a deferral, whose Pause
// is its wait for a circuit, not an upstream's word.
func throttles(o wire.AttemptOutcome) bool {
	return o.Kind == wire.FinishThrottled || o.Pause > 0 && o.Kind != wire.FinishDeferred
}

// scopedUpstreams returns the upstreams of job whose pause_scope is
// upstream when o throttles: those the throttle pauses instead of the
// tenant. An upstream whose params cannot be read counts as tenant scope
// (today's behaviour), logged.
func (w *Worker) scopedUpstreams(ctx context.Context, job store.ClaimedJob, o wire.AttemptOutcome) []string {
	if w.cfg.UpstreamRates == nil || len(job.Upstreams) == 0 || !throttles(o) {
		return nil
	}
	var scoped []string
	for _, name := range job.Upstreams {
		st, err := w.upstreams.One(ctx, name)
		if err != nil {
			w.cfg.Logger.Warn("read upstream params; its throttle pauses the tenant", "upstream", name, "job", job.ID, "err", err)
			continue
		}
		if st.Params.ScopeUpstream {
			scoped = append(scoped, name)
		}
	}
	return scoped
}

// pauseUpstreams pauses each upstream of scoped until now + min(o.Pause or
// the default pause, the max pause) on the Redis clock, never shortening a
// longer pause (PauseUpstream keeps the later end).
func (w *Worker) pauseUpstreams(ctx context.Context, job store.ClaimedJob, scoped []string, o wire.AttemptOutcome, cfg store.FinishConfig) {
	if len(scoped) == 0 {
		return
	}
	cfg = cfg.WithDefaults()
	d := cfg.DefaultPause
	if o.Pause > 0 {
		d = o.Pause
	}
	until := w.clock.Now().Add(min(d, cfg.MaxPause))
	for _, name := range scoped {
		if err := w.cfg.UpstreamRates.PauseUpstream(ctx, name, until, ReasonThrottled); err != nil {
			w.cfg.Logger.Warn("pause upstream failed", "upstream", name, "job", job.ID, "until", until, "err", err)
		}
	}
}

// UpstreamCacheTTL is how long a Worker (and a CostReader) reuses an
// upstream's settings (scope, adaptive, concurrency, cost header) before
// reading them again: a PUT reaches the workers within it.
const UpstreamCacheTTL = time.Second

// NewUpstreamCache is the cache of upstream settings a Worker and a
// CostReader share (Config.UpstreamCache, NewCostReader): src's
// UpstreamSettings, each upstream read at most once per UpstreamCacheTTL.
func NewUpstreamCache(src UpstreamRates) *quota.UpstreamCache {
	return quota.NewUpstreamCache(src.UpstreamSettings, UpstreamCacheTTL)
}

// adaptUpstreams feeds the outcome of job's attempt to each adaptive
// upstream it names (quota.Registry.UpstreamOutcome): a congestion signal cuts the
// upstream's rate, a success recovers it; other outcomes say nothing.
func (w *Worker) adaptUpstreams(ctx context.Context, job store.ClaimedJob, o wire.AttemptOutcome, cfg store.FinishConfig) {
	if w.cfg.UpstreamRates == nil || len(job.Upstreams) == 0 {
		return
	}
	congested := o.Congested()
	if !congested && o.Kind != wire.FinishSuccess {
		return
	}
	for _, name := range job.Upstreams {
		st, err := w.upstreams.One(ctx, name)
		if err != nil || !st.Params.Adaptive {
			continue
		}
		if _, _, err := w.cfg.UpstreamRates.UpstreamOutcome(ctx, name, congested, job.Slot, cfg.Adapt()); err != nil {
			w.cfg.Logger.Warn("adapt upstream rate failed", "upstream", name, "job", job.ID, "err", err)
		}
	}
}
