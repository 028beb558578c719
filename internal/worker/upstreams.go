package worker

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// Upstreams is what a Worker needs to apply an upstream's pause_scope
// (issue #15): its params (the scope), and its pause. *store.Store reads
// the params; PauseUpstream is the upstream API's store call
// (pu = max(pu, until), reason).
type Upstreams interface {
	UpstreamParamsOf(ctx context.Context, name string) (store.UpstreamParams, error)
	PauseUpstream(ctx context.Context, name string, until time.Time, reason string) error
}

// ReasonThrottled is the pause reason of an upstream a throttled outcome
// paused.
const ReasonThrottled = "throttled"

// throttles reports whether o asks for a pause: a throttled outcome, or
// any outcome with a pause (the quota used up).
func throttles(o wire.AttemptOutcome) bool { return o.Kind == wire.FinishThrottled || o.Pause > 0 }

// scopedUpstreams returns the upstreams of job whose pause_scope is
// upstream when o throttles: those the throttle pauses instead of the
// tenant. An upstream whose params cannot be read counts as tenant scope
// (today's behaviour), logged.
func (w *Worker) scopedUpstreams(ctx context.Context, job store.ClaimedJob, o wire.AttemptOutcome) []string {
	if w.cfg.Upstreams == nil || len(job.Upstreams) == 0 || !throttles(o) {
		return nil
	}
	var scoped []string
	for _, name := range job.Upstreams {
		p, err := w.cfg.Upstreams.UpstreamParamsOf(ctx, name)
		if err != nil {
			w.cfg.Logger.Warn("read upstream params; its throttle pauses the tenant", "upstream", name, "job", job.ID, "err", err)
			continue
		}
		if p.ScopeUpstream {
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
		if err := w.cfg.Upstreams.PauseUpstream(ctx, name, until, ReasonThrottled); err != nil {
			w.cfg.Logger.Warn("pause upstream failed", "upstream", name, "job", job.ID, "until", until, "err", err)
		}
	}
}
