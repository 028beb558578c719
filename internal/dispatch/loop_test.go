package dispatch

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
)

// loopConfig is a Config on a fake store with a long MaxSleep, so that every
// pass after the first is caused by what the test does.
func loopConfig(t *testing.T, st Store) Config {
	rdb, prefix := redistest.New(t)
	return Config{Store: st, Asynq: &fakeAsynq{}, Redis: rdb, Prefix: prefix, MaxSleep: time.Minute, LeaseTTL: 300 * time.Millisecond}
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
			n[cfgA.Redis.Get(context.Background(), LeaseKey(cfgA.Prefix, s)).Val()]++
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
			if cfgA.Redis.Get(context.Background(), LeaseKey(cfgA.Prefix, s)).Val() == b.leases.owner && storeB.count(s) == 0 {
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
	st := newFakeStore(2)
	cfg := loopConfig(t, st)
	ctx := context.Background()
	// A crashed owner: its leases stay until they expire.
	for s := range 2 {
		if err := cfg.Redis.Set(ctx, LeaseKey(cfg.Prefix, s), "crashed", cfg.LeaseTTL).Err(); err != nil {
			t.Fatal(err)
		}
	}
	began := time.Now()
	start(t, cfg)
	eventually(t, 3*cfg.LeaseTTL, "every shard taken over", allPassed(st))
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
	if n, _ := cfgA.Redis.Exists(context.Background(), LeaseKey(cfgA.Prefix, 0)).Result(); n != 0 {
		t.Fatal("a lease key was written with leases disabled")
	}
}

// fakeClockConfig is loopConfig with the loops on a fake clock (store's
// passes are recorded on it too), so the tests below assert their timing
// exactly. The leases, in Redis on real time, outlive the test, and a loop
// renews its lease LeaseTTL/3 of fake time after taking it: after its
// MaxSleep (1 min).
func fakeClockConfig(t *testing.T, st *fakeStore) (Config, *fakeClock) {
	t.Helper()
	fc := newFakeClock()
	st.clock = fc
	cfg := loopConfig(t, st)
	cfg.clock, cfg.LeaseTTL = fc, 10*time.Minute
	return cfg, fc
}

// asleepUntil waits until a loop sleeps until exactly at (fake time).
func asleepUntil(t *testing.T, fc *fakeClock, at time.Time) {
	t.Helper()
	eventually(t, 5*time.Second, fmt.Sprintf("a loop asleep until %s", at.Format("15:04:05.000000")),
		func() bool { return fc.armedAt(at) })
}

// passedAt fails unless shard's passes happened at exactly the given
// offsets from t0 (fake time).
func passedAt(t *testing.T, st *fakeStore, shard int, t0 time.Time, offsets ...time.Duration) {
	t.Helper()
	var got []time.Duration
	for _, p := range st.passes() {
		if p.shard == shard {
			got = append(got, p.at.Sub(t0))
		}
	}
	if !slices.Equal(got, offsets) {
		t.Fatalf("shard %d passed at %v after the start, want %v", shard, got, offsets)
	}
}

// A wake-up for a time more than D away leaves the loop asleep; one for now
// − D or earlier wakes the shard's loop (only that one) at once; one for
// D + 60ms away wakes it 60ms later.
func TestPublishWakesTheShardLoop(t *testing.T) {
	t.Parallel()
	st := newFakeStore(2)
	cfg, fc := fakeClockConfig(t, st)
	t0 := fc.Now()
	start(t, cfg)
	asleepUntil(t, fc, t0.Add(cfg.MaxSleep)) // both shards passed at t0
	eventually(t, time.Second, "both shards passed", allPassed(st))

	publish(t, cfg.Redis, cfg.Prefix, 1, t0.Add(time.Hour).UnixMicro())
	redistest.Hold(t, 150*time.Millisecond, "shard 1 passed again after a far wake-up",
		func() bool { return st.count(1) == 1 })
	publish(t, cfg.Redis, cfg.Prefix, 1, t0.UnixMicro())
	eventually(t, time.Second, "a pass after the wake-up", func() bool { return st.count(1) == 2 })
	publish(t, cfg.Redis, cfg.Prefix, 1, t0.Add(store.LeadDefault+60*time.Millisecond).UnixMicro())
	asleepUntil(t, fc, t0.Add(60*time.Millisecond))
	fc.Advance(60 * time.Millisecond)
	eventually(t, time.Second, "a pass at the woken time", func() bool { return st.count(1) == 3 })
	passedAt(t, st, 1, t0, 0, 0, 60*time.Millisecond)
	passedAt(t, st, 0, t0, 0)
}

// After a pass, a loop sleeps until the pass's NextWake, but at most
// MaxSleep; with nothing pending, MaxSleep.
func TestSleepFollowsNextWakeCappedByMaxSleep(t *testing.T) {
	t.Parallel()
	st := newFakeStore(1)
	cfg, fc := fakeClockConfig(t, st)
	st.result = func(_, n int) store.PassResult {
		now := fc.Now()
		if n == 0 {
			return store.PassResult{Now: now, NextWake: now.Add(80 * time.Millisecond)}
		}
		return store.PassResult{Now: now} // nothing pending: MaxSleep
	}
	cfg.MaxSleep = 40 * time.Millisecond
	t0 := fc.Now()
	start(t, cfg)
	for _, at := range []time.Duration{40 * time.Millisecond, 80 * time.Millisecond} {
		asleepUntil(t, fc, t0.Add(at))
		fc.Advance(40 * time.Millisecond)
	}
	asleepUntil(t, fc, t0.Add(120*time.Millisecond))
	passedAt(t, st, 0, t0, 0, 40*time.Millisecond, 80*time.Millisecond)
}

// A NextWake before MaxSleep is when the loop passes next.
func TestNextWakeBeforeMaxSleepIsHonoured(t *testing.T) {
	t.Parallel()
	st := newFakeStore(1)
	cfg, fc := fakeClockConfig(t, st)
	st.result = func(_, n int) store.PassResult {
		now := fc.Now()
		return store.PassResult{Now: now, NextWake: now.Add(30 * time.Millisecond)}
	}
	t0 := fc.Now()
	start(t, cfg)
	for _, at := range []time.Duration{30 * time.Millisecond, 60 * time.Millisecond} {
		asleepUntil(t, fc, t0.Add(at))
		fc.Advance(30 * time.Millisecond)
	}
	asleepUntil(t, fc, t0.Add(90*time.Millisecond))
	passedAt(t, st, 0, t0, 0, 30*time.Millisecond, 60*time.Millisecond)
}

// A pass that reports More (P or K stopped it) is followed by the next at
// once; the first without More by a sleep.
func TestMorePassesAgainAtOnce(t *testing.T) {
	t.Parallel()
	st := newFakeStore(1)
	cfg, fc := fakeClockConfig(t, st)
	st.result = func(_, n int) store.PassResult {
		return store.PassResult{Now: fc.Now(), More: n < 3} // a bound (P or K) stopped passes 0–2
	}
	t0 := fc.Now()
	start(t, cfg)
	asleepUntil(t, fc, t0.Add(cfg.MaxSleep))
	passedAt(t, st, 0, t0, 0, 0, 0, 0)
}

// A pass that reports More but released, promoted and swept nothing while
// fair shares are on (the tenants it read hold their shares) is not run
// again at once, as a More pass would be: the next waits for the next
// reading of the free capacity, so the loop does not read the same tenants
// over and over until their jobs end.
func TestStuckPassWaitsForTheNextReading(t *testing.T) {
	t.Parallel()
	g := &gatedStore{fakeStore: *newFakeStore(1), inFlight: 95} // 7/8 in use: contended
	g.weights = store.FairWeights{Held: 10}
	g.result = func(_, _ int) store.PassResult { return store.PassResult{Now: time.Now(), More: true} }
	d := start(t, loopConfig(t, g))
	eventually(t, 5*time.Second, "10 passes", func() bool { return g.count(0) >= 10 })
	d.Stop()
	passes, readings := g.passes(), g.readings()
	if len(passes) > readings {
		t.Fatalf("%d passes on %d readings of the free capacity, want at most one pass a reading", len(passes), readings)
	}
	for i, p := range passes {
		if p.cfg.FairShare <= 0 {
			t.Fatalf("pass %d had fair share %v, want the λ of a contended pool", i, p.cfg.FairShare)
		}
	}
}

func TestPassCapacityIsTheShareOfFreeWorkerCapacity(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		capacity, inFlight, shards, want int
		hungry                           bool // the passes use their shares up (CapacityReached)
	}{
		{capacity: 10, inFlight: 4, shards: 4, want: 6},    // ⌈6/4⌉ = 2 < minShareQuiet: all 6
		{capacity: 100, inFlight: 4, shards: 4, want: 24},  // ⌈96/4⌉
		{capacity: 100, inFlight: 60, shards: 4, want: 16}, // ⌈40/4⌉ = 10 < minShareQuiet
		{capacity: 10, inFlight: 4, shards: 1, want: 6},
		{capacity: 3, inFlight: 5, shards: 2, want: 0},                   // overcommitted: release nothing
		{capacity: 0, inFlight: 0, shards: 2, want: 0},                   // no live worker
		{capacity: 200, inFlight: 4, shards: 4, want: 64, hungry: true},  // ⌈196/4⌉ = 49 < minShare
		{capacity: 100, inFlight: 60, shards: 4, want: 40, hungry: true}, // ⌈40/4⌉ = 10 < minShare: all 40
	} {
		st := newFakeStore(tc.shards)
		st.capacity, st.inFlight = tc.capacity, tc.inFlight
		if tc.hungry {
			st.result = func(int, int) store.PassResult { return store.PassResult{Now: time.Now(), CapacityReached: true} }
		}
		cfg := loopConfig(t, st)
		cfg.MaxSleep = 10 * time.Millisecond
		// The share divides by the shards owned: a lease of 300 ms that
		// a loaded machine renews late drops a shard for a moment, and
		// the others' share grows (one pass got 196 of 200 that way). A
		// long lease keeps the four owned throughout.
		cfg.LeaseTTL = 10 * time.Second
		d := start(t, cfg)
		// The share divides by the shards owned, and a hungry shard's
		// least share is set by its first pass: look past the start, when
		// the loops are still taking their leases.
		eventually(t, time.Second, "every shard passed 3 times", func() bool {
			for s := range tc.shards {
				if st.count(s) < 3 {
					return false
				}
			}
			return true
		})
		from := len(st.passes())
		// Passes of several shards that run at once split the free
		// capacity (each share is reserved until its pass ends): none
		// gets more than the share, and one that ran alone gets all of it.
		// Which passes overlap is up to the scheduler, so wait for one
		// that got the share rather than expect it among the last few.
		most := 0
		eventually(t, 5*time.Second, fmt.Sprintf("%+v: a pass with the whole share", tc), func() bool {
			for _, c := range st.passes()[from:] {
				most = max(most, c.cfg.Capacity)
			}
			return most >= tc.want
		})
		d.Stop()
		for _, c := range st.passes()[from:] {
			if c.cfg.Capacity > tc.want {
				t.Errorf("%+v: pass capacity %d, more than the share %d", tc, c.cfg.Capacity, tc.want)
			}
		}
	}
}

func TestStopIsIdempotentAndWorksWithoutStart(t *testing.T) {
	t.Parallel()
	st := newFakeStore(2)
	cfg := loopConfig(t, st)
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
	eventually(t, time.Second, "every shard passed", allPassed(st))
	d.Stop()
	d.Stop()
	for s := range 2 {
		if n, _ := cfg.Redis.Exists(context.Background(), LeaseKey(cfg.Prefix, s)).Result(); n != 0 {
			t.Fatalf("shard %d lease kept after Stop", s)
		}
	}
	if n, _ := cfg.Redis.HLen(context.Background(), membersKey(cfg.Prefix)).Result(); n != 0 {
		t.Fatalf("%d dispatcher members after Stop, want it gone", n)
	}
}

func TestMetricsRegister(t *testing.T) {
	t.Parallel()
	st := newFakeStore(1)
	cfg := loopConfig(t, st)
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	d := start(t, cfg)
	eventually(t, time.Second, "a pass", allPassed(st))
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
	st := newFakeStore(2)
	cfg := loopConfig(t, st) // MaxSleep 1 minute, LeaseTTL 300ms
	d := start(t, cfg)
	eventually(t, time.Second, "every shard passed", allPassed(st))
	redistest.Hold(t, 4*cfg.LeaseTTL, "every lease held by the dispatcher, one pass a shard", func() bool {
		for s := range 2 {
			if cfg.Redis.Get(context.Background(), LeaseKey(cfg.Prefix, s)).Val() != d.leases.owner || st.count(s) != 1 {
				return false
			}
		}
		return true
	})
}
