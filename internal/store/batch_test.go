package store

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

func claimReqs(rel ...wire.Release) []ClaimRequest {
	reqs := make([]ClaimRequest, len(rel))
	for i, r := range rel {
		reqs[i] = ClaimRequest{ID: r.ID, Gen: r.Gen}
	}
	return reqs
}

func (e *env) claimBatch(shard int, reqs ...ClaimRequest) []Claim {
	e.t.Helper()
	cs, err := e.store.ClaimBatch(e.ctx, shard, reqs, 2*ms)
	if err != nil {
		e.t.Fatalf("claim batch: %v", err)
	}
	if len(cs) != len(reqs) {
		e.t.Fatalf("claim batch: %d claims for %d jobs", len(cs), len(reqs))
	}
	return cs
}

// Two tenants of different rates in one call each keep their own send
// schedule and accounting: both first jobs go out together, then a call
// holding both second jobs claims only the faster tenant's, and the slower
// one's is early by its own interval.
func TestClaimBatchMixedTenants(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst = 100_000, 1 }))
	if _, err := e.store.PutTenantPolicy(e.ctx, "fast", Overrides{RateUS: ptr(50_000)}, AnyVersion); err != nil {
		t.Fatal(err)
	}
	slow, fast := e.released("slow", 2), e.released("fast", 2)
	e.clock.Set(slow[0].Slot)
	cs := e.claimBatch(0, claimReqs(slow[0], fast[0])...)
	if cs[0].Outcome != ClaimOK || cs[0].Job.Tenant != "slow" || cs[1].Outcome != ClaimOK || cs[1].Job.Tenant != "fast" {
		t.Fatalf("first jobs: %+v", cs)
	}
	e.clock.Set(fast[1].Slot)
	cs = e.claimBatch(0, claimReqs(slow[1], fast[1])...)
	if cs[0].Outcome != ClaimEarly || cs[0].Wait != slow[1].Slot.Sub(fast[1].Slot) {
		t.Fatalf("slow's second job at fast's second slot: %+v, want early by %s", cs[0], slow[1].Slot.Sub(fast[1].Slot))
	}
	if cs[1].Outcome != ClaimOK || cs[1].Job.Attempt != 1 {
		t.Fatalf("fast's second job: %+v, want claimed", cs[1])
	}
	if st := e.state("slow"); st.Running != 1 || st.Released != 1 {
		t.Fatalf("slow: %+v, want 1 running, 1 released", st)
	}
	if st := e.state("fast"); st.Running != 2 || st.Released != 0 {
		t.Fatalf("fast: %+v, want 2 running", st)
	}
	rs, err := e.store.FinishBatch(e.ctx, 0, []FinishRequest{
		{ID: slow[0].ID, Gen: slow[0].Gen, Outcome: wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200}},
		{ID: fast[0].ID, Gen: fast[0].Gen, Outcome: wire.AttemptOutcome{Kind: wire.FinishRetry, Status: 500}},
		{ID: fast[1].ID, Gen: fast[1].Gen, Outcome: wire.AttemptOutcome{Kind: wire.FinishPermanent, Status: 400}},
	}, FinishConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if rs[0] != (FinishResult{State: StateSucceeded}) || rs[1] != (FinishResult{State: StateRetrying}) ||
		rs[2] != (FinishResult{State: StateDead}) {
		t.Fatalf("finish batch: %+v", rs)
	}
	if st := e.state("slow"); st.Running != 0 || st.Released != 1 || st.DeadLetters != 0 {
		t.Fatalf("slow after the finishes: %+v", st)
	}
	if st := e.state("fast"); st.Running != 0 || st.Backlog != 1 || st.DeadLetters != 1 {
		t.Fatalf("fast after the finishes: %+v, want 1 retrying, 1 dead", st)
	}
	e.requireConsistent()
}

// A stale request beside a current one: the stale one changes nothing, the
// other goes through, in both the claim and the finish.
func TestBatchStaleBesideOK(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	e.seed(params(func(p *Params) { p.Burst = 2 }))
	rel := e.released("acme", 2)
	e.clock.Set(rel[1].Slot)
	cs := e.claimBatch(0, ClaimRequest{ID: rel[0].ID, Gen: rel[0].Gen + 1}, ClaimRequest{ID: rel[1].ID, Gen: rel[1].Gen})
	if cs[0].Outcome != ClaimStale || cs[0].State != StateReleased || cs[1].Outcome != ClaimOK {
		t.Fatalf("claims: %+v, want stale then ok", cs)
	}
	rs, err := e.store.FinishBatch(e.ctx, 0, []FinishRequest{
		{ID: rel[0].ID, Gen: rel[0].Gen, Outcome: wire.AttemptOutcome{Kind: wire.FinishSuccess}},
		{ID: rel[1].ID, Gen: rel[1].Gen, Outcome: wire.AttemptOutcome{Kind: wire.FinishSuccess}},
	}, FinishConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(rs[0].Err, ErrStale) || rs[0].State != StateReleased || rs[1] != (FinishResult{State: StateSucceeded}) {
		t.Fatalf("finishes: %+v, want stale then succeeded", rs)
	}
	if j := e.job(rel[0].ID); j.State != StateReleased || j.Attempt != 0 {
		t.Fatalf("stale job: %+v, want released, no attempt", j)
	}
	if st := e.state("acme"); st.Running != 0 || st.Released != 1 {
		t.Fatalf("state %+v: want 1 released", st)
	}
	e.requireConsistent()
}

// A throttled attempt pauses its tenant in the middle of a finish batch:
// the tenant's later attempt in the same call still succeeds (the pause
// gates claims, not finishes), and a claim batch after it gives the
// paused tenant's job back while the other tenant's goes out.
func TestBatchTenantPausedMidway(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	e.seed(params(func(p *Params) { p.Burst = 3 }))
	a, b := e.released("a", 3), e.released("b", 1)
	e.clock.Set(a[1].Slot)
	cs := e.claimBatch(0, claimReqs(a[0], a[1])...)
	if cs[0].Outcome != ClaimOK || cs[1].Outcome != ClaimOK {
		t.Fatalf("claims: %+v", cs)
	}
	rs, err := e.store.FinishBatch(e.ctx, 0, []FinishRequest{
		{ID: a[0].ID, Gen: a[0].Gen, Outcome: wire.AttemptOutcome{Kind: wire.FinishThrottled, Status: 429, Pause: time.Minute}},
		{ID: a[1].ID, Gen: a[1].Gen, Outcome: wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200}},
	}, FinishConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if rs[0] != (FinishResult{State: StateQueued}) || rs[1] != (FinishResult{State: StateSucceeded}) {
		t.Fatalf("finishes: %+v", rs)
	}
	if st := e.state("a"); !st.PausedUntil.Equal(e.clock.Now().Add(time.Minute)) {
		t.Fatalf("a paused until %s, want now + 1m", st.PausedUntil)
	}
	e.clock.Set(a[2].Slot)
	cs = e.claimBatch(0, claimReqs(a[2], b[0])...)
	if cs[0].Outcome != ClaimReturned || cs[0].Reason != "paused" || cs[1].Outcome != ClaimOK {
		t.Fatalf("claims after the pause: %+v, want a's returned (paused), b's ok", cs)
	}
	if st := e.state("a"); st.Queued != 2 || st.Running != 0 || st.Released != 0 {
		t.Fatalf("a: %+v, want 2 queued", st)
	}
	e.requireConsistent()
}

// A job of another shard in a batch is refused before anything runs.
func TestBatchOtherShardRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	names := tenantsOnShards(e, 2)
	x, y := e.released(names[0], 1)[0], e.released(names[1], 1)[0]
	shard := e.store.keys.shardOf(names[0])
	e.clock.Set(x.Slot)
	e.clock.Set(y.Slot)
	if _, err := e.store.ClaimBatch(e.ctx, shard, claimReqs(x, y), 2*ms); !errors.Is(err, ErrInvalid) {
		t.Fatalf("claim batch across shards: %v, want ErrInvalid", err)
	}
	if j := e.job(x.ID); j.State != StateReleased {
		t.Fatalf("job of the right shard: %s, want released (nothing claimed)", j.State)
	}
	_, err := e.store.FinishBatch(e.ctx, shard, []FinishRequest{{ID: x.ID, Gen: x.Gen}, {ID: y.ID, Gen: y.Gen}}, FinishConfig{})
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("finish batch across shards: %v, want ErrInvalid", err)
	}
	if j := e.job(x.ID); j.State != StateReleased || j.Logged != 0 {
		t.Fatalf("job after the refused finish: %+v, want unchanged", j)
	}
}

// tenantsOnShards names n tenants of n different shards.
func tenantsOnShards(e *env, n int) []string {
	e.t.Helper()
	seen := map[int]bool{}
	var names []string
	for i := 0; len(names) < n && i < 1000; i++ {
		tn := "t" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if s := e.store.keys.shardOf(tn); !seen[s] {
			seen[s] = true
			names = append(names, tn)
		}
	}
	if len(names) < n {
		e.t.Fatalf("found %d of %d shards", len(names), n)
	}
	return names
}

// A tenant's policy text is remembered across calls only within one policy
// epoch: a PUT between two calls is seen by the second even for a tenant
// that is not the first it reads.
func TestPolicyTextsFollowTheEpoch(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	e.seed(params(func(p *Params) { p.Burst, p.Concurrency = 3, 10 }))
	b := e.released("b", 1)
	a := e.released("a", 2) // both passes read a and b's texts
	if _, err := e.store.PutTenantPolicy(e.ctx, "a", Overrides{Concurrency: ptr(1)}, AnyVersion); err != nil {
		t.Fatal(err)
	}
	e.clock.Set(a[1].Slot)
	cs := e.claimBatch(0, claimReqs(b[0], a[0], a[1])...)
	if cs[0].Outcome != ClaimOK || cs[1].Outcome != ClaimOK || cs[2].Outcome != ClaimReturned || cs[2].Reason != "concurrency" {
		t.Fatalf("claims: %+v, want b's and a's first ok, a's second returned (concurrency 1)", cs)
	}
	e.requireConsistent()
}

// A tenant with a costlier job queued is rescheduled by that job's cost
// (field c1 is off for it): after its cost-1 job is released, its next
// slot is the one for cost 2, not for cost 1.
func TestRescheduleReadsACostlyHead(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.AdmitBurst = 100_000, 2, 4 }))
	costly := item(`{"cost":2}`)
	costly.Cost = 2
	if got := outcomes(e.enqueue("acme", item(`{"cost":1}`), costly)); got != "AA" {
		t.Fatalf("enqueue: %s, want both accepted", got)
	}
	rel := e.passTenant("acme", time.Microsecond, -1)
	if len(rel) != 1 {
		t.Fatalf("released %d, want the cost-1 job only", len(rel))
	}
	// TAT = slot + T; a cost-2 job's earliest slot is TAT − (b − 2)·T = TAT.
	if got, want := e.state("acme").NextAt, rel[0].Slot.Add(100*ms); !got.Equal(want) {
		t.Fatalf("next at %s, want %s (the slot for cost 2)", got, want)
	}
	// An enqueue behind it reschedules without the pass's knowledge of the
	// head: still the slot for cost 2.
	e.enqueueOne("acme", item(`{"cost":1,"n":2}`))
	if got, want := e.state("acme").NextAt, rel[0].Slot.Add(100*ms); !got.Equal(want) {
		t.Fatalf("after an enqueue: next at %s, want %s", got, want)
	}
	// Its claim and finish (no reschedule needed for the score) keep it.
	e.claimAt(rel[0])
	e.finish(rel[0].ID, rel[0].Gen, wire.AttemptOutcome{Kind: wire.FinishSuccess}, FinishConfig{})
	if got, want := e.state("acme").NextAt, rel[0].Slot.Add(100*ms); !got.Equal(want) {
		t.Fatalf("after claim and finish: next at %s, want %s", got, want)
	}
	e.requireConsistent()
}

// A tenant held out of ready by its release cap comes back at the claim
// that frees the cap, even though a claim changes nothing else its score
// depends on.
func TestClaimFreesTheReleaseCap(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst = 100_000, 1 }))
	e.enqueue("acme", batchOf(4, "acme")...)
	// D = 150ms: the cap is ⌈D/T⌉ + b = 3 tokens released at once.
	rel := e.passTenant("acme", 150*ms, -1)
	if st := e.state("acme"); st.Released != 2 {
		t.Fatalf("released %d, want 2 (slots now and +100ms)", st.Released)
	}
	e.clock.Set(epoch.Add(200 * ms))
	rel = append(rel, e.passTenant("acme", 150*ms, -1)...)
	if st := e.state("acme"); st.Released != 3 || !st.NextAt.IsZero() {
		t.Fatalf("state %+v: want 3 released and out of ready (the cap)", st)
	}
	e.claim(rel[0].ID, rel[0].Gen)
	if st := e.state("acme"); st.NextAt.IsZero() {
		t.Fatalf("after a claim freed the cap: not in ready (%+v)", st)
	}
	e.requireConsistent()
}
