package store

import (
	"bytes"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
)

func ptr(v int64) *int64 { return &v }

func TestPutTenantPolicyVersions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	put := func(o Overrides, ifVersion int64) (int64, error) {
		return e.store.PutTenantPolicy(e.ctx, "acme", o, ifVersion)
	}
	if v, err := put(Overrides{Burst: ptr(5)}, 0); err != nil || v != 1 {
		t.Fatalf("create with If-Match 0: %d, %v", v, err)
	}
	_, err := put(Overrides{Burst: ptr(6)}, 0)
	var mismatch *VersionMismatchError
	if !errors.Is(err, ErrVersionMismatch) || !errors.As(err, &mismatch) || mismatch.Current != 1 {
		t.Fatalf("stale If-Match: %v, want a mismatch at version 1", err)
	}
	if v, err := put(Overrides{RateUS: ptr(20_000)}, 1); err != nil || v != 2 {
		t.Fatalf("If-Match 1: %d, %v", v, err)
	}
	if v, err := put(Overrides{RateUS: ptr(20_000), Concurrency: ptr(3)}, AnyVersion); err != nil || v != 3 {
		t.Fatalf("unconditional: %d, %v", v, err)
	}
	rec, err := e.store.TenantPolicy(e.ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	// PUT replaces: the burst of version 1 is gone.
	want := DefaultParams()
	want.RateUS, want.Concurrency = 20_000, 3
	if rec.Version != 3 || rec.Overrides.Burst != nil || !reflect.DeepEqual(rec.Effective, want) {
		t.Fatalf("record %+v, want version 3 and effective %+v", rec, want)
	}
	if _, err := put(Overrides{Burst: ptr(0), RateUS: ptr(MaxIntervalUS + 1)}, AnyVersion); !errors.Is(err, ErrInvalid) {
		t.Fatalf("out of range: %v, want ErrInvalid", err)
	}
}

// The scripts and TenantPolicy merge DefaultParams ← "*" ← overrides alike.
func TestPolicyMergeAgreesBetweenGoAndLua(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if st := e.state("fresh"); !reflect.DeepEqual(st.Policy, DefaultParams()) {
		t.Fatalf("nothing seeded: scripts use %+v, want DefaultParams", st.Policy)
	}
	e.seed(params(func(p *Params) { p.RateUS, p.MaxBacklog, p.Adaptive = 50_000, 7, 0 }))
	if _, err := e.store.PutTenantPolicy(e.ctx, "acme", Overrides{Burst: ptr(4), Adaptive: ptr(1)}, AnyVersion); err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"acme", "fresh"} {
		rec, err := e.store.TenantPolicy(e.ctx, tenant)
		if err != nil {
			t.Fatal(err)
		}
		if st := e.state(tenant); !reflect.DeepEqual(st.Policy, rec.Effective) || st.Version != rec.Version {
			t.Errorf("%s: scripts see %+v v%d, TenantPolicy says %+v v%d", tenant, st.Policy, st.Version, rec.Effective, rec.Version)
		}
	}
	if st := e.state("acme"); st.Policy.RateUS != 50_000 || st.Policy.Burst != 4 || st.Policy.Adaptive != 1 || st.Policy.MaxBacklog != 7 {
		t.Fatalf("acme: %+v", st.Policy)
	}
}

// A rate change rescales TAT at once: TAT′ = now + (TAT − now)·T′/T, capped
// at now + b′·T′; the next pop follows the new rate.
func TestPolicyChangeRescalesTAT(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst = 100_000, 10 }))
	for range 8 {
		e.enqueueOne("acme", item(`{}`))
	}
	for range 5 { // burst 10: five slots at now, TAT = now + 5T
		rel, ok := e.pop("acme", 0)
		if !ok {
			t.Fatal("pop: nothing due")
		}
		e.cancel(rel.ID) // out of the release cap, which burst 2 would exceed
	}
	tatAfter := func(o Overrides) time.Duration {
		t.Helper()
		if _, err := e.store.PutTenantPolicy(e.ctx, "acme", o, AnyVersion); err != nil {
			t.Fatal(err)
		}
		return e.state("acme").TAT.Sub(e.clock.Now())
	}
	if got := e.state("acme").TAT.Sub(epoch); got != 500*time.Millisecond {
		t.Fatalf("TAT = now + %s, want +500ms", got)
	}
	if got := tatAfter(Overrides{RateUS: ptr(200_000)}); got != time.Second {
		t.Fatalf("half the rate: TAT = now + %s, want +1s", got)
	}
	if got := tatAfter(Overrides{RateUS: ptr(200_000), Burst: ptr(2)}); got != 400*time.Millisecond {
		t.Fatalf("burst 2: TAT = now + %s, want the cap b′·T′ = 400ms", got)
	}
	e.clock.Advance(100 * time.Millisecond)
	if got := tatAfter(Overrides{RateUS: ptr(100_000), Burst: ptr(2)}); got != 150*time.Millisecond {
		t.Fatalf("double the rate: TAT = now + %s, want +150ms", got)
	}
	// The next decision uses the new policy: slot = TAT − (b − 1)·T = now + 50ms.
	if _, ok := e.pop("acme", 49*time.Millisecond); ok {
		t.Fatal("released before its slot")
	}
	rel, ok := e.pop("acme", 50*time.Millisecond)
	if !ok || !rel.Slot.Equal(e.clock.Now().Add(50*time.Millisecond)) {
		t.Fatalf("pop: %+v %v, want the slot now + 50ms", rel, ok)
	}
	if st := e.state("acme"); !st.NextAt.Equal(e.clock.Now().Add(150 * time.Millisecond)) {
		t.Fatalf("ready score %s, want now + 150ms", st.NextAt.Sub(e.clock.Now()))
	}
	e.requireConsistent()
}

func TestPolicyChangeKeepsAdmissionTokens(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.AdmitBurst, p.AdmitUS = 10, 10_000 }))
	for range 7 {
		e.enqueueOne("acme", item(`{}`))
	}
	tokensAfter := func(o Overrides) int64 {
		t.Helper()
		if _, err := e.store.PutTenantPolicy(e.ctx, "acme", o, AnyVersion); err != nil {
			t.Fatal(err)
		}
		return e.state("acme").AdmitTokens
	}
	if got := tokensAfter(Overrides{AdmitBurst: ptr(5)}); got != 3 {
		t.Fatalf("burst 5: %d tokens, want the 3 left", got)
	}
	if got := tokensAfter(Overrides{AdmitBurst: ptr(2)}); got != 2 {
		t.Fatalf("burst 2: %d tokens, want 2 (capped)", got)
	}
	if got := tokensAfter(Overrides{AdmitBurst: ptr(2), AdmitUS: ptr(1_000_000)}); got != 2 {
		t.Fatalf("slower refill: %d tokens, want 2", got)
	}
	rs := e.enqueue("acme", item(`a`), item(`b`), item(`c`))
	if outcomes(rs) != "AAR" || rs[2].RetryAfter != time.Second {
		t.Fatalf("%s %+v: want 2 admitted, then a wait at the new rate (1s)", outcomes(rs), rs[2])
	}
	e.requireConsistent()
}

// New defaults reach a tenant at its next decision, rescaling its TAT then:
// its ready score stays where the old rate put it until a pass visits it.
func TestSeedDefaultsRescalesLazily(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst = 100_000, 1 }))
	e.enqueueOne("acme", item(`1`))
	e.enqueueOne("acme", item(`2`))
	if _, ok := e.pop("acme", 0); !ok { // TAT = now + 100ms
		t.Fatal("pop: nothing due")
	}
	e.seed(params(func(p *Params) { p.RateUS, p.Burst = 50_000, 1 }))
	st := e.state("acme")
	if got := st.TAT.Sub(epoch); got != 50*time.Millisecond {
		t.Fatalf("TAT = now + %s, want +50ms under the new default", got)
	}
	if rel, ok := e.pop("acme", 50*time.Millisecond); ok {
		t.Fatalf("pop: %+v, want nothing before the stale ready score +100ms", rel)
	}
	rel, ok := e.pop("acme", 100*time.Millisecond)
	if !ok || !rel.Slot.Equal(epoch.Add(50*time.Millisecond)) {
		t.Fatalf("pop: %+v %v, want slot +50ms", rel, ok)
	}
	e.requireConsistent()
}

// SeedPolicies writes the defaults every time but a tenant's overrides only
// once: a later file that differs is logged, and Redis's copy kept.
func TestSeedPoliciesKeepsStoredTenantOverrides(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	burst := func(b int64) policy.Overrides { return policy.Overrides{Burst: &b} }
	if err := e.store.SeedPolicies(e.ctx, burst(3), map[string]policy.Overrides{"acme": burst(5)}, log); err != nil {
		t.Fatal(err)
	}
	if err := e.store.SeedPolicies(e.ctx, burst(4), map[string]policy.Overrides{"acme": burst(6)}, log); err != nil {
		t.Fatal(err)
	}
	rec, err := e.store.TenantPolicy(e.ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Version != 1 || rec.Effective.Burst != 5 || *rec.Defaults.Burst != 4 {
		t.Fatalf("after two seeds: version %d, burst %d, default burst %d; want 1, 5 (the first file's), 4 (the last file's)",
			rec.Version, rec.Effective.Burst, *rec.Defaults.Burst)
	}
	if !strings.Contains(logs.String(), "differs from the configuration file") {
		t.Fatalf("no warning about the differing tenant policy in\n%s", logs.String())
	}
}

// Scripts remember the policy's texts, the defaults included, across calls
// per the shard's policy epoch "#v" (lib.lua load_policy), which every
// policy write renews: a write of the defaults or of a tenant's overrides
// is in the very next call's decision, with the library (Functions) as
// with EVAL scripts. A write around policy_put.lua that leaves the epoch
// as it was is what the library does not see — the reason every writer
// renews it — while EVAL, which remembers nothing, sees it.
func TestPolicyWriteIsSeenByTheNextCall(t *testing.T) {
	t.Parallel()
	for _, functions := range []bool{false, true} {
		e := newEnvShards(t, 1)
		if !functions {
			e.store.runner.DisableFunctions()
		}
		burst := func(tn string, want int64, what string) {
			t.Helper()
			if got := e.state(tn).Policy.Burst; got != want {
				t.Fatalf("functions %v, %s: %s's burst %d, want %d", functions, what, tn, got, want)
			}
		}
		e.seed(params(func(p *Params) { p.Burst = 2 }))
		e.enqueue("acme", item(`1`))
		burst("acme", 2, "seeded")
		burst("acme", 2, "a call of the same epoch")
		e.seed(params(func(p *Params) { p.Burst = 3 }))
		burst("acme", 3, "defaults written")
		if _, err := e.store.PutTenantPolicy(e.ctx, "acme", Overrides{Burst: ptr(5)}, AnyVersion); err != nil {
			t.Fatal(err)
		}
		burst("acme", 5, "override written")
		burst("globex", 3, "another tenant's override written")
		e.seed(params(func(p *Params) { p.Burst = 4 }))
		burst("acme", 5, "defaults written under an override")
		burst("globex", 4, "defaults written again")
		if _, err := e.store.PutTenantPolicy(e.ctx, "acme", Overrides{RateUS: ptr(20_000)}, AnyVersion); err != nil {
			t.Fatal(err)
		}
		burst("acme", 4, "override of burst dropped")
		if rel := e.passTenant("acme", time.Second, -1); len(rel) != 1 {
			t.Fatalf("functions %v: released %d of 1", functions, len(rel))
		}

		key := e.store.keys.policy(0)
		if err := e.rdb.HSet(e.ctx, key, "*", `{"burst":9}`).Err(); err != nil { // around policy_put: the epoch stays
			t.Fatal(err)
		}
		burst("globex", map[bool]int64{false: 9, true: 4}[functions], "defaults written, the epoch kept")
		if err := e.rdb.HSet(e.ctx, key, "#v", "renewed").Err(); err != nil {
			t.Fatal(err)
		}
		burst("globex", 9, "the epoch renewed")
		if err := e.rdb.HDel(e.ctx, key, "#v").Err(); err != nil { // as an earlier release left it
			t.Fatal(err)
		}
		burst("globex", 9, "no epoch")
		if err := e.rdb.HSet(e.ctx, key, "*", `{"burst":8}`).Err(); err != nil {
			t.Fatal(err)
		}
		burst("globex", 8, "defaults written without an epoch")
		burst("acme", 8, "another tenant, no epoch")
	}
}
