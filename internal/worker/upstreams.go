package worker

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// UpstreamRates is what a Worker needs to apply an upstream's pause_scope
// adaptive rate, concurrency and pacing (issues #15, #32): its settings (read through the Worker's
// UpstreamCache), its pause (pu = max(pu, until), reason) and its rate
// factor's feedback, its concurrency leases, and the quota its answers
// report.
type UpstreamRates interface {
	UpstreamSettings(ctx context.Context, names []string) ([]quota.UpstreamSettings, error)
	PauseUpstream(ctx context.Context, name string, until time.Time, reason string) error
	UpstreamOutcome(ctx context.Context, name string, congested bool, slot time.Time, cfg quota.AdaptConfig) (int64, time.Duration, error)
	UpstreamAnswer(ctx context.Context, name string, q *wire.Quota, sent time.Time, cost, delta int64) (bool, error)
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

// pacedUpstreams returns the upstreams of job that the quota its answers
// report paces (pause_scope upstream, pacing headers:
// upstream.Params.Paced): that quota is theirs, one for every tenant, and
// not the tenant's. An upstream whose settings cannot be read now is left
// out (the tenant's pacing, if any, sees the quota instead), logged.
func (w *Worker) pacedUpstreams(ctx context.Context, job store.ClaimedJob) []string {
	if w.cfg.UpstreamRates == nil || len(job.Upstreams) == 0 {
		return nil
	}
	var paced []string
	for _, name := range job.Upstreams {
		st, err := w.upstreams.One(ctx, name)
		if err != nil {
			w.cfg.Logger.Warn("read upstream params; its quota is the tenant's", "upstream", name, "job", job.ID, "err", err)
			continue
		}
		if st.Params.Paced() {
			paced = append(paced, name)
		}
	}
	return paced
}

// answerUpstreams hands each paced upstream of job (pacedUpstreams) what
// the attempt's answer tells its pacing (quota.Registry.UpstreamAnswer):
// the quota it reported and, when corrected (the finish recorded the
// attempt), its cost correction, which a tokens quota counts. Errors are
// logged: the upstream keeps pacing by what it knew.
func (w *Worker) answerUpstreams(ctx context.Context, job store.ClaimedJob, paced []string, o wire.AttemptOutcome, corrected bool) {
	var delta int64
	if corrected && o.ActualCost > 0 && job.Cost > 0 {
		delta = o.ActualCost - job.Cost
	}
	if o.Quota == nil && delta == 0 {
		return
	}
	for _, name := range paced {
		if _, err := w.cfg.UpstreamRates.UpstreamAnswer(ctx, name, o.Quota, job.Slot, job.Cost, delta); err != nil {
			w.cfg.Logger.Warn("upstream quota not recorded", "upstream", name, "job", job.ID, "err", err)
		}
	}
}
