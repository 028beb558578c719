package store

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/internal/redisscript"
	"github.com/sluicehq/sluice/internal/wire"
)

// The adaptive rate (docs/design.md §4.2) on the fake clock: cuts once per episode,
// additive recovery, the floor, non-adaptive tenants, and every GCRA
// computation at the effective interval T_eff = ⌈T·10⁶ / f⌉.

var (
	throttled1s = wire.AttemptOutcome{Kind: wire.FinishThrottled, Status: 429, Pause: time.Second, Error: "http_429"}
	failed500   = wire.AttemptOutcome{Kind: wire.FinishRetry, Status: 500, Error: "http_500"}
	timedOut    = wire.AttemptOutcome{Kind: wire.FinishRetry, Error: wire.ReasonTimeout, TimedOut: true}
	succeeded   = wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200}
)

// inFlight releases tenant's next n jobs in one pass (D = 1s, L = 0) and
// claims each at its slot, in slot order: n attempts in flight at once.
func (e *env) inFlight(tenant string, n int) []ClaimedJob {
	e.t.Helper()
	res := e.pass(e.store.keys.shardOf(tenant), PassConfig{Lead: time.Second, MinLead: -1, Capacity: n})
	if len(res.Released) != n {
		e.t.Fatalf("released %d of %d: %+v", len(res.Released), n, res)
	}
	jobs := make([]ClaimedJob, n)
	for i, r := range res.Released {
		jobs[i] = e.claimAt(r)
	}
	return jobs
}

// requireFactor fails unless tenant's rate factor is f ppm and its effective
// interval ⌈T·10⁶ / f⌉ for the policy's T.
func (e *env) requireFactor(tenant string, f int64, why string) TenantState {
	e.t.Helper()
	st := e.state(tenant)
	iv := (st.Policy.RateUS*RateFactorFull + f - 1) / f
	if st.RateFactor != f || st.IntervalUS != iv {
		e.t.Fatalf("%s: rate factor %d ppm, interval %dµs; want %d ppm, %dµs", why, st.RateFactor, st.IntervalUS, f, iv)
	}
	return st
}

// A 429 halves the rate factor once per pause episode: the replies to the
// requests in flight at the cut (429s and 5xx alike) do not cut again; an
// attempt sent after the pause that is throttled again starts a new episode.
func TestAdaptiveThrottleCutsOncePerEpisode(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // 10/s, b = 1, adaptive by default
	e.enqueue("acme", batchOf(6, "a")...)
	e.requireFactor("acme", RateFactorFull, "fresh tenant")
	jobs := e.inFlight("acme", 3) // slots +0, +100ms, +200ms; now = +200ms

	e.finish(jobs[0].ID, jobs[0].Gen, throttled1s, FinishConfig{})
	st := e.requireFactor("acme", 500_000, "after a 429")
	now := e.clock.Now()
	// TAT was the last slot + T = now + 100ms: rescaled to now + 200ms.
	if !st.TAT.Equal(now.Add(200*ms)) || !st.CutUntil.Equal(now.Add(time.Second)) || st.EffectiveRate() != 5 {
		t.Fatalf("after the cut: TAT now + %s, episode until now + %s, rate %v/s; want +200ms, +1s (the pause), 5/s",
			st.TAT.Sub(now), st.CutUntil.Sub(now), st.EffectiveRate())
	}
	e.requireConsistent()

	e.finish(jobs[1].ID, jobs[1].Gen, throttled1s, FinishConfig{})
	e.finish(jobs[2].ID, jobs[2].Gen, failed500, FinishConfig{})
	e.requireFactor("acme", 500_000, "the other replies of the same episode")
	e.requireConsistent()

	// After the pause: the head lane's first job, slotted at the pause's end.
	c := e.attempt(jobs[0].ID)
	if !c.Slot.Equal(st.PausedUntil) {
		t.Fatalf("first slot after the pause at +%s, want its end +%s", c.Slot.Sub(epoch), st.PausedUntil.Sub(epoch))
	}
	e.finish(c.ID, c.Gen, throttled1s, FinishConfig{})
	st = e.requireFactor("acme", 250_000, "a 429 after the pause")
	if !st.CutUntil.Equal(e.clock.Now().Add(time.Second)) {
		t.Fatalf("second episode until now + %s, want the new pause's end", st.CutUntil.Sub(e.clock.Now()))
	}
	e.requireConsistent()
}

// 5xx retries and timeouts cut too, once per episode; connection errors,
// 408, permanent failures and the pre-emptive quota pause of a success do
// not. Without a pause the episode covers what was released at the cut.
func TestAdaptiveFailuresCutOncePerEpisode(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.MaxAttempts, p.MinBackoffUS, p.MaxBackoffUS = 100, 10e6, 10e6 }))
	e.enqueue("acme", batchOf(12, "a")...)
	jobs := e.inFlight("acme", 3)
	e.finish(jobs[0].ID, jobs[0].Gen, failed500, FinishConfig{})
	st := e.requireFactor("acme", 500_000, "after a 500")
	if now := e.clock.Now(); !st.CutUntil.Equal(now.Add(100*ms)) || !st.PausedUntil.IsZero() {
		t.Fatalf("episode until now + %s, paused until %v; want TAT before the cut (now + 100ms), no pause",
			st.CutUntil.Sub(now), st.PausedUntil)
	}
	e.finish(jobs[1].ID, jobs[1].Gen, wire.AttemptOutcome{Kind: wire.FinishRetry, Status: 503}, FinishConfig{})
	e.finish(jobs[2].ID, jobs[2].Gen, timedOut, FinishConfig{})
	e.requireFactor("acme", 500_000, "three failures in flight together")
	e.requireConsistent()

	for i, c := range []struct {
		o    wire.AttemptOutcome
		want int64 // the factor after it
	}{
		{wire.AttemptOutcome{Kind: wire.FinishRetry, Error: "connection_error"}, 500_000},
		{wire.AttemptOutcome{Kind: wire.FinishRetry, Status: 408, Error: "http_408"}, 500_000},
		{wire.AttemptOutcome{Kind: wire.FinishPermanent, Status: 404, Error: "http_404"}, 500_000},
		{wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200, Pause: time.Second, Error: "quota_exhausted"}, 550_000}, // a success
		{wire.AttemptOutcome{Kind: wire.FinishRetry, Status: 502}, 275_000},
		{timedOut, 137_500},
		{wire.AttemptOutcome{Kind: wire.FinishRetry, Status: 599}, 68_750},
	} {
		j := e.inFlight("acme", 1)[0] // slotted after the episode: a new one
		if cutUntil := e.state("acme").CutUntil; j.Slot.Before(cutUntil) {
			t.Fatalf("step %d: slot +%s before the episode's end +%s", i, j.Slot.Sub(epoch), cutUntil.Sub(epoch))
		}
		e.finish(j.ID, j.Gen, c.o, FinishConfig{})
		e.requireFactor("acme", c.want, fmt.Sprintf("step %d (%+v)", i, c.o))
		e.requireConsistent()
	}
}

// Successes of attempts sent after the episode began add the step (5 % of
// the full rate by default), up to full; each new slot follows at the new
// T_eff. Successes of attempts in flight at the cut do not recover.
func TestAdaptiveRecoversAdditively(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // T = 100ms
	e.enqueue("acme", batchOf(20, "a")...)
	jobs := e.inFlight("acme", 3)
	e.finish(jobs[0].ID, jobs[0].Gen, throttled1s, FinishConfig{})
	e.finish(jobs[1].ID, jobs[1].Gen, succeeded, FinishConfig{})
	e.finish(jobs[2].ID, jobs[2].Gen, succeeded, FinishConfig{})
	e.requireFactor("acme", 500_000, "successes of the attempts in flight at the cut")

	e.clock.Set(e.state("acme").PausedUntil)
	var prev ClaimedJob
	for k := int64(1); k <= 10; k++ {
		c := e.inFlight("acme", 1)[0]
		if k > 1 { // released after the previous finish: spaced at its T_eff
			want := e.state("acme").IntervalUS // as the previous success left it
			if gap := c.Slot.Sub(prev.Slot); gap.Microseconds() < want-1 || gap.Microseconds() > want {
				t.Fatalf("success %d: slot %s after the previous one, want T_eff ≈ %dµs", k, gap, want)
			}
		}
		e.finish(c.ID, c.Gen, succeeded, FinishConfig{})
		e.requireFactor("acme", min(RateFactorFull, 500_000+50_000*k), fmt.Sprintf("after success %d", k))
		prev = c
	}
	if rf := e.tenantField("acme", "rf"); rf != 0 {
		t.Fatalf("field rf at full rate: %d, want 0", rf)
	}
	// Full again: the next slot is T after the last.
	if c := e.inFlight("acme", 1)[0]; c.Slot.Sub(prev.Slot) != 100*ms {
		t.Fatalf("at full rate: slot %s after the previous one, want T = 100ms", c.Slot.Sub(prev.Slot))
	}
	e.requireConsistent()

	// A custom step.
	e2 := newEnv(t)
	e2.enqueue("acme", batchOf(4, "b")...)
	c := e2.inFlight("acme", 1)[0]
	e2.finish(c.ID, c.Gen, failed500, FinishConfig{})
	c = e2.inFlight("acme", 1)[0]
	e2.finish(c.ID, c.Gen, succeeded, FinishConfig{AdaptiveStepPPM: 100_000})
	e2.requireFactor("acme", 600_000, "a step of 10 %")
}

// Cuts stop at the floor (FinishConfig.AdaptiveFloorPPM, from config
// throttle.adaptive_floor).
func TestAdaptiveFloor(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.enqueueOne("acme", item(`{}`)).ID
	cfg := FinishConfig{AdaptiveFloorPPM: PPM(0.2)}
	for i, want := range []int64{500_000, 250_000, 200_000, 200_000} {
		c := e.attempt(id)
		if st := e.finish(id, c.Gen, throttled1s, cfg); st != StateQueued {
			t.Fatalf("round %d: %s", i, st)
		}
		e.requireFactor("acme", want, fmt.Sprintf("round %d", i))
	}
	if st := e.state("acme"); st.IntervalUS != 500_000 || st.EffectiveRate() != 2 {
		t.Fatalf("at the floor 0.2 of 10/s: interval %dµs, %v/s; want 500ms, 2/s", st.IntervalUS, st.EffectiveRate())
	}
	// Default floor 0.05.
	c := e.attempt(id)
	e.finish(id, c.Gen, throttled1s, FinishConfig{})
	c = e.attempt(id)
	e.finish(id, c.Gen, throttled1s, FinishConfig{})
	e.requireFactor("acme", 50_000, "the default floor")
	e.requireConsistent()

	for _, c := range []struct {
		fraction float64
		ppm      int64
	}{{0.05, 50_000}, {1, RateFactorFull}, {0.1234567, 123_457}, {1e-9, 1}, {2, RateFactorFull}} {
		if got := PPM(c.fraction); got != c.ppm {
			t.Errorf("PPM(%v) = %d, want %d", c.fraction, got, c.ppm)
		}
	}
	for _, bad := range []FinishConfig{{AdaptiveFloorPPM: RateFactorFull + 1}, {AdaptiveStepPPM: -1}} {
		if _, err := e.store.Finish(e.ctx, id, 1, succeeded, bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("finish with %+v: %v, want ErrInvalid", bad, err)
		}
	}
}

// A tenant that is not adaptive keeps its full rate whatever the upstream
// says; turning adaptive off gives a cut tenant its full rate back at once
// (TAT rescaled like a rate change), and turning it on again starts at full.
func TestAdaptiveOffKeepsTheFullRate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.store.PutTenantPolicy(e.ctx, "fixed", Overrides{Adaptive: ptr(0)}, AnyVersion); err != nil {
		t.Fatal(err)
	}
	e.enqueue("fixed", batchOf(5, "f")...)
	jobs := e.inFlight("fixed", 3)
	for i, o := range []wire.AttemptOutcome{throttled1s, failed500, timedOut} {
		e.finish(jobs[i].ID, jobs[i].Gen, o, FinishConfig{})
	}
	st := e.requireFactor("fixed", RateFactorFull, "not adaptive")
	if !st.CutUntil.IsZero() || st.IntervalUS != 100_000 {
		t.Fatalf("not adaptive: %+v", st)
	}
	e.requireConsistent()

	e.enqueue("acme", batchOf(5, "a")...)
	jobs = e.inFlight("acme", 2) // now = +100ms (slot of the second), TAT = now + 100ms
	e.finish(jobs[0].ID, jobs[0].Gen, failed500, FinishConfig{})
	st = e.requireFactor("acme", 500_000, "adaptive")
	now := e.clock.Now()
	if !st.TAT.Equal(now.Add(200 * ms)) {
		t.Fatalf("TAT now + %s after the cut, want +200ms", st.TAT.Sub(now))
	}
	if _, err := e.store.PutTenantPolicy(e.ctx, "acme", Overrides{Adaptive: ptr(0)}, AnyVersion); err != nil {
		t.Fatal(err)
	}
	st = e.requireFactor("acme", RateFactorFull, "adaptive turned off")
	if !st.TAT.Equal(now.Add(100*ms)) || !st.CutUntil.IsZero() {
		t.Fatalf("adaptive off: TAT now + %s, episode %v; want +100ms, none", st.TAT.Sub(now), st.CutUntil)
	}
	if _, err := e.store.PutTenantPolicy(e.ctx, "acme", Overrides{}, AnyVersion); err != nil {
		t.Fatal(err)
	}
	e.requireFactor("acme", RateFactorFull, "adaptive on again")
	e.finish(jobs[1].ID, jobs[1].Gen, failed500, FinishConfig{})
	e.requireFactor("acme", 500_000, "a cut after turning it on again")
	e.requireConsistent()
}

// After a cut every slot the passes hand out is spaced at T_eff: no window
// holds more than b + Δ/T_eff tokens, and with b = 1 consecutive slots are
// T_eff apart, also across the cut. Workers hold their jobs (no success
// recovers the rate meanwhile).
func TestAdaptiveSlotsFollowTheEffectiveRate(t *testing.T) {
	t.Parallel()
	const T = 20 * ms
	for _, burst := range []int64{1, 3} {
		t.Run(fmt.Sprint("b=", burst), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Concurrency = T.Microseconds(), burst, 1000 }))
			e.enqueue("acme", batchOf(80, "a")...)
			s := newSim(e, "acme", prodPass)
			s.hold = func() time.Duration { return time.Hour }
			for len(s.released) < 10 {
				s.passAt(e.clock.Now().Add(30 * ms))
			}
			s.runUntil(s.waiting[0].Slot) // the first waiting job is claimed
			before := len(s.released)
			// Cut to a quarter: the first running job fails, then (a new
			// episode) one released after that cut.
			r := s.running[0]
			s.running = s.running[1:]
			e.finish(r.job.ID, r.job.Gen, failed500, FinishConfig{})
			e.requireFactor("acme", 500_000, "first cut")
			for len(s.released) < before+5 {
				s.passAt(e.clock.Now().Add(30 * ms))
			}
			last := s.released[len(s.released)-1]
			s.runUntil(last.Slot)
			idx := slices.IndexFunc(s.running, func(r simRun) bool { return r.job.ID == last.ID })
			r = s.running[idx]
			s.running = slices.Delete(s.running, idx, idx+1)
			e.finish(r.job.ID, r.job.Gen, failed500, FinishConfig{})
			e.requireFactor("acme", 250_000, "second cut")
			cut := len(s.released)
			for len(s.released) < cut+30 {
				s.passAt(e.clock.Now().Add(redisscript.Micros(37_000)))
			}
			tEff := 4 * T
			var after []time.Time
			for _, r := range s.released[cut:] {
				after = append(after, r.Slot)
			}
			slices.SortFunc(after, time.Time.Compare)
			if v := gcraViolation(after, burst, tEff); v != "" {
				t.Fatalf("after the cut to T_eff = %s: %s", tEff, v)
			}
			if span := after[len(after)-1].Sub(after[0]); span < time.Duration(len(after)-int(burst))*tEff {
				t.Fatalf("%d slots over %s, want ≥ (n − b)·T_eff", len(after), span)
			}
			if burst == 1 {
				all := s.slots()
				lastBefore := all[cut-1]
				if gap := after[0].Sub(lastBefore); gap < tEff {
					t.Fatalf("first slot after the cut %s after the last before it, want ≥ T_eff = %s", gap, tEff)
				}
			}
			e.requireConsistent()
		})
	}
}

// The send schedule of a late claim, the enqueue's eta and the drain
// estimate use T_eff too.
func TestAdaptiveLateClaimAndETAUseTheEffectiveInterval(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // T = 100ms, b = 1
	e.enqueue("acme", batchOf(1, "a")...)
	c := e.inFlight("acme", 1)[0]
	e.finish(c.ID, c.Gen, failed500, FinishConfig{})
	e.requireFactor("acme", 500_000, "cut")
	now := e.clock.Now()
	if tat := e.state("acme").TAT; !tat.Equal(now.Add(200 * ms)) {
		t.Fatalf("TAT now + %s, want + T_eff = 200ms", tat.Sub(now))
	}
	rs := e.enqueue("acme", batchOf(3, "b")...)
	for i, r := range rs {
		if want := now.Add(time.Duration(i+1) * 200 * ms); !r.ETA.Equal(want) {
			t.Errorf("eta of the %d. job: now + %s, want + %s", i+1, r.ETA.Sub(now), want.Sub(now))
		}
	}
	rel, ok := e.pop("acme", 200*ms)
	if !ok || !rel.Slot.Equal(now.Add(200*ms)) {
		t.Fatalf("pop: %+v %v, want the slot now + 200ms", rel, ok)
	}
	e.clock.Set(rel.Slot.Add(5 * ms)) // late: it goes out now
	cl, err := e.store.Claim(e.ctx, rel.ID, rel.Gen, 2*ms)
	if err != nil || cl.Outcome != ClaimOK {
		t.Fatalf("late claim: %+v %v, want claimed (nothing went out after its slot)", cl, err)
	}
	sent := e.clock.Now()
	next, ok := e.pop("acme", 200*ms) // planned T_eff after the late one: it goes out T_eff after it
	if !ok || !next.Slot.Equal(rel.Slot.Add(200*ms)) {
		t.Fatalf("pop: %+v %v, want the slot T_eff after the first", next, ok)
	}
	e.clock.Set(next.Slot)
	cl, err = e.store.Claim(e.ctx, next.ID, next.Gen, 2*ms)
	if err != nil || cl.Outcome != ClaimEarly || !next.Slot.Add(cl.Wait).Equal(sent.Add(200*ms)) {
		t.Fatalf("claim at the planned slot: %+v %v, want early until T_eff after the late send", cl, err)
	}
	e.requireConsistent()
}

// A cut that comes after the TAT has passed (the attempt took longer than
// T) still spaces the next slot T_eff after the last one sent: the next job,
// due at once under the old TAT, waits. (Found by the property below.)
func TestAdaptiveCutAfterTATPassedSpacesTheNextSlot(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // T = 100ms, b = 1, adaptive
	e.enqueue("acme", batchOf(2, "a")...)
	c := e.inFlight("acme", 1)[0]
	sent := c.Slot
	e.clock.Set(sent.Add(150 * ms)) // TAT (sent + T) has passed
	e.finish(c.ID, c.Gen, failed500, FinishConfig{})
	e.requireFactor("acme", 500_000, "cut")
	if tat := e.state("acme").TAT; !tat.Equal(sent.Add(200 * ms)) {
		t.Fatalf("TAT sent + %s after the cut, want + T_eff = 200ms", tat.Sub(sent))
	}
	rel, ok := e.pop("acme", time.Second)
	if !ok || !rel.Slot.Equal(sent.Add(200*ms)) {
		t.Fatalf("next slot %+v %v, want T_eff = 200ms after the last one sent", rel, ok)
	}
	e.requireConsistent()
}

// Property: through random cuts (500s) and recoveries (successes), with
// passes at random times and workers holding jobs for random times, every
// slot handed out is at least the effective interval in force at its
// release after the previous one (b = 1), so never closer than T: a
// recovery that rescales TAT earlier never pulls a slot in among those
// already released.
func TestAdaptiveSpacingHoldsThroughCutsAndRecoveries(t *testing.T) {
	t.Parallel()
	const T = 20 * ms
	rapid.Check(t, func(rt *rapid.T) {
		e := newEnv(t) // a fresh shard each case: no jobs left over
		e.seed(params(func(p *Params) {
			p.RateUS, p.Burst, p.Concurrency = T.Microseconds(), 1, 1000
			p.MaxAttempts, p.MinBackoffUS, p.MaxBackoffUS = 1000, 30_000, 30_000
		}))
		const tenant = "acme"
		e.enqueue(tenant, batchOf(20, "i")...)
		s := newSim(e, tenant, prodPass)
		s.hold = func() time.Duration { return redisscript.Micros(rapid.Int64Range(0, 80_000).Draw(rt, "hold µs")) }
		failRate := rapid.IntRange(0, 50).Draw(rt, "failure %")
		s.outcome = func() wire.AttemptOutcome {
			if rapid.IntRange(1, 100).Draw(rt, "roll") <= failRate {
				return failed500
			}
			return succeeded
		}
		var last time.Time
		minFactor := int64(RateFactorFull)
		for passes := 0; s.succeeded < 20 && passes < 150; passes++ {
			res := s.passAt(e.clock.Now().Add(redisscript.Micros(rapid.Int64Range(1, 100_000).Draw(rt, "gap µs"))))
			st := e.state(tenant)
			minFactor = min(minFactor, st.RateFactor)
			for _, r := range res.Released {
				if !last.IsZero() {
					if gap := r.Slot.Sub(last); gap < redisscript.Micros(st.IntervalUS) || gap < T {
						rt.Fatalf("slot +%s (%s) %s after the previous one, want ≥ T_eff = %s (factor %d ppm) and ≥ T; released %+v",
							r.Slot.Sub(epoch), r.ID, gap, redisscript.Micros(st.IntervalUS), st.RateFactor, s.released)
					}
				}
				last = r.Slot
			}
		}
		rt.Logf("%d releases, %d of 20 succeeded, lowest factor %d ppm", len(s.released), s.succeeded, minFactor)
		e.requireConsistent()
	})
}
