package dispatcher

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/redistest"
)

// loopConfig is a Config on a fake store with a long MaxSleep, so that every
// pass after the first is caused by what the test does.
func loopConfig(t *testing.T, store Store) Config {
	rdb, prefix := redistest.New(t)
	return Config{Store: store, Asynq: &fakeAsynq{}, Redis: rdb, Prefix: prefix, MaxSleep: time.Minute, LeaseTTL: 300 * time.Millisecond}
}

func allPassed(f *fakeStore) func() bool {
	return func() bool {
		for s := range f.shards {
			if f.count(s) == 0 {
				return false
			}
		}
		return true
	}
}

// TestLeasesAreSharedFairlyAndHandedOverOnStop: a second dispatcher gets
// its fair share (⌈shards / dispatchers⌉) from the first, every shard has
// exactly one owner, and a stopped dispatcher's shards go to the other.
func TestLeasesAreSharedFairlyAndHandedOverOnStop(t *testing.T) {
	t.Parallel()
	storeA, storeB := newFakeStore(4), newFakeStore(4)
	cfgA := loopConfig(t, storeA)
	cfgB := cfgA
	cfgB.Store = storeB
	a := start(t, cfgA)
	eventually(t, time.Second, "A passes every shard", allPassed(storeA))
	if got := testutil.ToFloat64(a.metrics.owned); got != 4 {
		t.Fatalf("A alone owns %v shards, want 4", got)
	}
	b := start(t, cfgB)
	owners := func() map[string]int {
		n := map[string]int{}
		for s := range 4 {
			n[cfgA.Redis.Get(context.Background(), leaseKey(cfgA.Prefix, s)).Val()]++
		}
		return n
	}
	eventually(t, 20*cfgA.LeaseTTL, "A and B own 2 shards each", func() bool {
		o := owners()
		return testutil.ToFloat64(a.metrics.owned) == 2 && testutil.ToFloat64(b.metrics.owned) == 2 &&
			o[a.leases.owner] == 2 && o[b.leases.owner] == 2
	})
	eventually(t, 2*cfgA.LeaseTTL, "B passes its shards", func() bool {
		for s := range 4 {
			if cfgA.Redis.Get(context.Background(), leaseKey(cfgA.Prefix, s)).Val() == b.leases.owner && storeB.count(s) == 0 {
				return false
			}
		}
		return true
	})
	// Balanced, it stays so: no shard changes hands over several renewals.
	redistest.Hold(t, 2*cfgA.LeaseTTL, "the shares stay 2 and 2", func() bool {
		o := owners()
		return o[a.leases.owner] == 2 && o[b.leases.owner] == 2
	})

	a.Stop() // releases its leases and leaves: B takes them over
	stopped := time.Now()
	eventually(t, 2*cfgA.LeaseTTL, "B owns every shard after A stopped", func() bool {
		return owners()[b.leases.owner] == 4 && testutil.ToFloat64(b.metrics.owned) == 4
	})
	t.Logf("takeover after a clean stop: %s", time.Since(stopped))
}

func TestLeaseOfACrashedOwnerIsTakenOverAfterItsTTL(t *testing.T) {
	t.Parallel()
	store := newFakeStore(2)
	cfg := loopConfig(t, store)
	ctx := context.Background()
	// A crashed owner: its leases stay until they expire.
	for s := range 2 {
		if err := cfg.Redis.Set(ctx, leaseKey(cfg.Prefix, s), "crashed", cfg.LeaseTTL).Err(); err != nil {
			t.Fatal(err)
		}
	}
	began := time.Now()
	start(t, cfg)
	eventually(t, 3*cfg.LeaseTTL, "every shard taken over", allPassed(store))
	took := time.Since(began)
	if took < cfg.LeaseTTL*8/10 {
		t.Fatalf("took over after %s, before the crashed owner's lease (%s) expired", took, cfg.LeaseTTL)
	}
	t.Logf("takeover after a crash: %s (lease TTL %s)", took, cfg.LeaseTTL)
}

func TestWithoutLeasesEveryDispatcherPassesEveryShard(t *testing.T) {
	t.Parallel()
	storeA, storeB := newFakeStore(3), newFakeStore(3)
	cfgA := loopConfig(t, storeA)
	cfgA.DisableLeases = true
	cfgB := cfgA
	cfgB.Store = storeB
	start(t, cfgA)
	start(t, cfgB)
	eventually(t, time.Second, "A passes every shard", allPassed(storeA))
	eventually(t, time.Second, "B passes every shard", allPassed(storeB))
	if n, _ := cfgA.Redis.Exists(context.Background(), leaseKey(cfgA.Prefix, 0)).Result(); n != 0 {
		t.Fatal("a lease key was written with leases disabled")
	}
}

func TestPublishWakesTheShardLoop(t *testing.T) {
	t.Parallel()
	store := newFakeStore(2)
	cfg := loopConfig(t, store)
	start(t, cfg)
	eventually(t, time.Second, "first passes", allPassed(store))

	// A wake-up for a time an hour away causes no pass: the loop sleeps on.
	publish(t, cfg.Redis, cfg.Prefix, 1, time.Now().Add(time.Hour).UnixMicro())
	redistest.Hold(t, 150*time.Millisecond, "shard 1 passed again after a far wake-up",
		func() bool { return store.count(1) == 1 })
	// A wake-up for now − D or earlier wakes shard 1's loop at once, and
	// only that loop.
	sent := time.Now()
	publish(t, cfg.Redis, cfg.Prefix, 1, sent.UnixMicro())
	eventually(t, 100*time.Millisecond, "a pass after the wake-up", func() bool { return store.count(1) == 2 })
	last := store.passes()[len(store.passes())-1]
	t.Logf("pass %s after the PUBLISH", last.at.Sub(sent))
	if n := store.count(0); n != 1 {
		t.Fatalf("shard 0 passed %d times, want 1", n)
	}
	// A wake-up for a time D + 60ms away wakes the loop ≈ 60ms later.
	sent = time.Now()
	publish(t, cfg.Redis, cfg.Prefix, 1, sent.Add(dispatch.LeadDefault+60*time.Millisecond).UnixMicro())
	eventually(t, time.Second, "a pass at the woken time", func() bool { return store.count(1) == 3 })
	if got := store.passes()[len(store.passes())-1].at.Sub(sent); got < 50*time.Millisecond || got > 150*time.Millisecond {
		t.Fatalf("pass %s after a wake-up for D + 60ms, want ≈ 60ms", got)
	}
}

func TestSleepFollowsNextWakeCappedByMaxSleep(t *testing.T) {
	t.Parallel()
	store := newFakeStore(1)
	store.result = func(_, n int) dispatch.PassResult {
		now := time.Now()
		if n == 0 {
			return dispatch.PassResult{Now: now, NextWake: now.Add(80 * time.Millisecond)}
		}
		return dispatch.PassResult{Now: now} // nothing pending: MaxSleep
	}
	cfg := loopConfig(t, store)
	cfg.MaxSleep = 40 * time.Millisecond
	start(t, cfg)
	eventually(t, time.Second, "four passes", func() bool { return store.count(0) >= 4 })
	p := store.passes()
	if gap := p[1].at.Sub(p[0].at); gap > 60*time.Millisecond || gap < 35*time.Millisecond {
		t.Fatalf("second pass %s after the first, want MaxSleep (40ms) < NextWake (80ms)", gap)
	}
	if gap := p[3].at.Sub(p[2].at); gap < 35*time.Millisecond {
		t.Fatalf("idle passes %s apart, want ≥ MaxSleep", gap)
	}
}

func TestNextWakeBeforeMaxSleepIsHonoured(t *testing.T) {
	t.Parallel()
	store := newFakeStore(1)
	store.result = func(_, n int) dispatch.PassResult {
		now := time.Now()
		return dispatch.PassResult{Now: now, NextWake: now.Add(30 * time.Millisecond)}
	}
	cfg := loopConfig(t, store)
	start(t, cfg)
	eventually(t, time.Second, "three passes", func() bool { return store.count(0) >= 3 })
	p := store.passes()
	if gap := p[2].at.Sub(p[1].at); gap < 25*time.Millisecond || gap > 50*time.Millisecond {
		t.Fatalf("passes %s apart, want NextWake's 30ms", gap)
	}
}

func TestMorePassesAgainAtOnce(t *testing.T) {
	t.Parallel()
	store := newFakeStore(1)
	store.result = func(_, n int) dispatch.PassResult {
		return dispatch.PassResult{Now: time.Now(), More: n < 3} // a bound (P or K) stopped passes 0–2
	}
	cfg := loopConfig(t, store)
	start(t, cfg)
	eventually(t, time.Second, "four passes", func() bool { return store.count(0) >= 4 })
	p := store.passes()
	if d := p[3].at.Sub(p[0].at); d > 20*time.Millisecond {
		t.Fatalf("4 passes took %s, want back to back", d)
	}
	redistest.Hold(t, 30*time.Millisecond, "a fifth pass without More",
		func() bool { return store.count(0) == 4 })
}

func TestPassCapacityIsTheShareOfFreeWorkerCapacity(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		capacity, inFlight, shards, want int
	}{
		{capacity: 10, inFlight: 4, shards: 4, want: 6},    // ⌈6/4⌉ = 2 < minShare: all 6
		{capacity: 100, inFlight: 4, shards: 4, want: 24},  // ⌈96/4⌉
		{capacity: 100, inFlight: 60, shards: 4, want: 16}, // ⌈40/4⌉ = 10 < minShare
		{capacity: 10, inFlight: 4, shards: 1, want: 6},
		{capacity: 3, inFlight: 5, shards: 2, want: 0}, // overcommitted: release nothing
		{capacity: 0, inFlight: 0, shards: 2, want: 0}, // no live worker
	} {
		store := newFakeStore(tc.shards)
		store.capacity, store.inFlight = tc.capacity, tc.inFlight
		cfg := loopConfig(t, store)
		cfg.MaxSleep = 10 * time.Millisecond
		d := start(t, cfg)
		// The share divides by the shards owned: look past the start, when
		// the loops are still taking their leases.
		eventually(t, time.Second, "every shard passed 3 times", func() bool {
			for s := range tc.shards {
				if store.count(s) < 3 {
					return false
				}
			}
			return true
		})
		d.Stop()
		p := store.passes()
		for _, c := range p[len(p)-tc.shards:] {
			if c.cfg.Capacity != tc.want {
				t.Errorf("%+v: pass capacity %d, want %d", tc, c.cfg.Capacity, tc.want)
			}
		}
	}
}

func TestStopIsIdempotentAndWorksWithoutStart(t *testing.T) {
	t.Parallel()
	store := newFakeStore(2)
	cfg := loopConfig(t, store)
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.Stop()
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err == nil {
		t.Fatal("second Start succeeded")
	}
	eventually(t, time.Second, "every shard passed", allPassed(store))
	d.Stop()
	d.Stop()
	for s := range 2 {
		if n, _ := cfg.Redis.Exists(context.Background(), leaseKey(cfg.Prefix, s)).Result(); n != 0 {
			t.Fatalf("shard %d lease kept after Stop", s)
		}
	}
	if n, _ := cfg.Redis.HLen(context.Background(), membersKey(cfg.Prefix)).Result(); n != 0 {
		t.Fatalf("%d dispatcher members after Stop, want it gone", n)
	}
}

func TestMetricsRegister(t *testing.T) {
	t.Parallel()
	store := newFakeStore(1)
	cfg := loopConfig(t, store)
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	d := start(t, cfg)
	eventually(t, time.Second, "a pass", allPassed(store))
	d.Stop()
	if got := testutil.ToFloat64(d.metrics.passes); got < 1 {
		t.Fatalf("passes_total %v", got)
	}
	if n, err := testutil.GatherAndCount(reg, "sluice_dispatch_passes_total", "sluice_dispatch_pass_seconds"); err != nil || n != 2 {
		t.Fatalf("gathered %d series, err %v", n, err)
	}
	if _, err := New(cfg); err == nil {
		t.Fatal("registering twice succeeded")
	}
}

// TestLeasesAreRenewedBetweenLongSleeps: with MaxSleep far above the lease
// TTL, a loop still wakes to renew its lease in time — without passing
// again for it.
func TestLeasesAreRenewedBetweenLongSleeps(t *testing.T) {
	t.Parallel()
	store := newFakeStore(2)
	cfg := loopConfig(t, store) // MaxSleep 1 minute, LeaseTTL 300ms
	d := start(t, cfg)
	eventually(t, time.Second, "every shard passed", allPassed(store))
	redistest.Hold(t, 4*cfg.LeaseTTL, "every lease held by the dispatcher, one pass a shard", func() bool {
		for s := range 2 {
			if cfg.Redis.Get(context.Background(), leaseKey(cfg.Prefix, s)).Val() != d.leases.owner || store.count(s) != 1 {
				return false
			}
		}
		return true
	})
}
