package dispatch

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// Across shards the workers' pool is shared by the tenants' weights, as
// TestPassWeightedFairness shows within one shard: tenant a alone on one
// shard, b and c (weight 2) on the other, on a pool of 40 slots whose jobs
// each hold a slot for 6 rounds (they end in the fifth round after their
// release, after its passes). The budget (real, reading Redis) hands the
// passes their shares of the free capacity and λ; with λ the slots go
// 1:1:2 (9, 9 and 18 held), where the shard split alone gave a, the
// first to take a burst of freed slots every other round, more than half
// the pool (measured: 600 : 134 : 266). The passes alternate their order
// every round, as the shard loops race, and run again while their share ran
// out with capacity left.
func TestFairSharesAcrossShards(t *testing.T) {
	t.Parallel()
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprintf("fair=%v", fair), func(t *testing.T) {
			t.Parallel()
			count := fairAcrossShards(t, fair)
			a, b, c := count["a"], count["b"], count["c"]
			t.Logf("releases over 150 rounds: a %d, b %d, c %d", a, b, c)
			total := a + b + c
			// 40 slots held 6 rounds each: ≈ 1000 releases; with λ the
			// tenants hold 9, 9 and 18 (λ = (40 − 3) ÷ 4, three slots kept
			// for a tenant below its share): ≈ 900.
			if want := map[bool]int{false: 1000, true: 900}[fair]; 20*(total-want) < -want {
				t.Fatalf("%d releases in 150 rounds, want ≈ %d", total, want)
			}
			if !fair {
				if 10*a < 4*total {
					t.Fatalf("without λ, a (alone on its shard) got %d of %d: want its shard's half", a, total)
				}
				return
			}
			for _, x := range []struct {
				name      string
				got, want int
			}{{"a", a, total / 4}, {"b", b, total / 4}, {"c", c, total / 2}} {
				if d := x.got - x.want; 20*d > total || 20*d < -total {
					t.Fatalf("%s released %d of %d, want %d (weights 1:1:2) within 5 %%", x.name, x.got, total, x.want)
				}
			}
		})
	}
}

// fairAcrossShards runs the rounds of TestFairSharesAcrossShards and
// returns the releases per tenant after 50 rounds of warm-up.
func fairAcrossShards(t *testing.T, fair bool) map[string]int {
	ctx := context.Background()
	clock := &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	rdb, prefix := redistest.New(t)
	st, err := store.NewStore(rdb, store.Config{Prefix: prefix, Shards: 2, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Heartbeat(ctx, "worker", 40, time.Hour); err != nil {
		t.Fatal(err)
	}
	p := store.DefaultParams()
	p.RateUS, p.Burst, p.Concurrency = 100, 100, 1000
	if err := st.SeedDefaults(ctx, p); err != nil {
		t.Fatal(err)
	}
	names := map[string]string{} // a on one shard, b and c on the other
	for i := 0; len(names) < 3; i++ {
		tn := fmt.Sprintf("t%d", i)
		switch shard := store.ShardOf(tn, 2); {
		case shard == 0 && names["a"] == "":
			names["a"] = tn
		case shard == 1 && names["b"] == "":
			names["b"] = tn
		case shard == 1 && names["c"] == "" && names["b"] != tn:
			names["c"] = tn
		}
	}
	two := int64(2)
	if _, err := st.PutTenantPolicy(ctx, names["c"], store.Overrides{Weight: &two}, store.AnyVersion); err != nil {
		t.Fatal(err)
	}
	byName := map[string]string{}
	for k, tn := range names {
		byName[tn] = k
		items := make([]store.Item, 1000)
		for i := range items {
			items[i] = store.Item{Type: wire.TypeWebhook, Body: []byte(`{}`)}
		}
		for i := 0; i < len(items); i += 500 {
			if _, err := st.Enqueue(ctx, tn, items[i:i+500]); err != nil {
				t.Fatal(err)
			}
		}
	}

	b := newBudget(st, nil, time.Hour)
	const hold, rounds, warm = 5, 200, 50
	running := make([][]store.ClaimedJob, rounds)
	count := map[string]int{}
	for round := range rounds {
		b.weightsAt = time.Time{} // read the weights at every round (rounds are faster than weightsEvery)
		b.read(ctx)
		if b.err != nil {
			t.Fatal(b.err)
		}
		order := []int{0, 1}
		if round%2 == 1 {
			order = []int{1, 0}
		}
		// As the shard loops do: a pass that ran out of its share while
		// free capacity is left runs again.
		for again := true; again; {
			again = false
			for _, shard := range order {
				n, err := b.share(ctx, 2)
				if err != nil {
					t.Fatal(err)
				}
				cfg := store.PassConfig{Lead: 10 * time.Millisecond, MinLead: -1, Grace: time.Hour, Capacity: n}
				if fair {
					cfg.FairShare = b.fairShare()
				}
				res, err := st.Pass(ctx, shard, cfg)
				if err != nil {
					t.Fatal(err)
				}
				if left := b.spend(n, len(res.Released)); left && res.CapacityReached && len(res.Released) > 0 {
					again = true
				}
				for _, r := range res.Released {
					clock.AdvanceTo(r.SendAt)
					c, err := st.Claim(ctx, r.ID, r.Gen, 2*time.Millisecond)
					if err != nil || c.Outcome != store.ClaimOK {
						t.Fatalf("claim %s at its send time: %+v, %v", r.ID, c, err)
					}
					running[round] = append(running[round], c.Job)
					if round >= warm {
						count[byName[r.Tenant]]++
					}
				}
			}
		}
		if round >= hold {
			for _, j := range running[round-hold] {
				if _, err := st.Finish(ctx, j.ID, j.Gen, wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200}, store.FinishConfig{}); err != nil {
					t.Fatal(err)
				}
			}
		}
		clock.AdvanceTo(clock.Now().Add(10 * time.Millisecond))
	}
	return count
}

// The budget hands passes λ only while the pool is contended — a reading
// found 7/8 of the capacity in use, or the passes used the free capacity
// up, within the last second — as (capacity − ⌈capacity/16⌉) ÷ the largest
// weight read in the last second; uncontended it is 0 (no cap).
func TestBudgetFairShareOnlyWhileContended(t *testing.T) {
	t.Parallel()
	f := newFakeStore(1) // capacity 100
	b := newBudget(f, nil, time.Hour)
	ctx := context.Background()
	read := func(inFlight int, w store.FairWeights) float64 {
		t.Helper()
		f.mu.Lock()
		f.inFlight, f.weights = inFlight, w
		f.mu.Unlock()
		b.weightsAt = time.Time{} // a fresh weights reading each time
		b.read(ctx)
		if b.err != nil {
			t.Fatal(b.err)
		}
		return b.fairShare()
	}
	if got := read(80, store.FairWeights{Held: 10}); got != 0 {
		t.Fatalf("80 of 100 slots in use: λ %v, want 0 (not contended)", got)
	}
	if got := read(88, store.FairWeights{Held: 9, Waiting: 1}); got != 9.3 {
		t.Fatalf("88 of 100 in use, weight 10: λ %v, want (100 − 7) ÷ 10 = 9.3", got)
	}
	if got := read(60, store.FairWeights{Held: 5}); got != 9.3 {
		t.Fatalf("a second later at most, weight 5: λ %v, want 9.3 still (contended, the largest weight of the last second)", got)
	}
	b.contendedAt, b.weightAt = time.Now().Add(-2*contentionMemory), time.Now().Add(-2*weightsMemory)
	if got := read(60, store.FairWeights{Held: 5}); got != 0 {
		t.Fatalf("60 of 100 in use for over a second: λ %v, want 0", got)
	}
	// The passes use the free capacity up (the reading's 40 free slots):
	// contended again, at the weight now read.
	n, err := b.share(ctx, 1)
	if err != nil || n != 40 {
		t.Fatalf("share %d (%v), want the 40 free", n, err)
	}
	b.spend(n, n)
	if got := read(60, store.FairWeights{Held: 3, Waiting: 2}); got != 93.0/5 {
		t.Fatalf("after the capacity was used up, weight 5: λ %v, want 93 ÷ 5", got)
	}
}
