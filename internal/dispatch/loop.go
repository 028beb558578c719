package dispatch

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sluicehq/sluice/internal/wire"
)

// Error back-off of a shard loop: doubled from backoffMin up to backoffMax,
// reset by a successful pass.
const (
	backoffMin = 50 * time.Millisecond
	backoffMax = 2 * time.Second
)

// shardLoop is the state of one shard's loop. Local times are the
// Dispatcher's clock's (cfg.clock; monotonic on the real one).
type shardLoop struct {
	shard      int
	owned      bool
	renewAt    time.Time // next lease renewal (owned) or acquisition attempt
	validUntil time.Time // the lease surely held until then (owned)
	backoff    time.Duration
	passed     time.Time       // end of the last pass
	due        time.Time       // the next pass (zero: at once)
	capWait    <-chan struct{} // when set: a wait also ends at the next capacity reading

	// The anchor maps Redis time to local time: Redis's now of the last
	// pass and the local instant it corresponds to (the call's midpoint).
	anchorLocal time.Time
	anchorRedis time.Time
}

// local converts a Redis time to the local instant; without an anchor (no
// pass yet) every time is now.
func (s *shardLoop) local(redisT, now time.Time) time.Time {
	if s.anchorLocal.IsZero() {
		return now
	}
	return s.anchorLocal.Add(redisT.Sub(s.anchorRedis))
}

// loop runs shard's passes until ctx is done, then gives up its lease.
func (d *Dispatcher) loop(ctx context.Context, shard int) {
	s := &shardLoop{shard: shard}
	defer d.giveUp(ctx, s)
	for ctx.Err() == nil {
		if !d.own(ctx, s) {
			d.wait(ctx, s, s.renewAt, false)
			continue
		}
		if d.cfg.clock.Now().Before(s.due) {
			// Between passes: wake for the next pass, a wake-up or the
			// capacity reading — or earlier to renew (or hand over) the
			// lease, then wait on for the pass.
			until := s.due
			if !d.cfg.DisableLeases {
				until = minTime(until, s.renewAt)
			}
			if d.wait(ctx, s, until, true) {
				s.due = time.Time{}
			}
			continue
		}
		next, again := d.pass(ctx, s)
		if again {
			continue
		}
		s.due = next
	}
}

// own reports whether this Dispatcher may pass s's shard now, taking or
// renewing the lease when due. A renewal that fails on a Redis error keeps
// the lease until it could have expired.
func (d *Dispatcher) own(ctx context.Context, s *shardLoop) bool {
	if d.cfg.DisableLeases {
		d.setOwned(s, true)
		return true
	}
	now := d.cfg.clock.Now()
	if s.owned && now.Before(s.renewAt) {
		return true
	}
	ttl := d.cfg.LeaseTTL
	switch {
	case s.owned && d.shed():
		// More than the fair share: give this shard up for a dispatcher
		// that has fewer (it tries free leases every LeaseTTL/10).
		d.metrics.owned.Dec()
		s.owned, s.renewAt = false, now.Add(ttl/3)
		d.cfg.Logger.Info("shard lease handed over (above the fair share)", "shard", s.shard, "share", d.fairShare())
		if err := d.leases.release(ctx, s.shard); err != nil && ctx.Err() == nil {
			d.cfg.Logger.Warn("release shard lease", "shard", s.shard, "err", err)
		}
		return false
	case !s.owned && int(d.owned.Load()) >= d.fairShare():
		s.renewAt = now.Add(ttl / 10)
		return false
	}
	held, err := d.leases.hold(ctx, s.shard)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			d.metrics.passErrors.Inc()
			d.cfg.Logger.Warn("shard lease", "shard", s.shard, "err", err)
		}
		s.renewAt = now.Add(min(ttl/10, backoffMax))
		d.setOwned(s, s.owned && now.Before(s.validUntil))
	case held:
		s.renewAt, s.validUntil = now.Add(ttl/3), now.Add(ttl-ttl/10)
		d.setOwned(s, true)
	default: // another dispatcher holds it: try again soon while below the share
		s.renewAt = now.Add(ttl / 10)
		d.setOwned(s, false)
	}
	return s.owned
}

// fairShare is the most shards this Dispatcher should hold: ⌈shards /
// live dispatchers⌉, so that dispatch work spreads over the replicas.
func (d *Dispatcher) fairShare() int {
	m := max(int(d.members.Load()), 1)
	return (d.shards + m - 1) / m
}

// shed takes one shard off the owned count when it exceeds the fair share
// and reports whether it did: the caller gives that shard's lease up. The
// count is decremented atomically, so loops renewing at once shed exactly
// the excess.
func (d *Dispatcher) shed() bool {
	for {
		o := d.owned.Load()
		if int(o) <= d.fairShare() {
			return false
		}
		if d.owned.CompareAndSwap(o, o-1) {
			return true
		}
	}
}

// membership keeps this Dispatcher in <p>:dispatch:members, reading the
// number of live dispatchers every LeaseTTL/3, until ctx is done; then it
// leaves.
func (d *Dispatcher) membership(ctx context.Context) {
	tick := time.NewTicker(d.cfg.LeaseTTL / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			if _, err := d.leases.members(lctx, false); err != nil {
				d.cfg.Logger.Warn("leave dispatcher members", "err", err)
			}
			return
		case <-tick.C:
			d.beat(ctx)
		}
	}
}

// beat renews the membership and reads the number of live dispatchers;
// on an error the last number stands.
func (d *Dispatcher) beat(ctx context.Context) {
	n, err := d.leases.members(ctx, true)
	if err != nil {
		if ctx.Err() == nil {
			d.cfg.Logger.Warn("dispatcher members", "err", err)
		}
		return
	}
	d.members.Store(int32(n))
}

func (d *Dispatcher) setOwned(s *shardLoop, owned bool) {
	if owned == s.owned {
		return
	}
	if owned {
		d.owned.Add(1)
		d.metrics.owned.Inc()
		if !d.cfg.DisableLeases {
			d.cfg.Logger.Info("shard lease taken", "shard", s.shard)
		}
	} else {
		d.owned.Add(-1)
		d.metrics.owned.Dec()
		d.cfg.Logger.Warn("shard lease lost", "shard", s.shard)
	}
	s.owned = owned
}

// giveUp releases s's lease at the end of the loop.
func (d *Dispatcher) giveUp(ctx context.Context, s *shardLoop) {
	if !s.owned {
		return
	}
	d.owned.Add(-1)
	d.metrics.owned.Dec()
	s.owned = false
	if d.cfg.DisableLeases {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := d.leases.release(rctx, s.shard); err != nil {
		d.cfg.Logger.Warn("release shard lease", "shard", s.shard, "err", err)
	}
}

// pass runs one pass on s's shard and hands its releases to asynq. It
// returns when the loop should run next and whether to run again at once.
func (d *Dispatcher) pass(ctx context.Context, s *shardLoop) (next time.Time, again bool) {
	s.capWait = nil
	capacity, err := d.budget.share(ctx, int(d.owned.Load()))
	if err != nil {
		return d.failed(ctx, s, err), false
	}
	if capacity == 0 && d.cfg.clock.Now().Sub(s.passed) < d.cfg.MaxSleep {
		// The workers are full: nothing can be released. Promotions and
		// sweeps wait for the regular pass; look again after the next
		// reading of the free capacity.
		s.capWait = d.budget.next()
		return s.passed.Add(d.cfg.MaxSleep), false
	}
	cfg := d.cfg.Pass
	cfg.Capacity = capacity
	start := d.cfg.clock.Now()
	res, err := d.cfg.Store.Pass(ctx, s.shard, cfg)
	if err != nil {
		return d.failed(ctx, s, err), false
	}
	end := d.cfg.clock.Now()
	s.backoff, s.passed = 0, end
	s.anchorLocal, s.anchorRedis = start.Add(end.Sub(start)/2), res.Now
	left := d.budget.spend(len(res.Released))
	d.handoff(ctx, res.Released)

	d.metrics.passes.Inc()
	d.metrics.passSeconds.Observe(d.cfg.clock.Now().Sub(start).Seconds())
	d.metrics.promoted.Add(float64(res.Promoted))
	d.metrics.swept.Add(float64(res.Swept))

	next = end.Add(d.cfg.MaxSleep)
	if !res.NextWake.IsZero() {
		next = minTime(next, s.local(res.NextWake, end))
	}
	// More: P or K stopped the pass: run again at once. CapacityReached:
	// the shard's share ran out; run again only while free capacity is left.
	again = res.More || (res.CapacityReached && left)
	if res.CapacityReached && !left {
		// The workers are full: tenants wait in ready at scores already due,
		// so NextWake is now. Passing before the free capacity is read again
		// would only spin on Redis; wait for the reading (or a wake-up).
		next, s.capWait = end.Add(d.cfg.MaxSleep), d.budget.next()
	}
	return next, again
}

// failed counts and logs a failed pass and returns when to retry.
func (d *Dispatcher) failed(ctx context.Context, s *shardLoop, err error) time.Time {
	now := d.cfg.clock.Now()
	if ctx.Err() != nil {
		return now
	}
	d.metrics.passErrors.Inc()
	s.backoff = min(max(2*s.backoff, backoffMin), backoffMax)
	d.cfg.Logger.Warn("dispatch pass failed", "shard", s.shard, "retry_in", s.backoff, "err", err)
	return now.Add(s.backoff)
}

// wait sleeps until until, ctx's end, the capacity reading s.capWait (set
// by a pass that found the workers full; cleared when it comes) or — when
// wakeable — a wake-up whose time − D is earlier (which also moves the
// next pass, s.due, earlier). woken reports that a wake-up due now or the
// capacity reading ended it: time for a pass. Wake-ups that arrive while the shard is not owned are
// dropped: the owner gets them.
func (d *Dispatcher) wait(ctx context.Context, s *shardLoop, until time.Time, wakeable bool) (woken bool) {
	timer := d.cfg.clock.NewTimer(until.Sub(d.cfg.clock.Now()))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-timer.C():
			return false
		case <-s.capWait:
			s.capWait = nil
			return true
		case us := <-d.wakes[s.shard]:
			if !wakeable {
				continue
			}
			now := d.cfg.clock.Now()
			at := now
			if us > 0 {
				at = s.local(time.UnixMicro(us).Add(-d.cfg.Pass.Lead), now)
			}
			if !at.After(now) {
				return true
			}
			if at.Before(s.due) {
				s.due = at // the next pass, whatever ends this wait
			}
			if at.Before(until) {
				until = at
				timer.Reset(until.Sub(d.cfg.clock.Now()))
			}
		}
	}
}

// handoff enqueues the released jobs into asynq, up to EnqueueParallelism
// at once. It runs to completion even when ctx ends, bounded by
// handoffBound: a job released but not handed off waits for the sweep.
func (d *Dispatcher) handoff(ctx context.Context, rels []wire.Release) {
	if len(rels) == 0 {
		return
	}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.handoffBound())
	defer cancel()
	n := min(len(rels), d.cfg.EnqueueParallelism)
	if n == 1 {
		for _, r := range rels {
			d.enqueue(hctx, r)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(rels)); i = next.Add(1) - 1 {
				d.enqueue(hctx, rels[i])
			}
		})
	}
	wg.Wait()
}

// handoffBound bounds one pass's hand-off: max(D, grace/2). A release's
// lease runs until its send time + grace, so a hand-off that completes
// within grace/2 still reaches a worker in time to claim; one given up
// earlier costs the job its grace (it waits for the sweep). D alone was too
// tight: a busy Redis or a full pool can take longer than D for one batch.
func (d *Dispatcher) handoffBound() time.Duration {
	return max(d.cfg.Pass.Lead, d.cfg.Pass.Grace/2)
}

// enqueue hands one release to asynq, except a task job for a queue no live
// middleware serves. A task id conflict means the task is already there (a
// pass raced with a retry of this one): fine. Any other failure is repaired
// by the sweep after the job's grace.
func (d *Dispatcher) enqueue(ctx context.Context, r wire.Release) {
	d.metrics.released.WithLabelValues(typeLabel(r.Type)).Inc()
	if r.Type == wire.TypeTask && r.Queue != "" {
		// No middleware serves the queue (it stopped since the enqueue):
		// an asynq task would only wait there, and every sweep of the job
		// would add one more. Leave the job to the sweep instead; when
		// Redis cannot tell, hand it off.
		if live, err := d.live.Live(ctx, r.Queue); err == nil && !live {
			d.metrics.unserved.Inc()
			d.cfg.Logger.Debug("task queue has no live middleware; the sweep returns the job", "job", r.ID, "queue", r.Queue)
			return
		}
	}
	task, opts, err := d.taskFor(r)
	if err == nil {
		_, err = d.cfg.Asynq.EnqueueContext(ctx, task, opts...)
	}
	if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		d.metrics.enqueueErrors.Inc()
		d.cfg.Logger.Warn("hand released job to asynq", "job", r.ID, "gen", r.Gen, "err", err)
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// parseMicros parses a decimal µs time; 0 when malformed.
func parseMicros(s string) int64 {
	us, err := strconv.ParseInt(s, 10, 64)
	if err != nil || us < 0 {
		return 0
	}
	return us
}
