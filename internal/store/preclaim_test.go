package store

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/wire"
)

// preclaimPass runs one unlimited pass on tenant's shard with D = 1s, no
// L, grace 1s and the pre-claim's ε = 2ms.
func (e *env) preclaimPass(tenant string) []wire.Release {
	e.t.Helper()
	return e.pass(e.store.keys.shardOf(tenant), PassConfig{Lead: time.Second, MinLead: -1,
		Grace: time.Second, Capacity: -1, Preclaim: 2 * ms}).Released
}

// The pass claims the job that is due (its send target within ε) and
// leaves the one that is not to the claim; the pre-claimed release carries
// what a claim's reply carries, signing set included, and its record is
// what a claim leaves.
func TestPreclaimDueNotFuture(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.TimeoutUS = 50_000, 1, 5_000_000 }))
	secret := e.addSecret("acme", "k1:sealed", 0)
	e.enqueue("acme", item(`{"due":1}`), item(`{"later":1}`))
	rel := e.preclaimPass("acme")
	if len(rel) != 2 || rel[0].Claimed == nil || rel[1].Claimed != nil {
		t.Fatalf("releases %+v: want the first pre-claimed, the second (+50ms) left to the claim", rel)
	}
	now := e.clock.Now()
	c := rel[0].Claimed
	if c.Tenant != "acme" || c.Type != wire.TypeWebhook || c.Body != `{"due":1}` || c.Attempt != 1 ||
		c.TimeoutUS != 5_000_000 || c.SlotUS != now.UnixMicro() || c.Cost != 1 || c.Upstreams != nil ||
		!rel[0].SendAt.Equal(now) {
		t.Fatalf("pre-claimed %+v (send %s), want the claim's fields at now %s", c, rel[0].SendAt, now)
	}
	if c.Signing == nil || len(c.Signing.Secrets) != 1 || c.Signing.Secrets[0].ID != secret ||
		c.Signing.Secrets[0].Sealed != "k1:sealed" || c.Signing.Unsigned || c.Signing.NowUS != now.UnixMicro() {
		t.Fatalf("signing %+v, want the tenant's secret %s", c.Signing, secret)
	}
	j := e.job(rel[0].ID)
	if j.State != StateRunning || j.Attempt != 1 || j.Gen != rel[0].Gen || !j.Claimed.Equal(now) || !j.First.Equal(now) {
		t.Fatalf("record %+v: want running, attempt 1, claimed now", j)
	}
	lease := e.rdb.ZScore(e.ctx, e.store.keys.leases(e.store.keys.shardOf("acme")), rel[0].ID).Val()
	if want := now.Add(5*time.Second + time.Second).UnixMicro(); int64(lease) != want {
		t.Fatalf("lease %d, want send + timeout + grace = %d", int64(lease), want)
	}
	if st := e.state("acme"); st.Running != 1 || st.Released != 1 {
		t.Fatalf("state %+v: want 1 running, 1 released", st)
	}
	// A worker of the previous version claims it: stale, nothing changes.
	if got := e.claim(rel[0].ID, rel[0].Gen); got.Outcome != ClaimStale || got.State != StateRunning {
		t.Fatalf("claim of a pre-claimed job: %+v, want stale (running)", got)
	}
	// The finish is a claimed job's.
	if st := e.finish(rel[0].ID, rel[0].Gen, wire.AttemptOutcome{Kind: wire.FinishSuccess}, FinishConfig{}); st != StateSucceeded {
		t.Fatalf("finish: %s", st)
	}
	e.requireConsistent()
}

// The pre-claim's round trip through the hand-off: PreClaimed gives the
// worker the ClaimedJob a claim would have.
func TestPreClaimedPayload(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.TimeoutUS = 3_000_000 }))
	e.addSecret("acme", "k1:sealed", 0)
	e.enqueue("acme", item(`{"a":1}`))
	r := e.preclaimPass("acme")[0]
	b, err := wire.DecodeBatch(wire.EncodeBatch(wire.Batch{Jobs: []wire.Payload{
		{ID: r.ID, Gen: r.Gen, SlotUS: r.SendAt.UnixMicro(), Claimed: r.Claimed}}}))
	if err != nil {
		t.Fatal(err)
	}
	got, ok := PreClaimed(b.Jobs[0])
	if !ok || got.ID != r.ID || got.Gen != r.Gen || got.Tenant != "acme" || string(got.Body) != `{"a":1}` ||
		got.Attempt != 1 || got.Timeout != 3*time.Second || !got.SendAt.Equal(r.SendAt) || !got.Slot.Equal(r.Slot) ||
		got.Signing == nil || len(got.Signing.Secrets) != 1 || got.Signing.Secrets[0].Sealed != "k1:sealed" {
		t.Fatalf("PreClaimed = %+v, %v", got, ok)
	}
	j := e.job(r.ID)
	if !got.Created.Equal(j.Created) {
		t.Fatalf("created %s, want the record's %s", got.Created, j.Created)
	}
	if _, ok := PreClaimed(wire.Payload{ID: r.ID, Gen: r.Gen, SlotUS: 1}); ok {
		t.Fatal("a payload without claim is pre-claimed")
	}
}

// The send schedule, the records and the leases after pre-claims equal what
// claims at the same instants give: a backlog of 6 at b = 3, T = 10ms, once
// with the pass's pre-claim (the 3 due ones) and once without, every other
// job claimed at its slot.
func TestPreclaimScheduleEqualsClaims(t *testing.T) {
	t.Parallel()
	run := func(eps time.Duration) (pre int, sends []time.Time, leases []float64, st TenantState, next []wire.Release) {
		e := newEnv(t)
		e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.TimeoutUS = 10_000, 3, 1_000_000 }))
		e.enqueue("acme", batchOf(6, "acme")...)
		rel := e.pass(e.store.keys.shardOf("acme"), PassConfig{Lead: time.Second, MinLead: -1,
			Grace: time.Second, Capacity: -1, Preclaim: eps}).Released
		for _, r := range rel {
			if job, ok := PreClaimed(wire.Payload{ID: r.ID, Gen: r.Gen, SlotUS: r.SendAt.UnixMicro(), Claimed: r.Claimed}); ok {
				sends = append(sends, job.SendAt)
				pre++
				continue
			}
			sends = append(sends, e.claimAt(r).SendAt)
		}
		for _, r := range rel {
			leases = append(leases, e.rdb.ZScore(e.ctx, e.store.keys.leases(e.store.keys.shardOf("acme")), r.ID).Val())
		}
		e.enqueue("acme", batchOf(3, "more")...)
		next = e.pass(e.store.keys.shardOf("acme"), PassConfig{Lead: time.Second, MinLead: -1,
			Grace: time.Second, Capacity: -1}).Released
		e.requireConsistent()
		return pre, sends, leases, e.state("acme"), next
	}
	p1, s1, l1, st1, n1 := run(2 * ms)
	p2, s2, l2, st2, n2 := run(0)
	if p1 != 3 || p2 != 0 || len(s1) != 6 || len(s2) != 6 {
		t.Fatalf("%d and %d pre-claimed, sends %v and %v: want 3 and 0, 6 each", p1, p2, s1, s2)
	}
	for i := range s1 {
		if !s1[i].Equal(s2[i]) || l1[i] != l2[i] {
			t.Errorf("job %d: send %s lease %.0f pre-claimed, %s %.0f claimed", i, s1[i], l1[i], s2[i], l2[i])
		}
	}
	if st1.Running != st2.Running || st1.Released != st2.Released || !st1.NextAt.Equal(st2.NextAt) {
		t.Errorf("state %+v pre-claimed, %+v claimed", st1, st2)
	}
	if len(n1) != len(n2) {
		t.Fatalf("next pass released %d and %d", len(n1), len(n2))
	}
	for i := range n1 {
		if !n1[i].Slot.Equal(n2[i].Slot) || !n1[i].SendAt.Equal(n2[i].SendAt) {
			t.Errorf("next pass job %d: slot %s send %s pre-claimed, %s %s claimed", i, n1[i].Slot, n1[i].SendAt,
				n2[i].Slot, n2[i].SendAt)
		}
	}
}

// A paused tenant's job is released at its pause's end and left to the
// claim; a disabled tenant releases nothing; task jobs and large bodies
// are never pre-claimed; a job at its tenant's concurrency is not released.
func TestPreclaimOnlyEligible(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.Burst, p.Concurrency = 10, 2 }))
	if err := e.store.Pause(e.ctx, "paused", e.clock.Now().Add(100*ms)); err != nil {
		t.Fatal(err)
	}
	e.enqueue("paused", item(`{"p":1}`))
	if rel := e.preclaimPass("paused"); len(rel) != 1 || rel[0].Claimed != nil || !rel[0].Slot.Equal(e.clock.Now().Add(100*ms)) {
		t.Fatalf("paused tenant: %+v, want released at the pause's end, not pre-claimed", rel)
	}

	e.enqueue("off", item(`{"o":1}`))
	e.rdb.HSet(e.ctx, e.store.keys.tenant("off"), "disabled", 1) // as a 410 would
	if rel := e.preclaimPass("off"); len(rel) != 0 {
		t.Fatalf("disabled tenant released %+v", rel)
	}

	task := Item{Type: wire.TypeTask, Body: []byte(`{"queue":"q","task_type":"t"}`)}
	big := item(`{"big":"` + strings.Repeat("x", 17000) + `"}`)
	e.enqueue("mixed", task, big, item(`{"small":1}`))
	rel := e.preclaimPass("mixed")
	if len(rel) != 2 {
		t.Fatalf("mixed tenant released %d, want 2 (its concurrency)", len(rel))
	}
	for _, r := range rel {
		if r.Claimed != nil {
			t.Errorf("%s job %s pre-claimed", r.Type, r.ID)
		}
	}
	if st := e.state("mixed"); st.Running != 0 || st.Released != 2 {
		t.Fatalf("state %+v: want 2 released, none running", st)
	}
	e.requireConsistent()
}

// A pre-claimed job is running: a cancel conflicts with it as with a
// claimed one.
func TestPreclaimCanceled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(DefaultParams())
	e.enqueue("acme", item(`{"a":1}`))
	r := e.preclaimPass("acme")[0]
	if r.Claimed == nil {
		t.Fatalf("release %+v not pre-claimed", r)
	}
	_, _, err := e.store.Cancel(e.ctx, r.ID)
	var conflict *ConflictError
	if !errors.As(err, &conflict) || conflict.State != StateRunning {
		t.Fatalf("cancel of a pre-claimed job: %v, want a conflict (running)", err)
	}
}

// preclaimedOne enqueues one job of tenant acme (timeout 1s) and returns
// its pre-claimed release.
func preclaimedOne(t *testing.T) (*env, wire.Release) {
	t.Helper()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.TimeoutUS = 1_000_000 }))
	e.enqueue("acme", item(`{"a":1}`))
	r := e.preclaimPass("acme")[0]
	if r.Claimed == nil {
		t.Fatalf("release %+v not pre-claimed", r)
	}
	return e, r
}

// A pre-claimed job its worker dropped unsent (FinishLapsed) goes back at
// once as the sweep would take it back at its lease's end: queued, gen + 1,
// the pre-claim's attempt given back, its lease gone, nothing logged — and
// its next release may be pre-claimed again. A second give-back of the same
// gen, or one of a job the claim (not the pass) claimed, is stale and
// changes nothing.
func TestPreclaimLapsedGivenBack(t *testing.T) {
	t.Parallel()
	e, r := preclaimedOne(t)
	lapsed := wire.AttemptOutcome{Kind: wire.FinishLapsed}
	if st := e.finish(r.ID, r.Gen, lapsed, FinishConfig{}); st != StateQueued {
		t.Fatalf("given back: %s, want queued", st)
	}
	j := e.job(r.ID)
	if j.State != StateQueued || j.Gen != r.Gen+1 || j.Attempt != 0 || !j.First.IsZero() || j.Logged != 0 {
		t.Fatalf("record %+v: want queued, gen + 1, no attempt, nothing logged", j)
	}
	shard := e.store.keys.shardOf("acme")
	if err := e.rdb.ZScore(e.ctx, e.store.keys.leases(shard), r.ID).Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("lease of the job given back: %v, want none", err)
	}
	st, err := e.store.Finish(e.ctx, r.ID, r.Gen, lapsed, FinishConfig{})
	if !errors.Is(err, ErrStale) || st != StateQueued {
		t.Fatalf("second give-back: %s, %v; want stale, queued", st, err)
	}
	if j := e.job(r.ID); j.Gen != r.Gen+1 || j.Logged != 0 {
		t.Fatalf("record after a stale give-back %+v: want it unchanged", j)
	}
	e.clock.Advance(time.Second) // past the slot the pre-claim took: due at the pass
	again := e.preclaimPass("acme")
	if len(again) != 1 || again[0].Claimed == nil || again[0].Claimed.Attempt != 1 {
		t.Fatalf("release after the give-back %+v: want it pre-claimed again, attempt 1", again)
	}
	// A job its worker claimed: the give-back is stale, the job runs on.
	e.enqueue("acme", item(`{"b":2}`))
	rel := e.passTenant("acme", time.Second, -1)
	if len(rel) != 1 || rel[0].Claimed != nil {
		t.Fatalf("release without pre-claim %+v", rel)
	}
	c := e.claimAt(rel[0])
	if st, err := e.store.Finish(e.ctx, c.ID, c.Gen, lapsed, FinishConfig{}); !errors.Is(err, ErrStale) || st != StateRunning {
		t.Fatalf("give-back of a claimed job: %s, %v; want stale, running", st, err)
	}
	if j := e.job(c.ID); j.State != StateRunning || j.Gen != c.Gen || j.Attempt != 1 || j.Logged != 0 {
		t.Fatalf("claimed job after a give-back %+v: want it running at its gen, unchanged", j)
	}
	e.requireConsistent()
}

// A pre-claimed job whose batch never reached a worker: the sweep returns
// it as a lost release (head lane, gen + 1, no attempt used), and its next
// release goes through the claim, which counts the attempt.
func TestPreclaimLostBatchSwept(t *testing.T) {
	t.Parallel()
	e, r := preclaimedOne(t)
	e.clock.Advance(2*time.Second + time.Microsecond) // past send + timeout + grace
	res := e.pass(e.store.keys.shardOf("acme"), PassConfig{Lead: time.Second, MinLead: -1, Grace: time.Second,
		Capacity: 0, Preclaim: 2 * ms})
	j := e.job(r.ID)
	if res.Swept != 1 || j.State != StateQueued || j.Gen != r.Gen+1 || j.Attempt != 0 || !j.First.IsZero() || j.Logged != 0 {
		t.Fatalf("swept %d, record %+v: want queued, gen + 1, no attempt", res.Swept, j)
	}
	rel := e.preclaimPass("acme")
	if len(rel) != 1 || rel[0].Claimed != nil {
		t.Fatalf("release after the loss %+v: want one left to the claim", rel)
	}
	if c := e.claimAt(rel[0]); c.Attempt != 1 {
		t.Fatalf("claim after the loss: attempt %d, want 1", c.Attempt)
	}
	e.requireConsistent()
}
