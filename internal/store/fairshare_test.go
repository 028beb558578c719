package store

import (
	"testing"
	"time"
)

// fairPool drives passes over one shard as the dispatcher's budget would,
// on a pool of capacity worker slots. Each round it releases up to the free
// slots (capacity − InFlight) — with λ = capacity ÷ the largest fair-share
// weight read so far when fair is set (the budget remembers the weight for
// a second: the rounds here span one; the slow tenants keep the pool
// contended) —, claims every release at its slot, then finishes the quick
// tenant's jobs of the round before (they take one round); the slow
// tenants' jobs never end.
type fairPool struct {
	e        *env
	shard    int
	capacity int
	quick    string
	weight   int64          // the largest weight read
	held     map[string]int // running + released per tenant, as the test counts them
	running  []ClaimedJob   // the quick tenant's jobs of the last round
}

// round runs one round and returns the quick tenant's jobs it finished.
func (f *fairPool) round(fair bool) (quickDone int) {
	f.e.t.Helper()
	e := f.e
	inFlight, err := e.store.InFlight(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	cfg := PassConfig{Lead: 100 * ms, MinLead: -1, Grace: time.Hour, Capacity: f.capacity - inFlight}
	if fair {
		w, err := e.store.FairWeights(e.ctx)
		if err != nil {
			e.t.Fatal(err)
		}
		if f.weight = max(f.weight, w.Total()); f.weight > 0 {
			cfg.FairShare = float64(f.capacity) / float64(f.weight)
		}
	}
	res := e.pass(f.shard, cfg)
	var claimed []ClaimedJob
	for _, r := range res.Released {
		j := e.claimAt(r)
		f.held[r.Tenant]++
		if r.Tenant == f.quick {
			claimed = append(claimed, j)
		}
	}
	for _, j := range f.running {
		if st := e.finish(j.ID, j.Gen, succeeded, FinishConfig{}); st != StateSucceeded {
			e.t.Fatalf("finish %s: state %s", j.ID, st)
		}
		f.held[j.Tenant]--
		quickDone++
	}
	f.running = claimed
	e.clock.Advance(10 * time.Millisecond)
	return quickDone
}

// The shape at store level: four tenants whose jobs hold their
// worker slots for long (they never end here) beside one whose jobs end
// after a round, on a pool of 20 slots. Without fair shares the slow
// tenants take every slot the quick one frees until the pool is theirs and
// the quick tenant gets nothing; with λ = 20 ÷ 5 each slow tenant holds at
// most its share, 4, and the quick tenant keeps its 4 slots: 4 jobs every
// other round (they take one). The held weight follows the tenants (the
// audit, requireConsistent, checks it against their states).
func TestPassFairShareKeepsSlotsForQuickTenant(t *testing.T) {
	t.Parallel()
	for _, fair := range []bool{false, true} {
		e := newEnv(t)
		e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Concurrency = 1000, 10, 10 }))
		tn := sameShard("quick", 5)
		f := &fairPool{e: e, shard: e.store.keys.shardOf(tn[0]), capacity: 20, quick: tn[0], held: map[string]int{}}
		e.enqueue(f.quick, batchOf(1000, "q")...)
		for _, s := range tn[1:] {
			e.enqueue(s, batchOf(100, s)...)
		}
		late := 0 // the quick tenant's finished jobs over the last 50 rounds
		for i := range 100 {
			done := f.round(fair)
			if i >= 50 {
				late += done
			}
			for _, s := range tn[1:] {
				if fair && f.held[s] > 4 {
					t.Fatalf("fair, round %d: slow tenant %s holds %d slots, beyond its share of 4", i, s, f.held[s])
				}
			}
		}
		if fair && f.weight != int64(len(tn)) {
			t.Fatalf("largest fair-share weight %d, want %d: every tenant held slots", f.weight, len(tn))
		}
		if !fair && late != 0 {
			t.Fatalf("without fair shares: the quick tenant finished %d jobs in the last 50 rounds, want 0 (starved: the slow tenants hold %v)", late, f.held)
		}
		if fair && late != 25*4 {
			t.Fatalf("fair: the quick tenant finished %d jobs in the last 50 rounds, want %d (its share: 4 jobs of one round's length every other round); held %v", late, 25*4, f.held)
		}
		t.Logf("fair %v: quick tenant %d jobs in 50 rounds; slots held %v", fair, late, f.held)
		e.requireConsistent()
	}
}

// A tenant held at its share leaves ready (a pass would only refuse it
// again) and comes back by its next claim or finish, which hold no λ: the
// pass checks it again then, and it releases once below its share.
func TestPassFairShareHeldTenantComesBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Concurrency = 1000, 10, 10 }))
	e.enqueue("acme", batchOf(10, "a")...)
	shard := e.store.keys.shardOf("acme")
	inReady := func() bool {
		return e.rdb.ZScore(e.ctx, e.store.keys.ready(shard), "acme").Err() == nil
	}
	cfg := PassConfig{Lead: 100 * ms, MinLead: -1, Grace: time.Hour, Capacity: -1, FairShare: 2.5} // share ⌊1 × 2.5⌋ = 2
	res := e.pass(shard, cfg)
	if len(res.Released) != 2 || inReady() {
		t.Fatalf("pass at share 2: released %d, in ready %v; want 2 and out of ready", len(res.Released), inReady())
	}
	if w, err := e.store.FairWeights(e.ctx); err != nil || w.Held != 1 || w.Waiting != 0 {
		t.Fatalf("fair-share weights %+v (%v), want 1 held", w, err)
	}
	e.requireConsistent() // held at its share: out of ready, not stuck
	j := e.claimAt(res.Released[0])
	if !inReady() {
		t.Fatal("after a claim: not in ready, want back (the claim holds no λ)")
	}
	if res := e.pass(shard, cfg); len(res.Released) != 0 || inReady() {
		t.Fatalf("pass after the claim: released %d, in ready %v; want none (still 2 held) and out of ready", len(res.Released), inReady())
	}
	if st := e.finish(j.ID, j.Gen, succeeded, FinishConfig{}); st != StateSucceeded || !inReady() {
		t.Fatalf("after a finish: state %s, in ready %v; want back in ready", st, inReady())
	}
	if res := e.pass(shard, cfg); len(res.Released) != 1 {
		t.Fatalf("pass after the finish: released %d, want 1 (back to its share of 2)", len(res.Released))
	}
	if res := e.pass(shard, PassConfig{Lead: 100 * ms, MinLead: -1, Grace: time.Hour, Capacity: -1}); len(res.Released) != 0 {
		t.Fatalf("uncontended pass (no λ): released %d, want 0 until a claim or finish puts the tenant back", len(res.Released))
	}
	e.requireConsistent()
}
