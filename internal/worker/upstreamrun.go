package worker

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// An upstream's concurrency (issue #15): at most Concurrency jobs naming
// it in flight at once, across all workers. Between its claim and its
// send a job naming such upstreams takes a lease on each
// (store.AcquireUpstreamRun, in name order), and gives them back as soon
// as its attempt returns. While an upstream is full the job waits — its
// send only gets later, which only lowers the rate — woken when a job of
// this process releases a lease on that upstream, or after a short
// backoff (runRetryMin doubling to runRetryMax, jittered) for releases
// elsewhere. A job that waits longer than half the grace (its claim's
// lease allows the attempt's timeout + grace) is given back: finished as
// an upstream-scope throttle with no attempt used, it returns to the
// front of its lane and is released again later. A job naming no upstream
// with a concurrency costs no Redis call here (the settings are cached).

// Backoff bounds of a job waiting for an upstream's concurrency lease.
const (
	runRetryMin = 10 * time.Millisecond
	runRetryMax = 250 * time.Millisecond
)

// Outcomes of sluice_worker_upstream_leases_total.
const (
	leaseHeld      = "held"
	leaseWaited    = "waited"
	leaseGivenBack = "given_back"
)

// ReasonUpstreamConcurrency is the error of the attempt-log entry of a job
// given back because an upstream's concurrency stayed full.
const ReasonUpstreamConcurrency = "upstream concurrency full"

// runWakes wakes this process's jobs waiting for a lease on an upstream
// when one of its jobs releases one. Safe for concurrent use.
type runWakes struct {
	mu sync.Mutex
	ch map[string]chan struct{}
}

// next is closed at the next wake of name.
func (r *runWakes) next(name string) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ch == nil {
		r.ch = map[string]chan struct{}{}
	}
	c, ok := r.ch[name]
	if !ok {
		c = make(chan struct{})
		r.ch[name] = c
	}
	return c
}

// wake wakes every job waiting on name.
func (r *runWakes) wake(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.ch[name]; ok {
		close(c)
		delete(r.ch, name)
	}
}

// acquireRuns takes a lease on each upstream of job that has a concurrency
// (see above) and returns their names, to give to releaseRuns. ok is false
// when the job must not be sent now: a lease could not be had within half
// the grace, ctx ended, or the settings or a lease could not be read (the
// bound is kept: a job is never sent unbounded); the leases taken are then
// released.
func (w *Worker) acquireRuns(ctx context.Context, job store.ClaimedJob) (held []string, ok bool) {
	if w.cfg.UpstreamRates == nil || len(job.Upstreams) == 0 {
		return nil, true
	}
	settings, err := w.upstreams.Settings(ctx, job.Upstreams)
	if err != nil {
		w.cfg.Logger.Warn("read upstream settings; the job goes back to its lane", "job", job.ID, "err", err)
		return nil, false
	}
	timeout := job.Timeout
	if timeout <= 0 {
		timeout = w.cfg.DefaultTimeout
	}
	grace := w.Settings().Grace
	life, deadline := timeout+grace, time.Now().Add(grace/2)
	holder := quota.HolderOf(job.ID, job.Gen)
	asked, waitedAny := false, false
	for i, name := range job.Upstreams {
		if settings[i].Params.Concurrency == 0 {
			continue
		}
		asked = true
		taken, waited, err := w.acquireRun(ctx, name, holder, life, deadline)
		waitedAny = waitedAny || waited
		if err != nil {
			if ctx.Err() == nil {
				w.cfg.Logger.Info("no upstream concurrency lease; the job goes back to its lane", "job", job.ID, "upstream", name, "err", err)
			}
			w.metrics.upstreamLeases.WithLabelValues(leaseGivenBack).Inc()
			// name too: an error after Redis ran the script (a read timeout,
			// a reset) may leave this holder's lease on it; releasing one
			// never taken does nothing.
			w.releaseRuns(ctx, job, append(held, name))
			return nil, false
		}
		if taken {
			held = append(held, name)
		}
	}
	switch {
	case waitedAny:
		w.metrics.upstreamLeases.WithLabelValues(leaseWaited).Inc()
	case asked:
		w.metrics.upstreamLeases.WithLabelValues(leaseHeld).Inc()
	}
	return held, true
}

// errRunWait is acquireRun's error when the deadline passed.
var errRunWait = errors.New("the upstream stayed at its concurrency")

// acquireRun takes holder's lease on upstream name, waiting while it is
// full until deadline; waited says whether it found it full.
func (w *Worker) acquireRun(ctx context.Context, name, holder string, life time.Duration, deadline time.Time) (taken, waited bool, err error) {
	for delay := runRetryMin; ; delay = min(2*delay, runRetryMax) {
		wake := w.runWakes.next(name)
		taken, err := w.cfg.UpstreamRates.AcquireUpstreamRun(ctx, name, holder, life)
		var full *quota.UpstreamRunFullError
		if !errors.As(err, &full) {
			return taken, waited, err
		}
		waited = true
		left := time.Until(deadline)
		if left <= 0 {
			return false, true, errRunWait
		}
		wait := min(delay/2+rand.N(delay/2+1), full.Retry, left) // jittered: waiters elsewhere do not poll in step
		t := time.NewTimer(wait)
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false, true, ctx.Err()
		}
		t.Stop()
	}
}

// releaseRuns gives back job's leases on held (a release that fails is
// logged: the lease ends at its life) and wakes this process's jobs
// waiting on them.
func (w *Worker) releaseRuns(ctx context.Context, job store.ClaimedJob, held []string) {
	if len(held) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	holder := quota.HolderOf(job.ID, job.Gen)
	for _, name := range held {
		if err := w.cfg.UpstreamRates.ReleaseUpstreamRun(rctx, name, holder); err != nil {
			w.cfg.Logger.Warn("release upstream lease failed; it ends at its life", "job", job.ID, "upstream", name, "err", err)
		}
		w.runWakes.wake(name)
	}
}

// giveBack returns a claimed job that may not be sent now to the front of
// its lane, no attempt used (an upstream-scope throttle without a pause).
func (w *Worker) giveBack(ctx context.Context, job store.ClaimedJob) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	cfg := store.FinishConfigOf(w.Settings())
	cfg.UpstreamScope = true
	o := wire.AttemptOutcome{Kind: wire.FinishThrottled, Error: ReasonUpstreamConcurrency}
	if _, err := w.cfg.Store.Finish(fctx, job.ID, job.Gen, o, cfg); err != nil && !errors.Is(err, store.ErrStale) {
		w.cfg.Logger.Warn("give back failed; the sweep will return the job", "job", job.ID, "gen", job.Gen, "err", err)
	}
}
