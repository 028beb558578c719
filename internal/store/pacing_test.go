package store

import (
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

// Pacing by quota headers (lua/lib.lua "Pacing by quota headers") on the
// fake clock: a reported quota spreads what is left over the time to its
// reset, counts what is in flight, never goes faster than the rate, ends at
// the reset, and does nothing under pacing off.

// reported is a success whose response reported quota q.
func reported(q wire.Quota) wire.AttemptOutcome {
	o := succeeded
	o.Quota = &q
	return o
}

// pacedNext is the slot after one released at slot with left units left
// of a quota whose reset is at reset, for a job of u units.
func pacedNext(slot, reset time.Time, left, u int64) time.Time {
	d := float64(u) * float64(reset.Sub(slot).Microseconds()) / (float64(left) * (1 - PaceMargin))
	next := slot.Add(time.Duration(math.Ceil(d)) * time.Microsecond)
	if next.After(reset) {
		return reset
	}
	return next
}

// firstReport runs tenant's first job (claimed now) and finishes it with q,
// returning the reset the store should have recorded.
func (e *env) firstReport(tenant string, q wire.Quota) time.Time {
	e.t.Helper()
	r, ok := e.pop(tenant, time.Second)
	if !ok {
		e.t.Fatal("no first job")
	}
	c := e.claimAt(r)
	e.finish(c.ID, c.Gen, reported(q), FinishConfig{})
	return e.clock.Now().Add(q.ResetIn)
}

// A requests quota of 4 left with 10 s to go, at 10/s: the next four jobs
// are spread over the 10 s, the fifth waits for the reset, and the state
// shows the quota and the pace.
func TestPacingSpreadsWhatIsLeft(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // 10/s, b = 1, pacing headers by default
	e.enqueue("acme", batchOf(6, "a")...)
	q := wire.Quota{Unit: wire.QuotaRequests, Remaining: 4, Limit: 100, ResetIn: 10 * time.Second, Source: "X-RateLimit-Remaining"}
	reset := e.firstReport("acme", q)
	now := e.clock.Now()

	st := e.state("acme")
	want := Quota{Unit: wire.QuotaRequests, Remaining: 4, Limit: 100, ResetAt: reset, Source: "X-RateLimit-Remaining"}
	if st.Quota == nil || !st.Quota.ResetAt.Equal(want.ResetAt) {
		t.Fatalf("quota = %+v, want %+v", st.Quota, want)
	}
	if want.ResetAt = st.Quota.ResetAt; *st.Quota != want {
		t.Fatalf("quota = %+v, want %+v", st.Quota, want)
	}
	wantIV := int64(math.Ceil(float64(10*time.Second/time.Microsecond) / (4 * (1 - PaceMargin))))
	if rate, ok := st.PacedRate(); !ok || st.PacedIntervalUS != wantIV || rate != 1e6/float64(wantIV) {
		t.Fatalf("paced interval %dµs (rate %v, binds %v), want %dµs", st.PacedIntervalUS, rate, ok, wantIV)
	}

	rel := e.passTenant("acme", 20*time.Second, -1)
	if len(rel) != 5 {
		t.Fatalf("released %d jobs, want 5: %+v", len(rel), rel)
	}
	slot := now.Add(100 * ms) // the GCRA slot after the first job's
	for i, r := range rel[:4] {
		if !r.Slot.Equal(slot) {
			t.Fatalf("job %d at now + %s, want now + %s", i+1, r.Slot.Sub(now), slot.Sub(now))
		}
		slot = pacedNext(slot, reset, 4-int64(i), 1)
	}
	if !rel[4].Slot.Equal(reset) {
		t.Fatalf("fifth job at now + %s, want the reset, now + %s", rel[4].Slot.Sub(now), reset.Sub(now))
	}
	if got := e.state("acme").Quota.InFlight; got != 5 {
		t.Fatalf("in flight %d, want 5", got)
	}
	e.requireConsistent()
}

// The jobs in flight when a quota is reported count against it: with 3
// running and 4 left, one more job goes before the reset.
func TestPacingCountsInFlight(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue("acme", batchOf(6, "a")...)
	jobs := e.inFlight("acme", 4)
	e.finish(jobs[0].ID, jobs[0].Gen, reported(wire.Quota{Unit: wire.QuotaRequests, Remaining: 4,
		ResetIn: 10 * time.Second, Source: "RateLimit"}), FinishConfig{})
	reset := e.clock.Now().Add(10 * time.Second)
	if got := e.state("acme").Quota.InFlight; got != 3 {
		t.Fatalf("in flight at the report %d, want 3", got)
	}
	rel := e.passTenant("acme", 20*time.Second, -1)
	if len(rel) != 2 || !rel[1].Slot.Equal(reset) || !rel[0].Slot.Before(reset) {
		t.Fatalf("released %+v; want one before the reset %s, the next at it", rel, reset)
	}
}

// A tokens quota paces by each job's cost; a pace faster than the rate
// changes nothing.
func TestPacingTokens(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst = 10_000, 100 })) // 100 tokens/s
	items := batchOf(4, "t")
	for i := range items {
		items[i].Cost = 10
	}
	e.enqueue("acme", items...)
	reset := e.firstReport("acme", wire.Quota{Unit: wire.QuotaTokens, Remaining: 100, ResetIn: 10 * time.Second, Source: "x-ratelimit-remaining-tokens"})
	rel := e.passTenant("acme", 20*time.Second, -1)
	if len(rel) != 3 {
		t.Fatalf("released %d, want 3", len(rel))
	}
	for i := 1; i < 3; i++ {
		if want := pacedNext(rel[i-1].Slot, reset, 100-10*int64(i-1), 10); !rel[i].Slot.Equal(want) {
			t.Fatalf("job %d at %s, want %s (%s after the one before)", i, rel[i].Slot, want, want.Sub(rel[i-1].Slot))
		}
	}

	// A job needing more tokens than are left waits for the reset.
	e3 := newEnv(t)
	e3.seed(params(func(p *Params) { p.RateUS, p.Burst = 10_000, 100 }))
	e3.enqueue("acme", items[:3]...)
	reset = e3.firstReport("acme", wire.Quota{Unit: wire.QuotaTokens, Remaining: 15, ResetIn: 10 * time.Second, Source: "x-ratelimit-remaining-tokens"})
	if rel := e3.passTenant("acme", 20*time.Second, -1); len(rel) != 2 || !rel[0].Slot.Before(reset) || !rel[1].Slot.Equal(reset) {
		t.Fatalf("15 tokens left, jobs of 10: %+v; want one before the reset %s, one at it", rel, reset)
	}

	// A roomy quota: the GCRA's spacing (10 tokens at 100/s: 100ms) stands.
	e2 := newEnv(t)
	e2.enqueue("roomy", batchOf(3, "r")...)
	e2.firstReport("roomy", wire.Quota{Unit: wire.QuotaRequests, Remaining: 1000, ResetIn: time.Minute, Source: "RateLimit"})
	if st := e2.state("roomy"); st.PacedIntervalUS == 0 {
		t.Fatal("roomy quota: not recorded")
	} else if _, binds := st.PacedRate(); binds {
		t.Fatalf("roomy quota binds: paced %dµs, rate %dµs", st.PacedIntervalUS, st.IntervalUS)
	}
	rel = e2.passTenant("roomy", 20*time.Second, -1)
	if len(rel) != 2 || rel[1].Slot.Sub(rel[0].Slot) != 100*ms {
		t.Fatalf("released %+v, want 2, 100ms apart", rel)
	}
}

// After the reset the rate is the configured one again; under pacing off
// no quota is recorded at all.
func TestPacingEndsAtResetAndOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue("acme", batchOf(4, "a")...)
	reset := e.firstReport("acme", wire.Quota{Unit: wire.QuotaRequests, Remaining: 0, ResetIn: 5 * time.Second, Source: "RateLimit"})
	e.clock.Set(reset)
	st := e.state("acme")
	if st.PacedIntervalUS != 0 {
		t.Fatalf("paced interval %dµs at the reset, want 0", st.PacedIntervalUS)
	}
	rel := e.passTenant("acme", time.Second, -1)
	if len(rel) != 3 || !rel[0].Slot.Equal(reset) || rel[2].Slot.Sub(rel[0].Slot) != 200*ms {
		t.Fatalf("after the reset: %+v, want 3 at 10/s from %s", rel, reset)
	}

	off := newEnv(t)
	off.seed(params(func(p *Params) { p.Pacing = 0 }))
	off.enqueue("acme", batchOf(3, "o")...)
	off.firstReport("acme", wire.Quota{Unit: wire.QuotaRequests, Remaining: 1, ResetIn: time.Hour, Source: "RateLimit"})
	if st := off.state("acme"); st.Quota != nil || st.PacedIntervalUS != 0 {
		t.Fatalf("pacing off: quota %+v, paced %dµs; want none", st.Quota, st.PacedIntervalUS)
	}
	if rel := off.passTenant("acme", time.Second, -1); len(rel) != 2 || rel[1].Slot.Sub(rel[0].Slot) != 100*ms {
		t.Fatalf("pacing off: %+v, want 2 at 10/s", rel)
	}
}

// A report of the same window with more left than recorded (an answer
// overtaken by a later one) changes nothing; a later window replaces it.
func TestPacingIgnoresOlderNews(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue("acme", batchOf(4, "a")...)
	jobs := e.inFlight("acme", 3)
	q := wire.Quota{Unit: wire.QuotaRequests, Remaining: 5, ResetIn: 10 * time.Second, Source: "RateLimit"}
	e.finish(jobs[0].ID, jobs[0].Gen, reported(q), FinishConfig{})
	q.Remaining = 7
	e.finish(jobs[1].ID, jobs[1].Gen, reported(q), FinishConfig{})
	if got := e.state("acme").Quota; got.Remaining != 5 || got.InFlight != 2 {
		t.Fatalf("after older news: %+v, want remaining 5, in flight 2", got)
	}
	q.Remaining, q.ResetIn = 90, 20*time.Second
	e.finish(jobs[2].ID, jobs[2].Gen, reported(q), FinishConfig{})
	if got := e.state("acme").Quota; got.Remaining != 90 || got.InFlight != 0 || !got.ResetAt.Equal(e.clock.Now().Add(20*time.Second)) {
		t.Fatalf("after a later window: %+v", got)
	}
}

// Bad quota reports are refused in the outcome's terms, nothing recorded.
func TestPacingRejectsBadQuota(t *testing.T) {
	t.Parallel()
	for _, q := range []wire.Quota{
		{Unit: "bytes", Remaining: 1, ResetIn: time.Second},
		{Unit: wire.QuotaRequests, Remaining: -1, ResetIn: time.Second},
		{Unit: wire.QuotaRequests, Remaining: 1, ResetIn: 0},
		{Unit: wire.QuotaTokens, Remaining: 1, Limit: wire.MaxQuotaCount + 1, ResetIn: time.Second},
	} {
		if err := checkOutcome(reported(q)); err == nil {
			t.Errorf("quota %+v accepted", q)
		}
	}
}

// A tokens quota counts the tokens an answer reports (cost_header): a job
// reserved at 100 that used 300 moves what is in flight by 200, one that
// used 40 by −60.
func TestPacingTokensCountCorrections(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst = 1_000, 1000 })) // 1 000 tokens/s
	items := batchOf(3, "t")
	for i := range items {
		items[i].Cost = 100
	}
	e.enqueue("acme", items...)
	jobs := e.inFlight("acme", 3)
	e.finish(jobs[0].ID, jobs[0].Gen, reported(wire.Quota{Unit: wire.QuotaTokens, Remaining: 5000, ResetIn: time.Minute,
		Source: "x-ratelimit-remaining-tokens"}), FinishConfig{})
	if got := e.state("acme").Quota.InFlight; got != 200 {
		t.Fatalf("in flight at the report %d, want 200 (two jobs of 100)", got)
	}
	for i, c := range []struct{ actual, want int64 }{{300, 400}, {40, 340}} {
		o := succeeded
		o.ActualCost = c.actual
		e.finish(jobs[i+1].ID, jobs[i+1].Gen, o, FinishConfig{})
		if got := e.state("acme").Quota.InFlight; got != c.want {
			t.Fatalf("after a job of 100 that used %d: in flight %d, want %d", c.actual, got, c.want)
		}
	}
}
