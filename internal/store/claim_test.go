package store

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

// released enqueues n jobs for tenant and releases them with one pass at
// their GCRA slots (L = 0, D = 1s).
func (e *env) released(tenant string, n int) []wire.Release {
	e.t.Helper()
	e.enqueue(tenant, batchOf(n, tenant)...)
	rel := e.passTenant(tenant, time.Second, -1)
	if len(rel) != n {
		e.t.Fatalf("released %d of %d", len(rel), n)
	}
	return rel
}

func TestClaimOK(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.Burst, p.TimeoutUS = 2, 5_000_000 }))
	rel := e.released("acme", 1)[0]
	e.clock.Set(rel.Slot.Add(2 * ms)) // |now − slot| = ε: still on time
	c := e.claim(rel.ID, rel.Gen)
	want := ClaimedJob{ID: rel.ID, Tenant: "acme", Type: "webhook", Body: []byte(`{"acme":0}`),
		Gen: 1, Attempt: 1, Timeout: 5 * time.Second}
	if c.Outcome != ClaimOK || string(c.Job.Body) != string(want.Body) || c.Job.ID != want.ID ||
		c.Job.Tenant != want.Tenant || c.Job.Gen != want.Gen || c.Job.Attempt != want.Attempt ||
		c.Job.Timeout != want.Timeout || !c.Job.Slot.Equal(rel.Slot) || c.Job.Cost != 1 || c.Job.Upstreams != nil {
		t.Fatalf("claim: %+v, want %+v", c, want)
	}
	j := e.job(rel.ID)
	if j.State != StateRunning || j.Attempt != 1 || !j.Claimed.Equal(e.clock.Now()) || !j.First.Equal(e.clock.Now()) {
		t.Fatalf("record after the claim: %+v", j)
	}
	if j.Created.IsZero() || !c.Job.Created.Equal(j.Created) {
		t.Fatalf("claimed job created %s, want the record's %s", c.Job.Created, j.Created)
	}
	if !c.Job.SendAt.Equal(e.clock.Now()) {
		t.Fatalf("a claim after the slot sends at %s, want now %s", c.Job.SendAt, e.clock.Now())
	}
	lease := e.rdb.ZScore(e.ctx, e.store.keys.leases(e.store.keys.shardOf("acme")), rel.ID).Val()
	if want := e.clock.Now().Add(5*time.Second + time.Second).UnixMicro(); int64(lease) != want {
		t.Fatalf("lease %d, want claim + timeout + grace = %d", int64(lease), want)
	}
	if st := e.state("acme"); st.Running != 1 || st.Released != 0 || st.Backlog != 0 {
		t.Fatalf("state %+v: want 1 running", st)
	}
	// The same task delivered twice: the second claim is stale.
	if c := e.claim(rel.ID, rel.Gen); c.Outcome != ClaimStale || c.State != StateRunning {
		t.Fatalf("second claim: %+v, want stale", c)
	}
	e.requireConsistent()
}

func TestClaimEarlyStaleCanceled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst = 50_000, 1 }))
	e.enqueue("acme", item(`1`), item(`2`), item(`3`))
	rel := e.passTenant("acme", time.Second, 50*ms)[1:] // slots +50ms, +100ms
	if c := e.claim(rel[0].ID, rel[0].Gen); c.Outcome != ClaimEarly || c.Wait != 50*ms {
		t.Fatalf("claim 50ms early: %+v, want early, wait 50ms", c)
	}
	e.clock.Advance(50*ms - 2*ms - time.Microsecond)
	if c := e.claim(rel[0].ID, rel[0].Gen); c.Outcome != ClaimEarly || c.Wait != 2*ms+time.Microsecond {
		t.Fatalf("claim just before slot − ε: %+v", c)
	}
	e.clock.Advance(time.Microsecond)
	for _, c := range []struct {
		id   string
		gen  int64
		want ClaimOutcome
	}{
		{rel[0].ID, rel[0].Gen + 1, ClaimStale}, // a generation that never was
		{rel[0].ID, rel[0].Gen - 1, ClaimStale}, // an old task
		{"j0_01KJMMA2G0WAAKMBBJK9MDDZKB", 1, ClaimStale},
		{rel[0].ID, rel[0].Gen, ClaimOK}, // at slot − ε
	} {
		if got := e.claim(c.id, c.gen); got.Outcome != c.want {
			t.Errorf("claim %s@%d: %+v, want %d", c.id, c.gen, got, c.want)
		}
	}
	e.cancel(rel[1].ID)
	if c := e.claim(rel[1].ID, rel[1].Gen); c.Outcome != ClaimCanceled {
		t.Fatalf("claim of a canceled job: %+v", c)
	}
	if _, err := e.store.Claim(e.ctx, "nope", 1, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("malformed id: %v", err)
	}
	e.requireConsistent()
}

// Paused, disabled or at the cap: the job returns to the head lane unsent,
// gen + 1, no attempt used; the tenant is rescheduled.
func TestClaimReturned(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.Burst, p.Concurrency = 5, 5 }))
	rel := e.released("acme", 5)
	returned := func(r wire.Release, reason string) {
		t.Helper()
		e.clock.Set(r.Slot)
		if c := e.claim(r.ID, r.Gen); c.Outcome != ClaimReturned || c.Reason != reason {
			t.Fatalf("claim: %+v, want returned (%s)", c, reason)
		}
		j := e.job(r.ID)
		head := e.rdb.ZRange(e.ctx, e.store.keys.tenantHead("acme"), 0, -1).Val()
		if j.State != StateQueued || j.Gen != r.Gen+1 || j.Attempt != 0 || head[len(head)-1] != r.ID {
			t.Fatalf("returned job %+v, head lane %v", j, head)
		}
		if c := e.claim(r.ID, r.Gen); c.Outcome != ClaimStale {
			t.Fatalf("claim after the return: %+v, want stale", c)
		}
		e.requireConsistent()
	}

	if err := e.store.Pause(e.ctx, "acme", time.Time{}); err != nil {
		t.Fatal(err)
	}
	returned(rel[0], ReasonPaused)
	if err := e.store.Pause(e.ctx, "acme", epoch.Add(time.Hour)); err != nil { // timed
		t.Fatal(err)
	}
	returned(rel[1], ReasonPaused)
	if err := e.store.Resume(e.ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	e.rdb.HSet(e.ctx, e.store.keys.tenant("acme"), "disabled", 1) // as a 410 would
	returned(rel[2], ReasonDisabled)
	if err := e.store.Resume(e.ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	e.claimAt(rel[3])
	if _, err := e.store.PutTenantPolicy(e.ctx, "acme", Overrides{Concurrency: ptr(1)}, AnyVersion); err != nil {
		t.Fatal(err)
	}
	returned(rel[4], ReasonConcurrency)
	if st := e.state("acme"); st.Queued != 4 || st.Running != 1 || !st.NextAt.IsZero() {
		t.Fatalf("state %+v: want 4 back in the head lane, out of ready at the cap", st)
	}
}

// Late: a late claim goes out at once when no later job of the tenant went
// out in between (the plan follows the send schedule); after a later job
// went out, it waits its turn: the send schedule never clumps.
func TestClaimLate(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // 10/s, burst 1: T = 100ms
	rel := e.released("acme", 1)[0]

	e.clock.Set(rel.Slot.Add(5 * ms))
	if c := e.claim(rel.ID, rel.Gen); c.Outcome != ClaimOK || c.Job.Attempt != 1 {
		t.Fatalf("late claim: %+v, want claimed at once", c)
	}
	// The next job, planned T after the late one, goes out T after it: the
	// lateness carries over to the backlog planned before it went out.
	e.enqueue("acme", item(`{"1":1}`))
	next := e.passTenant("acme", time.Second, -1)
	if len(next) != 1 || !next[0].Slot.Equal(rel.Slot.Add(100*ms)) {
		t.Fatalf("released %+v, want the next slot T after the first", next)
	}
	// The worker is told to claim 5ms late, and the lease covers that.
	if want := next[0].Slot.Add(5 * ms); !next[0].SendAt.Equal(want) {
		t.Fatalf("send at +%s, want the slot + 5ms", next[0].SendAt.Sub(next[0].Slot))
	}
	lease := e.rdb.ZScore(e.ctx, e.store.keys.leases(e.store.keys.shardOf("acme")), next[0].ID).Val()
	if want := next[0].SendAt.Add(time.Second).UnixMicro(); int64(lease) != want {
		t.Fatalf("lease until %d, want send at + grace = %d", int64(lease), want)
	}
	e.clock.Set(next[0].Slot)
	if c := e.claim(next[0].ID, next[0].Gen); c.Outcome != ClaimEarly || c.Wait != 5*ms {
		t.Fatalf("claim at the planned slot: %+v, want early by the 5ms the first was late", c)
	}
	e.clock.Advance(5 * ms)
	if c := e.claim(next[0].ID, next[0].Gen); c.Outcome != ClaimOK {
		t.Fatalf("claim 5ms after the planned slot: %+v", c)
	}
	e.requireConsistent()

	// Two released at s and s + T; the second goes out on time, then the
	// first arrives late: it waits until T after the second.
	e.clock.Advance(time.Second)
	e.enqueue("acme", item(`{"2":1}`), item(`{"3":1}`))
	two := e.passTenant("acme", time.Second, -1)
	if len(two) != 2 || !two[1].Slot.Equal(two[0].Slot.Add(100*ms)) {
		t.Fatalf("released %+v, want two slots T apart", two)
	}
	e.clock.Set(two[1].Slot)
	if c := e.claim(two[1].ID, two[1].Gen); c.Outcome != ClaimOK {
		t.Fatalf("on-time claim of the second: %+v", c)
	}
	e.clock.Advance(5 * ms)
	c := e.claim(two[0].ID, two[0].Gen)
	if c.Outcome != ClaimEarly || c.Wait != 95*ms {
		t.Fatalf("late claim after a later send: %+v, want early with wait T − 5ms = 95ms", c)
	}
	if j := e.job(two[0].ID); j.State != StateReleased || j.Gen != two[0].Gen || j.Attempt != 0 {
		t.Fatalf("record after the early reply %+v: want unchanged", j)
	}
	e.clock.Advance(c.Wait)
	if c := e.claim(two[0].ID, two[0].Gen); c.Outcome != ClaimOK {
		t.Fatalf("claim after the wait: %+v", c)
	}
	e.requireConsistent()
}

// A claim up to ε early is answered at once with the instant to send at —
// the target: the slot, or later by the lateness the send schedule
// carries, less the ε/4 a late schedule catches up per job — not the
// claim's now, and the schedule records that instant: behind a late job
// every later one is told when to send, whenever within ε its claim
// arrived, and the lateness shrinks by ε/4 a job until it is gone.
func TestClaimEarlyWithinToleranceSendsAtTheTarget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)                       // 10/s, burst 1: T = 100ms; ε = 2ms
	rel := e.released("acme", 10)        // D = 1s
	e.clock.Set(rel[0].Slot.Add(4 * ms)) // the first goes out 4ms late
	if c := e.claim(rel[0].ID, rel[0].Gen); c.Outcome != ClaimOK || !c.Job.SendAt.Equal(rel[0].Slot.Add(4*ms)) {
		t.Fatalf("late claim: %+v, want claimed, sent at now", c)
	}
	late := 4 * ms
	for i, r := range rel[1:] {
		target := r.Slot.Add(late) // its planned distance from the last one sent
		e.clock.Set(target.Add(-1500 * time.Microsecond))
		c := e.claim(r.ID, r.Gen)
		late = max(late-500*time.Microsecond, 0) // ε/4 caught up, never before the slot
		if c.Outcome != ClaimOK || !c.Job.Slot.Equal(r.Slot) || !c.Job.SendAt.Equal(r.Slot.Add(late)) {
			t.Fatalf("job %d claimed 1.5ms before its target +%s: %+v, want claimed with send at +%s",
				i+1, target.Sub(r.Slot), c, late)
		}
		lease := e.rdb.ZScore(e.ctx, e.store.keys.leases(e.store.keys.shardOf("acme")), r.ID).Val()
		if want := c.Job.SendAt.Add(c.Job.Timeout + time.Second).UnixMicro(); int64(lease) != want {
			t.Fatalf("job %d: lease %d, want send + timeout + grace = %d", i+1, int64(lease), want)
		}
	}
	if late != 0 {
		t.Fatalf("lateness %s after 9 jobs, want caught up", late)
	}
	e.requireConsistent()
}

// The catch-up step is ε/4 but at most 0.5 ms: with ε = 6 ms a late
// schedule still regains 0.5 ms a job, not 1.5 ms — a wider tolerance lets
// claims go out earlier, it does not bunch a late tenant's sends (at 1.5 ms
// a tenant at 500/s would send at four times its rate while catching up).
func TestClaimCatchUpStepIsCapped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)                // 10/s, burst 1: T = 100ms
	rel := e.released("acme", 10) // D = 1s
	const eps = 6 * ms
	claim := func(r wire.Release) Claim { return e.claimWithin(r.ID, r.Gen, eps) }
	e.clock.Set(rel[0].Slot.Add(3 * ms)) // the first goes out 3ms late
	if c := claim(rel[0]); c.Outcome != ClaimOK || !c.Job.SendAt.Equal(rel[0].Slot.Add(3*ms)) {
		t.Fatalf("late claim: %+v, want claimed, sent at now", c)
	}
	late := 3 * ms
	for i, r := range rel[1:7] {
		e.clock.Set(r.Slot.Add(late).Add(-5 * ms)) // within ε of its target
		c := claim(r)
		late -= 500 * time.Microsecond
		if c.Outcome != ClaimOK || !c.Job.SendAt.Equal(r.Slot.Add(late)) {
			t.Fatalf("job %d claimed 5ms before its target: %+v, want send at slot +%s (0.5ms caught up)", i+1, c, late)
		}
	}
	if late != 0 {
		t.Fatalf("lateness %s after 6 jobs, want caught up", late)
	}
	e.requireConsistent()
}
