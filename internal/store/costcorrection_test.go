package store

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/wire"
)

// costedItems are n webhook jobs of cost c.
func costedItems(n int, c int64) []Item {
	items := batchOf(n, "c")
	for i := range items {
		items[i].Cost = c
	}
	return items
}

// sent is one attempt as the receiver sees it: its send instant (its claim's SendAt)
// and its actual cost.
type sent struct {
	slot time.Time
	cost int64
}

// costSim runs a tenant of rate 1/T, burst b, concurrency c through the
// simulated dispatcher and workers for span, each job reserving reserved
// and its attempt reporting actual() after hold; it returns every attempt
// sent within span, by send instant, with the actual cost its record keeps.
func costSim(t *testing.T, T time.Duration, b, c, reserved int64, actual func() int64, hold, span time.Duration) []sent {
	t.Helper()
	e := newEnv(t)
	e.seed(params(func(p *Params) {
		p.RateUS, p.Burst, p.Concurrency, p.Adaptive = T.Microseconds(), b, c, 0
		p.AdmitBurst, p.AdmitUS = policy.MaxBurst, 1
	}))
	jobs := int(span/T) + 100
	for items := costedItems(jobs, reserved); len(items) > 0; items = items[min(1000, len(items)):] {
		e.enqueue("acme", items[:min(1000, len(items))]...)
	}
	s := newSim(e, "acme", prodPass)
	s.waitEarly = true // a refund can put a slot before the send schedule's: the claim waits its turn
	s.hold = func() time.Duration { return hold }
	s.outcome = func() wire.AttemptOutcome {
		return wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200, ActualCost: actual()}
	}
	for at := epoch; at.Before(epoch.Add(span)); at = at.Add(20 * ms) {
		s.passAt(at)
	}
	if len(s.released) >= jobs {
		t.Fatalf("the backlog of %d ran out", jobs)
	}
	s.runUntil(epoch.Add(span + time.Second)) // every job released in span sent and finished
	var out []sent
	for _, r := range s.released {
		at, ok := s.sentAt[r.ID]
		if !ok || !at.Before(epoch.Add(span)) {
			continue
		}
		if at.Before(r.Slot) {
			t.Fatalf("job %s sent at +%s, before its slot +%s", r.ID, at.Sub(epoch), r.Slot.Sub(epoch))
		}
		j := e.job(r.ID)
		if j.State != StateSucceeded || j.Cost != reserved || j.ActualCost < 1 {
			t.Fatalf("job %s: %s, cost %d, actual %d; want succeeded, %d, reported", r.ID, j.State, j.Cost, j.ActualCost, reserved)
		}
		out = append(out, sent{at, j.ActualCost})
	}
	slices.SortFunc(out, func(a, b sent) int { return a.slot.Compare(b.slot) })
	e.requireConsistent()
	return out
}

// windowExcess is the largest excess of any window [sᵢ, sⱼ] over the GCRA
// bound b + ⌊(sⱼ − sᵢ)/T⌋, in cost units (≤ 0: the bound holds), and where.
func windowExcess(s []sent, b int64, T time.Duration) (int64, string) {
	worst, where := int64(-1<<62), ""
	for i := range s {
		var sum int64
		for j := i; j < len(s); j++ {
			sum += s[j].cost
			if x := sum - b - int64(s[j].slot.Sub(s[i].slot)/T); x > worst {
				worst, where = x, fmt.Sprintf("%d units in [+%s, +%s]", sum, s[i].slot.Sub(epoch), s[j].slot.Sub(epoch))
			}
		}
	}
	return worst, where
}

// Jobs reserving 10 whose attempts report 2: the refunds bring the actual
// cost sent to the tenant's token rate (within 5 % over a simulated minute)
// instead of a fifth of it, and no window exceeds the bound by more than E
// (refunds of the ≤ c jobs in flight at a window's first release, 8 each;
// doc.go, "Cost correction").
func TestCostRefundsReachTheTokenRate(t *testing.T) {
	t.Parallel()
	const T, b, c = 20 * ms, 10, 4 // 50 units/s
	s := costSim(t, T, b, c, 10, func() int64 { return 2 }, 15*ms, time.Minute)
	var units int64
	for _, x := range s {
		units += x.cost
	}
	want := float64(time.Minute / T)
	if ratio := float64(units) / want; ratio < 0.95 || ratio > 1.05 {
		t.Fatalf("%d units sent in a minute at 50/s: %.3f of the rate, want within 5 %%", units, ratio)
	}
	x, where := windowExcess(s, b, T)
	if x > c*8 {
		t.Fatalf("excess %d over the bound (%s), E = %d", x, where, c*8)
	}
	t.Logf("%d units in a minute (%.4f of the rate); largest excess over b + Δ/T: %d (%s), E = %d",
		units, float64(units)/want, x, where, c*8)
}

// Jobs reserving 1 whose attempts report 5: the charges slow the tenant to
// its token rate, and no window [sᵢ, sⱼ] holds more than b + ⌊Δ/T⌋ + E
// units, E = 4·c (the charges still due for the ≤ c jobs in flight at the
// window's last release); without correction it would send 5× the rate.
func TestCostChargesStayWithinTheBoundPlusE(t *testing.T) {
	t.Parallel()
	const T, b, c = 10 * ms, 5, 3
	s := costSim(t, T, b, c, 1, func() int64 { return 5 }, 30*ms, 20*time.Second)
	x, where := windowExcess(s, b, T)
	if x > 4*c {
		t.Fatalf("excess %d over the bound (%s), E = %d", x, where, 4*c)
	}
	var units int64
	for _, x := range s {
		units += x.cost
	}
	if limit := int64(b + 20*time.Second/T + 4*c); units > limit {
		t.Fatalf("%d units in 20 s, bound b + Δ/T + E = %d", units, limit)
	}
	if floor := int64(20*time.Second/T) * 9 / 10; units < floor {
		t.Fatalf("%d units in 20 s: the charges held the tenant below 90 %% of its rate (%d)", units, floor)
	}
	t.Logf("%d units in 20 s at 100/s; largest excess over b + Δ/T: %d (%s), E = %d", units, x, where, 4*c)
}

// Reports that err both ways (reserved 5, actual 1 or 9 at random): no
// window exceeds the bound by more than E = c·(4 + 4), the charges still due
// plus the refunds of earlier jobs (doc.go, "Cost correction").
func TestCostMixedReportsStayWithinTheBoundPlusE(t *testing.T) {
	t.Parallel()
	const T, b, c = 10 * ms, 10, 3
	rng := rand.New(rand.NewPCG(15, 15))
	s := costSim(t, T, b, c, 5, func() int64 { return 1 + 8*rng.Int64N(2) }, 20*ms, 10*time.Second)
	x, where := windowExcess(s, b, T)
	if x > c*8 {
		t.Fatalf("excess %d over the bound (%s), E = %d", x, where, c*8)
	}
	t.Logf("%d attempts; largest excess over b + Δ/T: %d (%s), E = %d", len(s), x, where, c*8)
}

// The correction step by step, on the fake clock: a charge moves TAT by
// (actual − reserved)·T, a refund back but never below now, an unknown
// actual (0) or a stale finish changes nothing, a bad one is refused.
func TestCostCorrectionSteps(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const T = 100 * ms
	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Concurrency, p.Adaptive = T.Microseconds(), 10, 10, 0 }))
	e.enqueue("acme", costedItems(4, 3)...)
	rels := e.passTenant("acme", 0, -1) // the burst: three jobs of 3 at now; the 4th's slot is 2T
	if len(rels) != 3 {
		t.Fatalf("released %d, want 3 (9 of 10 burst units; the 4th would need 12)", len(rels))
	}
	tat0 := e.state("acme").TAT
	if want := epoch.Add(9 * T); !tat0.Equal(want) {
		t.Fatalf("TAT +%s, want +%s", tat0.Sub(epoch), want.Sub(epoch))
	}
	ok := func(actual int64) wire.AttemptOutcome {
		return wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200, ActualCost: actual}
	}
	// A charge: reserved 3, actual 8 → TAT + 5T.
	c0 := e.claimAt(rels[0])
	e.finish(rels[0].ID, c0.Gen, ok(8), FinishConfig{})
	if got, want := e.state("acme").TAT, tat0.Add(5*T); !got.Equal(want) {
		t.Fatalf("after a charge of 5: TAT +%s, want +%s", got.Sub(epoch), want.Sub(epoch))
	}
	if j := e.job(rels[0].ID); j.ActualCost != 8 || j.Cost != 3 {
		t.Fatalf("record: cost %d, actual %d; want 3, 8", j.Cost, j.ActualCost)
	}
	// Unknown (0): nothing moves, nothing recorded.
	c1 := e.claimAt(rels[1])
	e.finish(rels[1].ID, c1.Gen, ok(0), FinishConfig{})
	if got, want := e.state("acme").TAT, tat0.Add(5*T); !got.Equal(want) || e.job(rels[1].ID).ActualCost != 0 {
		t.Fatalf("unknown actual: TAT +%s, want +%s; record %+v", got.Sub(epoch), want.Sub(epoch), e.job(rels[1].ID).ActualCost)
	}
	// A refund: reserved 3, actual 1 → TAT − 2T.
	c2 := e.claimAt(rels[2])
	e.finish(rels[2].ID, c2.Gen, ok(1), FinishConfig{})
	if got, want := e.state("acme").TAT, tat0.Add(3*T); !got.Equal(want) {
		t.Fatalf("after a refund of 2: TAT +%s, want +%s", got.Sub(epoch), want.Sub(epoch))
	}
	// A stale finish (the same attempt again) corrects nothing.
	if _, err := e.store.Finish(e.ctx, rels[2].ID, c2.Gen, ok(100), FinishConfig{}); !errors.Is(err, ErrStale) {
		t.Fatalf("second finish: %v, want ErrStale", err)
	}
	if got, want := e.state("acme").TAT, tat0.Add(3*T); !got.Equal(want) || e.job(rels[2].ID).ActualCost != 1 {
		t.Fatalf("after a stale finish: TAT +%s, want +%s; actual %d", got.Sub(epoch), want.Sub(epoch), e.job(rels[2].ID).ActualCost)
	}
	// A refund larger than the lead stops at now.
	rel := e.passTenant("acme", 2*time.Second, -1)
	if len(rel) != 1 {
		t.Fatalf("released %d, want the 4th job", len(rel))
	}
	c3 := e.claimAt(rel[0]) // slot: TAT − 7T = 5T; TAT then 15T
	if want := epoch.Add(5 * T); !rel[0].Slot.Equal(want) {
		t.Fatalf("4th job slotted +%s, want +%s", rel[0].Slot.Sub(epoch), want.Sub(epoch))
	}
	e.clock.Set(epoch.Add(14 * T))
	e.finish(rel[0].ID, c3.Gen, ok(1), FinishConfig{}) // 15T − 2T < now = 14T
	if got := e.state("acme").TAT; !got.Equal(e.clock.Now()) {
		t.Fatalf("TAT +%s after a refund of 2T at +%s with TAT 15T: want now", got.Sub(epoch), e.clock.Now().Sub(epoch))
	}
	// Bad actual costs are refused and change nothing.
	for _, bad := range []int64{-1, wire.MaxActualCost + 1} {
		if _, err := e.store.Finish(e.ctx, rel[0].ID, c3.Gen, ok(bad), FinishConfig{}); !errors.Is(err, ErrInvalid) {
			t.Errorf("actual %d: %v, want ErrInvalid", bad, err)
		}
	}
	if wire.MaxActualCost != policy.MaxBurst {
		t.Fatalf("wire.MaxActualCost %d != policy.MaxBurst %d", wire.MaxActualCost, policy.MaxBurst)
	}
}
