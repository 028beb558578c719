package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redisscript"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

var _ asynq.Handler = (*Worker)(nil)

// ProcessTask is the asynq handler of Sluice's hand-off tasks: batches
// (wire.TaskTypeBatch, on the hand-off queues) and, for dispatchers of an
// earlier version, single webhook and http jobs (wire.TaskTypeWebhook,
// TaskTypeHTTP). A batch's jobs are delivered concurrently, each as a single
// job is (below), each holding one of the Worker's Concurrency job slots
// while it waits and runs; the batch returns once every job settled, so it
// holds its asynq slot until then. A single job is delivered the same way:
//
//  1. decode the payload {id, gen, slot_us};
//  2. wait on the Worker's scheduler (monotonic clock, one timer for the
//     process, a precise approach over the last Spin) until ε/2 + RTT/2
//     before the slot, so that the claim reaches Redis at slot − ε/2 and
//     is accepted (now ≥ slot − ε); a task picked up after its slot claims
//     at once;
//  3. unless its lease has run out meanwhile (send time + grace passed:
//     dropped unclaimed, see lapsed — so are a batch's jobs that have
//     lapsed before they get a job slot), claim with tolerance ε: early
//     (before the slot, or the tenant's send schedule does not allow it
//     yet: a later job of the tenant went out first) → wait the reply's Δ
//     and claim again (up to maxEarlyClaims times); stale, canceled or
//     returned → done;
//  4. wait (on the scheduler) for the claim's send instant (the slot, or
//     later by the lateness the tenant's send schedule carries), execute with
//     the job's timeout (a panic is a retryable failure with reason
//     "panic"), then give the job slot back and finish with the outcome
//     (in one of 2 × Concurrency finish places: a slot does not wait out
//     the finish's round trips).
//
// It returns nil for every task it could decode, whatever happened: Sluice
// owns retries, and a job this handler could not settle (Redis unavailable,
// ctx ended) is recovered by the sweep; a job of a batch not yet started
// when ctx ends is not claimed at all. A malformed payload is returned as
// an error, so asynq archives the task for inspection. Every wait ends with
// ctx.
func (w *Worker) ProcessTask(ctx context.Context, t *asynq.Task) error {
	if t.Type() == wire.TaskTypeBatch {
		return w.processBatch(ctx, t)
	}
	p, err := wire.DecodePayload(t.Payload())
	if err != nil {
		w.cfg.Logger.Error("drop malformed task", "type", t.Type(), "err", err)
		return fmt.Errorf("process %s task: %w", t.Type(), err)
	}
	if err := w.acquire(ctx); err != nil {
		return nil // the sweep returns the job
	}
	slot := jobSlot{w: w, held: true}
	w.deliver(ctx, p, w.cfg.Executor, &slot)
	slot.free()
	return nil
}

// processBatch delivers a batch's jobs concurrently, each in a job slot
// taken in the batch's (slot) order, and returns once all settled. A job
// runs on a runner that settled another job less than runnerIdle ago, or
// on a new one (runJobs): runners live on from job to job while jobs keep
// coming, so their stacks, grown by a delivery, are not grown again for
// every job.
func (w *Worker) processBatch(ctx context.Context, t *asynq.Task) error {
	b, err := wire.DecodeBatch(t.Payload())
	if err != nil {
		w.cfg.Logger.Error("drop malformed batch", "type", t.Type(), "err", err)
		return fmt.Errorf("process %s task: %w", t.Type(), err)
	}
	w.metrics.batchJobs.Observe(float64(len(b.Jobs)))
	var wg sync.WaitGroup
	for _, p := range b.Jobs {
		if w.lapsed(p) {
			if p.Claimed != nil {
				wg.Add(1)
				go func() { defer wg.Done(); w.giveBackLapsed(ctx, p) }()
			}
			continue // no slot, no claim: the sweep returns a claimed one
		}
		if err := w.acquire(ctx); err != nil {
			break // ctx ended: the sweep returns the jobs not started
		}
		wg.Add(1)
		d := batchJob{ctx: ctx, p: p, wg: &wg}
		select {
		case w.idle <- d:
		default:
			go w.runJobs(d)
		}
	}
	wg.Wait()
	return nil
}

// batchJob is one job of a batch given to a runner in the job slot its
// batch took: the batch's ctx (which its processBatch outlives) and wg,
// done when the job settled.
type batchJob struct {
	ctx context.Context
	p   wire.Payload
	wg  *sync.WaitGroup
}

// runnerIdle is how long a runner waits for another job before it ends:
// short enough that no runner outlives the last batch for long (a test's
// leak check), long enough to span the gaps between jobs of a busy worker.
const runnerIdle = 50 * time.Millisecond

// runJobs delivers d, gives its job slot back, and then delivers the jobs
// processBatch gives it (each in a slot taken for it) until none came for
// runnerIdle.
func (w *Worker) runJobs(d batchJob) {
	var idle *time.Timer
	for {
		slot := jobSlot{w: w, held: true}
		w.deliver(d.ctx, d.p, w.cfg.Executor, &slot)
		slot.free()
		d.wg.Done()
		d = batchJob{} // its batch's ctx is not held while idle
		if idle == nil {
			idle = time.NewTimer(runnerIdle)
		} else {
			idle.Reset(runnerIdle)
		}
		select {
		case d = <-w.idle:
		case <-idle.C:
			return
		}
	}
}

// acquire takes one of the Worker's Concurrency job slots, or fails when
// ctx ends first.
func (w *Worker) acquire(ctx context.Context) error {
	select {
	case w.jobs <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// release gives a job slot back.
func (w *Worker) release() { <-w.jobs }

// jobSlot is a job's hold on one of the Worker's job slots, given back by
// free at most once: when its attempt ends (attempt), else when its
// delivery does. The zero jobSlot (or nil) holds none (ProcessTaskJob:
// asynq's own concurrency bounds task jobs).
type jobSlot struct {
	w    *Worker
	held bool
}

func (s *jobSlot) free() {
	if s != nil && s.held {
		s.held = false
		s.w.release()
	}
}

// deliver runs one delivery with exec: claim (waiting for the slot), wait
// for the claimed slot, attempt and finish. A pre-claimed job (the pass
// claimed it: wire.Claimed, docs/design.md §2.2) skips the wait for its
// slot and the claim.
func (w *Worker) deliver(ctx context.Context, p wire.Payload, exec Executor, slot *jobSlot) {
	job, ok := store.PreClaimed(p)
	switch {
	case ok && w.lapsed(p): // it waited too long for a job slot
		slot.free()
		w.giveBackLapsed(ctx, p)
		return
	case ok && !w.confirmed(ctx, p):
		return
	case ok:
		w.metrics.preclaimed.Inc()
	default:
		if job, ok = w.claim(ctx, p); !ok {
			return
		}
	}
	held, ok := w.acquireRuns(ctx, job) // its upstreams' concurrency (upstreamrun.go)
	if !ok {
		w.giveBack(ctx, job)
		return
	}
	_ = w.sched.Wait(ctx, w.clock.Local(job.SendAt)) // on ctx's end the attempt fails at once
	w.metrics.sendDelay.Observe(w.clock.Now().Sub(p.Slot()).Seconds())
	w.attempt(ctx, job, exec, held, slot)
}

// confirmed reports whether pre-claimed p may be sent. It may, unless this
// worker's calls to Redis have been failing (failing): then only when
// Store.Confirm finds the job running at p's gen. A failover may have
// promoted a replica that lacks the pass which claimed it — queued or
// released there again, for another worker — while this worker's store
// connection still reaches nothing, so its finish would be lost and the
// sweep would send the job again. An unconfirmed job is dropped unsent
// (claims outcome "unconfirmed"): the sweep returns it as a lost release,
// or it was released again already.
func (w *Worker) confirmed(ctx context.Context, p wire.Payload) bool {
	if !w.failing.Load() {
		return true
	}
	ok, err := w.cfg.Store.Confirm(ctx, p.ID, p.Gen)
	if err == nil {
		w.failing.Store(false)
	}
	if err != nil || !ok {
		w.metrics.claims.WithLabelValues("unconfirmed").Inc()
		return false
	}
	return true
}

// claim waits for p's slot and claims the job. ok is false when there is
// nothing to run (a duplicate, canceled, returned, ctx ended, Redis error).
func (w *Worker) claim(ctx context.Context, p wire.Payload) (job store.ClaimedJob, ok bool) {
	w.metrics.waiting.Inc()
	defer w.metrics.waiting.Dec()
	pickedUp := w.clock.Now()
	early := 0
	wait := w.claimAt(p.Slot())
	for {
		if err := w.sched.Wait(ctx, wait); err != nil {
			return store.ClaimedJob{}, false
		}
		if w.lapsed(p) {
			return store.ClaimedJob{}, false
		}
		c, err := w.cfg.Store.Claim(ctx, p.ID, p.Gen, w.Settings().Tolerance)
		w.failing.Store(err != nil && ctx.Err() == nil)
		if err != nil {
			w.metrics.claims.WithLabelValues("error").Inc()
			if ctx.Err() == nil {
				w.cfg.Logger.Warn("claim failed; the sweep will return the job", "job", p.ID, "gen", p.Gen, "err", err)
			}
			return store.ClaimedJob{}, false
		}
		w.metrics.claims.WithLabelValues(outcomeLabel(c.Outcome)).Inc()
		switch c.Outcome {
		case store.ClaimOK:
			return c.Job, true
		case store.ClaimEarly:
			if early++; early > maxEarlyClaims {
				w.cfg.Logger.Warn("claim still early; leaving the job to the sweep", "job", p.ID, "gen", p.Gen, "wait", c.Wait)
				return store.ClaimedJob{}, false
			}
			// c.Wait runs from the script's now, half a round trip before
			// this reply: aim the next claim like the first (claimAt), so
			// that it lands inside the window rather than a round trip
			// after the target — a late claim shifts the tenant's send
			// schedule, and a shift that every re-claim adds up grows over
			// a long backlog.
			// Never before the reply's target − ε, though: the reply's now is
			// at or before ours, so a claim sent then lands inside the
			// window. With a round-trip estimate above the round trips of
			// the moment (a Sync taken under load) the aim alone fell before
			// the window, every re-claim went out at once and came back
			// early again, and after maxEarlyClaims the job went to the
			// sweep.
			tol := w.Settings().Tolerance
			wait = time.Now().Add(max(c.Wait-w.clock.RTT()-tol/2, c.Wait-tol))
		case store.ClaimReturned:
			w.cfg.Logger.Debug("job returned to its tenant's head lane unsent", "job", p.ID, "gen", p.Gen, "reason", c.Reason,
				"lead_at_pickup", p.Slot().Sub(pickedUp))
			return store.ClaimedJob{}, false
		default: // stale, canceled: nothing to do
			return store.ClaimedJob{}, false
		}
	}
}

// lapsed reports whether p's release has lapsed: its send time + grace —
// the deadline of the lease its release holds — has passed on the
// estimate of Redis's clock. Such a job is neither claimed nor given a job
// slot: the sweep returns it to its tenant's head lane (or has already,
// and a newer gen is on its way), so a claim could only come back stale or
// race the sweep. A worker that fetched nothing for a while (CPU
// starvation, a paused process) thus drops its stale copies without a
// round trip each and goes on to the fresh releases behind them. Counted
// as claims of outcome "lapsed".
//
// A pre-claimed job (p.Claimed) is running already, its lease until send +
// timeout + grace: it lapses at send + grace/2 instead, so that an attempt
// started before then (it ends within the timeout) leaves its finish at
// least grace/2 before the sweep could take it back and send it again. A
// lapsed pre-claimed job is given back at once (giveBackLapsed).
func (w *Worker) lapsed(p wire.Payload) bool {
	grace := w.Settings().Grace
	if p.Claimed != nil {
		grace /= 2
	}
	if !w.clock.Now().After(p.Slot().Add(grace)) {
		return false
	}
	w.metrics.claims.WithLabelValues("lapsed").Inc()
	return true
}

// giveBackLapsed returns pre-claimed p, dropped unsent as lapsed, to its
// tenant's head lane at once (wire.FinishLapsed; no attempt used, nothing
// logged). Left to the sweep it would come back only when its lease ends
// (send + timeout + grace, ~16s by default): a stall that made a worker
// drop a queue of pre-claimed jobs held them that long. A give-back that
// fails leaves the job to the sweep; a stale one found it gone already.
func (w *Worker) giveBackLapsed(ctx context.Context, p wire.Payload) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	o := wire.AttemptOutcome{Kind: wire.FinishLapsed}
	if _, err := w.cfg.Store.Finish(fctx, p.ID, p.Gen, o, store.FinishConfigOf(w.Settings())); err != nil && !errors.Is(err, store.ErrStale) {
		w.cfg.Logger.Warn("give-back of a lapsed job failed; the sweep will return it", "job", p.ID, "gen", p.Gen, "err", err)
	}
}

// claimAt is the local instant to send the claim of a job slotted at slot
// (Redis time): ε/2 plus half a round trip early, so that the script's now
// is slot − ε/2, in the middle of the part of the claim window [slot − ε,
// slot + ε] that a delayed claim can still hit.
func (w *Worker) claimAt(slot time.Time) time.Time {
	return w.clock.Local(slot).Add(-w.Settings().Tolerance/2 - w.clock.RTT()/2)
}

// attempt executes a claimed job with exec, releases its upstream leases
// (held: acquireRuns) and finishes it.
func (w *Worker) attempt(ctx context.Context, job store.ClaimedJob, exec Executor, held []string, slot *jobSlot) {
	timeout := job.Timeout
	if timeout <= 0 {
		timeout = w.cfg.DefaultTimeout
	}
	w.metrics.lateness.Observe(w.clock.Now().Sub(job.Slot).Seconds())
	actx, cancel := context.WithTimeout(ctx, timeout)
	outcome := w.execute(actx, job, exec)
	cancel()
	w.releaseRuns(ctx, job, held)
	w.metrics.attempt(outcome.Kind, outcome.Latency)
	// The finish runs outside the job slot, in one of the finish places
	// (finishPlaces): a slot held through the finish's round trips (~2/3
	// of a slot's time at 100 slots in the throughput benchmark) stands
	// idle.
	if slot != nil && slot.held {
		w.finishing <- struct{}{}
		slot.free()
		defer func() { <-w.finishing }()
	}

	fctx, cancelFinish := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancelFinish()
	fcfg := store.FinishConfigOf(w.Settings())
	scoped := w.scopedUpstreams(fctx, job, outcome)
	fcfg.UpstreamScope = len(scoped) > 0
	paced := w.pacedUpstreams(fctx, job)
	fo := outcome
	if len(paced) > 0 {
		fo.Quota = nil // the paced upstreams' quota, not the tenant's
	}
	began := time.Now()
	state, err := w.finish(fctx, job, fo, fcfg)
	w.metrics.finish.Observe(time.Since(began).Seconds())
	if err == nil {
		w.pauseUpstreams(fctx, job, scoped, outcome, fcfg)
		w.adaptUpstreams(fctx, job, outcome, fcfg)
	}
	w.answerUpstreams(fctx, job, paced, outcome, err == nil)
	if errors.Is(err, store.ErrStale) {
		// Nothing to retry: the lease was swept before the finish (the job
		// runs again), or the call was re-sent after its reply was lost
		// (go-redis re-sends a call whose reply outlived its read timeout)
		// and the first one recorded the attempt: state says which.
		w.cfg.Logger.Info("finish stale: the job has moved on", "job", job.ID, "gen", job.Gen, "state", state)
		return
	}
	if err != nil {
		w.metrics.finishErrors.Inc()
		w.cfg.Logger.Warn("finish failed; the sweep will send the job again", "job", job.ID, "gen", job.Gen, "err", err)
		return
	}
	if state == store.StateDead {
		w.metrics.dead.Inc()
	}
	CorrectUpstreams(fctx, w.cfg.Upstreams, job, outcome.ActualCost, w.cfg.Logger)
}

// finishPlaces is the finish places per job slot. A finish takes as long
// as a few attempts to a fast receiver (it waits behind the dispatch
// scripts in Redis): with one place per slot, 35 % of the finishes in the
// throughput benchmark at 100 slots waited 3.6 ms on average for a place
// while holding their job slot; with two, 1.5 % waited 2.5 ms; with
// three, none. Two keeps the sends a Redis that stops answering lets
// through to three times the slots.
const finishPlaces = 2

// finish records the attempt (Store.Finish). While Redis gives no answer
// or cannot take the call now (finishRetryable) — a connection refused or
// timed out, a master that died, a Cluster or Sentinel failover under
// way — it tries again until ctx ends (finishTimeout): a finish given up
// makes the sweep send the job again once its lease ends, a second
// delivery of an attempt that was made. Trying again is safe: a finish
// re-sent after an earlier one recorded the attempt (its reply was lost)
// comes back stale, with the state that one left. A failed try sets the pre-claim fence (failing);
// only a finish that succeeded at its first try clears it, as after a
// failover the new master may lack pre-claims.
func (w *Worker) finish(ctx context.Context, job store.ClaimedJob, o wire.AttemptOutcome, cfg store.FinishConfig) (store.State, error) {
	pause := finishRetryFirst
	for try := 1; ; try++ {
		state, err := w.cfg.Store.Finish(ctx, job.ID, job.Gen, o, cfg)
		if err == nil || !finishRetryable(err) {
			switch {
			case err != nil && !errors.Is(err, store.ErrStale):
				w.failing.Store(true)
			case try == 1:
				w.failing.Store(false)
			}
			return state, err
		}
		w.failing.Store(true)
		if try == 1 {
			w.cfg.Logger.Debug("finish failed; trying again", "job", job.ID, "gen", job.Gen, "err", err)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return state, err
		case <-t.C:
		}
		pause = min(2*pause, finishRetryMost)
	}
}

// The pauses between a finish's tries: the first, doubled up to the most.
const (
	finishRetryFirst = 50 * time.Millisecond
	finishRetryMost  = 500 * time.Millisecond
)

// finishRetryable reports whether a finish that failed with err may succeed
// when sent again: when Redis gave no answer (a connection refused, reset
// or timed out), or an error of a Redis that cannot take the call now
// (transientPrefixes). Not an answer of the Store (stale, no such job, an
// argument it refuses, a reply it cannot read), nor any other error of
// Redis's (a script's error would come back the same), nor the finish's
// own deadline.
func finishRetryable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	for _, answered := range []error{store.ErrStale, store.ErrNotFound, store.ErrInvalid, store.ErrProtocol, store.ErrConflict} {
		if errors.Is(err, answered) {
			return false
		}
	}
	if !redisscript.Answered(err) {
		return true
	}
	for _, p := range transientPrefixes {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// transientPrefixes are the errors of a Redis that cannot take a call now
// but may soon: a Cluster without a master for the slot, a slot being
// moved, a replica still loading, a master demoted (READONLY) or without
// its replicas, a script running past the busy threshold, memory full.
var transientPrefixes = []string{"CLUSTERDOWN", "TRYAGAIN", "LOADING", "READONLY", "MASTERDOWN", "NOREPLICAS", "BUSY", "OOM"}

// execute runs exec, turning a panic into a retryable failure.
func (w *Worker) execute(ctx context.Context, job store.ClaimedJob, exec Executor) (out wire.AttemptOutcome) {
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			w.cfg.Logger.Error("executor panicked", "job", job.ID, "gen", job.Gen, "panic", r)
			out = wire.AttemptOutcome{Kind: wire.FinishRetry, Latency: time.Since(start), Error: "panic"}
		}
	}()
	out = exec.Execute(ctx, job)
	if out.Kind == 0 {
		out.Kind, out.Error = wire.FinishRetry, "executor returned no outcome"
	}
	return out
}
