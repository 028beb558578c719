package store

import (
	"fmt"
	"testing"
	"time"
)

// Under overload (Capacity limits every pass) two backlogged tenants of
// weights 1 and 3 share the releases 1:3 within the start-time fair queueing
// bound at every pass, and a tenant arriving later starts level with them —
// no catch-up burst.
func TestPassWeightedFairness(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Concurrency = 1, 1, 1_000_000 }))
	tn := sameShard("light", 3)
	light, heavy, late := tn[0], tn[1], tn[2]
	if _, err := e.store.PutTenantPolicy(e.ctx, heavy, Overrides{Weight: ptr(3)}, AnyVersion); err != nil {
		t.Fatal(err)
	}
	e.enqueue(light, batchOf(300, "l")...)
	e.enqueue(heavy, batchOf(600, "h")...)
	shard := e.store.keys.shardOf(light)
	cfg := PassConfig{Lead: 100 * ms, MinLead: -1, Grace: time.Hour, Capacity: 4}
	count := map[string]int{}
	run := func(passes int) {
		t.Helper()
		for range passes {
			res := e.pass(shard, cfg)
			if len(res.Released) != 4 || !res.CapacityReached {
				t.Fatalf("pass released %d (capacity reached %v), want 4", len(res.Released), res.CapacityReached)
			}
			for _, r := range res.Released {
				count[r.Tenant]++
			}
			// |S_light/1 − S_heavy/3| ≤ c/w_light + c/w_heavy = 4/3.
			if d := 3*count[light] - count[heavy]; d > 4 || d < -4 {
				t.Fatalf("after %v: light %d, heavy %d: beyond the fairness bound", count, count[light], count[heavy])
			}
			e.clock.Advance(time.Millisecond)
		}
	}
	run(40)
	if count[light] != 40 || count[heavy] != 120 {
		t.Fatalf("160 releases shared %v, want 40:120", count)
	}
	e.requireConsistent()

	e.enqueue(late, batchOf(100, "x")...) // weight 1, arriving with an empty history
	before := map[string]int{light: count[light], heavy: count[heavy]}
	run(20) // 80 releases, 1:3:1
	got := fmt.Sprint(count[light]-before[light], ":", count[heavy]-before[heavy], ":", count[late])
	if d := count[late] - 16; d < -2 || d > 2 {
		t.Fatalf("80 releases after a late arrival shared %s, want ≈ 16:48:16", got)
	}
	if d := count[light] - before[light] - 16; d < -2 || d > 2 {
		t.Fatalf("80 releases after a late arrival shared %s, want ≈ 16:48:16", got)
	}
	t.Logf("after the late arrival: %s", got)
	e.requireConsistent()
}
