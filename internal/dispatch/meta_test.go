package dispatch

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// TestDispatcherFollowsTheSettingsInMeta: the pass settings stored in
// <prefix>:meta (grace, dead retention and cap, attempt log) override the
// Dispatcher's own configuration from Start on, and a later write by
// another throttler reaches the passes without a restart; what meta does
// not hold keeps the configured value.
func TestDispatcherFollowsTheSettingsInMeta(t *testing.T) {
	t.Parallel()
	st := newFakeStore(1)
	cfg := loopConfig(t, st)
	cfg.MaxSleep, cfg.MetaRefresh = 10*time.Millisecond, 20*time.Millisecond
	cfg.Pass = store.PassConfig{Grace: time.Second, DeadRetention: time.Hour, AttemptLog: 5, MaxTenants: 9}
	meta := wire.Meta{Prefix: cfg.Prefix, Shards: 1, Lead: store.LeadDefault, MinLead: store.MinLeadDefault,
		Settings: wire.Settings{Grace: 3 * time.Second, AttemptLog: 7}}
	if _, _, err := store.WriteMeta(context.Background(), cfg.Redis, meta); err != nil {
		t.Fatal(err)
	}
	passedWith := func(want store.PassConfig) func() bool {
		return func() bool {
			calls := st.passes()
			if len(calls) == 0 {
				return false
			}
			got := calls[len(calls)-1].cfg
			return got.Grace == want.Grace && got.AttemptLog == want.AttemptLog &&
				got.DeadRetention == want.DeadRetention && got.MaxTenants == want.MaxTenants
		}
	}
	d := start(t, cfg)
	if got := d.passConfig(); got.Grace != 3*time.Second || got.AttemptLog != 7 || got.DeadRetention != time.Hour {
		t.Fatalf("after Start: grace %s, attempt log %d, dead retention %s; want meta's 3s and 7, the configured 1h",
			got.Grace, got.AttemptLog, got.DeadRetention)
	}
	eventually(t, 2*time.Second, "a pass with meta's settings",
		passedWith(store.PassConfig{Grace: 3 * time.Second, AttemptLog: 7, DeadRetention: time.Hour, MaxTenants: 9}))

	meta.Settings = wire.Settings{Grace: 4 * time.Second, AttemptLog: 7, DeadRetention: 2 * time.Hour}
	if _, _, err := store.WriteMeta(context.Background(), cfg.Redis, meta); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "a pass with the rewritten settings",
		passedWith(store.PassConfig{Grace: 4 * time.Second, AttemptLog: 7, DeadRetention: 2 * time.Hour, MaxTenants: 9}))
	if got := max(d.cfg.Pass.Lead, 4*time.Second/2); d.handoffBound() != got {
		t.Errorf("hand-off bound %s, want max(D, grace/2) = %s with meta's grace", d.handoffBound(), got)
	}
}

// The pre-claim's ε follows the deployment's tolerance, the deployment may
// turn it off, and a Dispatcher configured without it never pre-claims.
func TestPassUnderPreclaimSettings(t *testing.T) {
	t.Parallel()
	on := store.PassConfig{Preclaim: 2 * time.Millisecond}
	for _, c := range []struct {
		name string
		p    store.PassConfig
		s    wire.Settings
		want time.Duration
	}{
		{"not in meta", on, wire.Settings{}, 2 * time.Millisecond},
		{"meta's tolerance", on, wire.Settings{Tolerance: 5 * time.Millisecond, PreclaimMode: wire.PreclaimOn}, 5 * time.Millisecond},
		{"turned off", on, wire.Settings{Tolerance: 5 * time.Millisecond, PreclaimMode: wire.PreclaimOff}, 0},
		{"not configured", store.PassConfig{}, wire.Settings{Tolerance: 5 * time.Millisecond, PreclaimMode: wire.PreclaimOn}, 0},
	} {
		if got := passUnder(c.p, c.s).Preclaim; got != c.want {
			t.Errorf("%s: pre-claim ε %s, want %s", c.name, got, c.want)
		}
	}
}

// gateStore is a fakeStore whose workers come and go (workers: their total
// concurrency), with the roster's pre-claim gate: open while any is live,
// as the roster answers when every live worker runs pre-claimed jobs.
type gateStore struct {
	*fakeStore
	workers atomic.Int64
}

func (g *gateStore) Capacity(context.Context) (int, error) { return int(g.workers.Load()), nil }

func (g *gateStore) Preclaimable(context.Context) (bool, error) { return g.workers.Load() > 0, nil }

// TestFirstWorkersOpenThePreclaimGateBeforeTheirFirstPass: the capacity
// reading that finds the first live workers reads the pre-claim gate
// before a pass gets any of their capacity, so not one pass shares it out
// without the pre-claim. The gate's own reading, every gateRetry while
// closed, left the first second of a fresh fleet's releases to the claim
// (a third of the jobs of the throughput benchmark's 3 s run).
func TestFirstWorkersOpenThePreclaimGateBeforeTheirFirstPass(t *testing.T) {
	t.Parallel()
	st := &gateStore{fakeStore: newFakeStore(2)}
	st.result = func(int, int) store.PassResult { return store.PassResult{Now: time.Now(), CapacityReached: true} }
	cfg := loopConfig(t, st)
	cfg.MaxSleep, cfg.Pass.Preclaim = 10*time.Millisecond, 2*time.Millisecond
	start(t, cfg)
	eventually(t, 5*time.Second, "passes without workers", allPassed(st.fakeStore))
	st.workers.Store(100)
	withCapacity := func() (n int) {
		for _, c := range st.passes() {
			if c.cfg.Capacity > 0 {
				n++
			}
		}
		return n
	}
	eventually(t, 5*time.Second, "10 passes with the workers' capacity", func() bool { return withCapacity() >= 10 })
	for i, c := range st.passes() {
		if c.cfg.Capacity > 0 && c.cfg.Preclaim <= 0 {
			t.Fatalf("pass %d (shard %d) shared out capacity %d without the pre-claim", i, c.shard, c.cfg.Capacity)
		}
	}
}
