package dispatch

import (
	"context"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/quota"
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
	passed     time.Time             // end of the last pass
	due        time.Time             // the next pass (zero: at once)
	capWait    <-chan struct{}       // when set: a wait also ends at the next capacity reading
	starved    bool                  // the last pass ran out of worker capacity with work left
	hungry     bool                  // the last pass used its share up or released minShareQuiet jobs or more
	grants     []quota.UpstreamGrant // for the next pass: what its last demand got (upstreams.go)
	calendars  quota.Calendars       // what its aligned requests learnt of the upstreams' calendars (upstreams.go)

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

// pass runs one pass on s's shard and hands its releases to asynq. It
// returns when the loop should run next and whether to run again at once.
func (d *Dispatcher) pass(ctx context.Context, s *shardLoop) (next time.Time, again bool) {
	s.capWait = nil
	least := minShareQuiet
	if s.hungry {
		least = minShare
	}
	capacity, err := d.budget.shareAtLeast(ctx, int(d.owned.Load()), least)
	if err != nil {
		return d.failed(ctx, s, err), false
	}
	if capacity == 0 && s.starved && d.cfg.clock.Now().Sub(s.passed) < d.cfg.MaxSleep {
		// The workers are still full: nothing can be released. Promotions
		// and sweeps wait for the regular pass; look again after the next
		// reading of the free capacity.
		s.capWait = d.budget.want()
		return s.passed.Add(d.cfg.MaxSleep), false
	}
	cfg := d.passConfig()
	cfg.Capacity, cfg.FairShare = capacity, d.budget.fairShare()
	if !d.preclaimable.Load() {
		cfg.Preclaim = 0 // a worker of an earlier version is live (meta.go readGate)
	}
	d.metrics.fairShare.Set(cfg.FairShare)
	start := d.cfg.clock.Now()
	res, err := d.runPass(ctx, s, cfg)
	if err != nil {
		d.budget.spend(capacity, 0)
		return d.failed(ctx, s, err), false
	}
	end := d.cfg.clock.Now()
	s.backoff, s.passed = 0, end
	s.anchorLocal, s.anchorRedis = start.Add(end.Sub(start)/2), res.Now
	left := d.budget.spend(capacity, len(res.Released))
	d.handoff(ctx, s.shard, res.Released)

	d.metrics.passes.Inc()
	d.metrics.passSeconds.Observe(d.cfg.clock.Now().Sub(start).Seconds())
	d.metrics.promoted.Add(float64(res.Promoted))
	d.metrics.swept.Add(float64(res.Swept))

	next = end.Add(d.cfg.MaxSleep)
	if !res.NextWake.IsZero() {
		next = minTime(next, s.local(res.NextWake, end))
	}
	// Jobs waiting on upstreams without room: ask their coordinators; the
	// next pass takes the grants when the first can be used.
	if at := d.askUpstreams(ctx, s, res, cfg); !at.IsZero() {
		next = minTime(next, at)
	}
	// More: P or K stopped the pass: run again at once — unless the pass
	// changed nothing while fair shares are on (stuck): the tenants it read
	// are at their shares, and the next pass would read them again until
	// their jobs end. CapacityReached: the shard's share ran out; run again
	// only while free capacity is left.
	stuck := res.More && cfg.FairShare > 0 && len(res.Released) == 0 && res.Promoted == 0 && res.Swept == 0
	again = (res.More && !stuck) || (res.CapacityReached && left)
	s.starved = res.CapacityReached && !left
	s.hungry = res.CapacityReached || len(res.Released) >= minShareQuiet
	if s.starved || stuck {
		// The workers are full, or the tenants read hold their shares:
		// tenants wait in ready at scores already due, so NextWake is now.
		// Passing before the free capacity is read again would only spin
		// on Redis; wait for the reading (or a wake-up).
		next, s.capWait = end.Add(d.cfg.MaxSleep), d.budget.want()
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
