package store

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/wire"
)

// newOrphanEnv is an env whose tenants run at 1000/s (burst 4) and with
// upstreams names at 50/s each (burst 1).
func newOrphanEnv(t *testing.T, names ...string) *env {
	t.Helper()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst = 1000, 4 }))
	for _, n := range names {
		e.putUpstream(n, 20*time.Millisecond, 1)
	}
	return e
}

// orphanPass is upPass for a shard whose demand names an upstream that no
// longer exists, as the dispatcher runs it: one pass, the coordinators'
// calls, and for each upstream they answered does not exist one
// DeadLetterUnknownUpstream call with the pass's now as the cutoff. It
// returns the pass, the upstreams answered missing, and the jobs
// dead-lettered (e.grants: the grants for the next pass).
func (e *env) orphanPass(shard int, limit int) (PassResult, []string, int, bool) {
	e.t.Helper()
	res, err := e.store.PassGranted(e.ctx, shard, PassConfig{Lead: grantLead, MinLead: -1,
		Grace: time.Hour, Capacity: -1}, nil)
	if err != nil {
		e.t.Fatalf("pass on shard %d: %v", shard, err)
	}
	if len(res.Demand) == 0 && len(res.Aligned) == 0 {
		return res, nil, 0, false
	}
	e.grants, err = e.store.AlignUpstreams(e.ctx, shard, res.Demand, res.Aligned, quota.Calendars{}, quota.GrantConfig{Horizon: grantLead})
	missing := quota.MissingUpstreams(err)
	if err != nil && !errors.Is(err, quota.ErrUpstreamNotFound) {
		e.t.Fatalf("grant upstreams for shard %d: %v", shard, err)
	}
	n, more := 0, false
	for _, name := range missing {
		k, m, err := e.store.DeadLetterUnknownUpstream(e.ctx, shard, name, OrphanConfig{Before: res.Now, Limit: limit})
		if err != nil {
			e.t.Fatalf("dead-letter jobs naming %q: %v", name, err)
		}
		n, more = n+k, more || m
	}
	return res, missing, n, more
}

// releaseAfterGrant runs passes (each handing the last one's grants on,
// the first e.grants, at once as the dispatcher does) until job id is
// released, at most 10.
func (e *env) releaseAfterGrant(shard int, id string) bool {
	e.t.Helper()
	grants := e.grants
	for range 10 {
		var res PassResult
		res, grants = e.upPass(shard, grants)
		if slices.ContainsFunc(res.Released, func(r wire.Release) bool { return r.ID == id }) {
			return true
		}
	}
	return false
}

// A job delayed (run_at) when its upstream was deleted: DELETE does not see
// it (204), and once it comes due the first pass's coordinator call answers
// that the upstream does not exist, so the job becomes a dead letter of
// reason unknown_upstream with no attempt used — the jobs naming another
// upstream and the plain ones untouched. The shard then asks about the
// upstream no more. Created again and replayed, the job is released.
func TestUnknownUpstreamJobIsDeadLettered(t *testing.T) {
	t.Parallel()
	e := newOrphanEnv(t, "sms", "mail")
	delayed := upItem(`{"n":1}`, "sms")
	delayed.RunAt = e.clock.Now().Add(time.Minute)
	orphan := e.enqueueOne("acme", delayed).ID
	if err := e.store.DeleteUpstream(e.ctx, "sms", ""); err != nil {
		t.Fatalf("delete sms with only a delayed job naming it: %v, want done", err)
	}
	e.clock.Advance(time.Minute)
	mail := e.enqueueOne("acme", upItem(`{"n":2}`, "mail")).ID
	shard := e.store.keys.shardOf("acme")

	res, missing, n, more := e.orphanPass(shard, 0)
	if res.Promoted != 1 || !slices.Equal(missing, []string{"sms"}) || n != 1 || more {
		t.Fatalf("first pass after the due time: promoted %d, missing %v, dead-lettered %d (more %v); want 1, [sms], 1, false",
			res.Promoted, missing, n, more)
	}
	j := e.job(orphan)
	if j.State != StateDead || j.DeadReason != DeadReasonUnknownUpstream || j.Attempt != 0 || j.Ended.IsZero() {
		t.Fatalf("job naming the deleted upstream: state %s reason %q attempt %d ended %v; want dead, unknown_upstream, 0, set",
			j.State, j.DeadReason, j.Attempt, j.Ended)
	}
	if st := e.state("acme"); st.DeadLetters != 1 || st.Queued != 1 || st.QueuedCost != 1 {
		t.Fatalf("tenant after: %d dead letters, %d queued (cost %d); want 1, 1 (the job naming mail), 1",
			st.DeadLetters, st.Queued, st.QueuedCost)
	}
	dead, _, err := e.store.DeadLetters(e.ctx, "acme", "", 10)
	if err != nil || len(dead) != 1 || dead[0].ID != orphan || dead[0].DeadReason != DeadReasonUnknownUpstream {
		t.Fatalf("dead letters %+v, %v; want the orphan with its reason", dead, err)
	}
	if !e.releaseAfterGrant(shard, mail) {
		t.Fatal("the job naming mail was not released")
	}
	res, missing, _, _ = e.orphanPass(shard, 0)
	if len(missing) != 0 || slices.ContainsFunc(res.Demand, func(d quota.UpstreamDemand) bool { return d.Upstream == "sms" }) {
		t.Fatalf("a pass after: demand %+v, missing %v; want nothing asked of sms", res.Demand, missing)
	}
	if n, err := e.rdb.Exists(e.ctx, e.store.keys.base(shard)+"uw:sms").Result(); err != nil || n != 0 {
		t.Fatalf("sms's waiting set: exists %d, %v; want gone", n, err)
	}

	e.putUpstream("sms", 20*time.Millisecond, 1)
	if _, err := e.store.Replay(e.ctx, orphan); err != nil {
		t.Fatal(err)
	}
	if j := e.job(orphan); j.State != StateQueued || j.DeadReason != "" {
		t.Fatalf("replayed: state %s reason %q, want queued and no reason", j.State, j.DeadReason)
	}
	if !e.releaseAfterGrant(shard, orphan) {
		t.Fatal("the replayed job was not released once sms existed again")
	}
	if j := e.job(orphan); j.State != StateReleased {
		t.Fatalf("replayed job: %s, want released", j.State)
	}
}

// A job naming two upstreams, one of them deleted while it was delayed,
// dies as unknown_upstream through the aligned path (the probe's answer);
// a job naming only the other one keeps waiting and leaves. Replayed once
// the upstream exists again, it leaves through an aligned grant.
func TestUnknownUpstreamMultiUpstreamJob(t *testing.T) {
	t.Parallel()
	e := newOrphanEnv(t, "u1", "u2")
	delayed := upItem(`{}`, "u1", "u2")
	delayed.Delay = time.Minute
	orphan := e.enqueueOne("acme", delayed).ID
	if err := e.store.DeleteUpstream(e.ctx, "u2", ""); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute)
	single := e.enqueueOne("acme", upItem(`{}`, "u1")).ID
	shard := e.store.keys.shardOf("acme")

	res, missing, n, _ := e.orphanPass(shard, 0)
	if len(res.Aligned) != 1 || !slices.Equal(missing, []string{"u2"}) || n != 1 {
		t.Fatalf("pass: aligned %+v, missing %v, dead-lettered %d; want the set, [u2], 1", res.Aligned, missing, n)
	}
	if j := e.job(orphan); j.State != StateDead || j.DeadReason != DeadReasonUnknownUpstream || j.Attempt != 0 {
		t.Fatalf("job naming u1,u2: state %s reason %q attempt %d; want dead, unknown_upstream, 0", j.State, j.DeadReason, j.Attempt)
	}
	if j := e.job(single); j.State != StateQueued && j.State != StateReleased {
		t.Fatalf("job naming u1 only: %s, want still live", j.State)
	}
	if !e.releaseAfterGrant(shard, single) && e.job(single).State != StateReleased {
		t.Fatal("the job naming u1 only was not released")
	}
	e.putUpstream("u2", 20*time.Millisecond, 1)
	if _, err := e.store.Replay(e.ctx, orphan); err != nil {
		t.Fatal(err)
	}
	if !e.releaseAfterGrant(shard, orphan) {
		t.Fatal("the replayed job naming u1,u2 was not released")
	}
}

// One call dead-letters at most its limit and says more while jobs are
// left; jobs created after the cutoff (enqueued after the coordinator was
// asked: the upstream may exist again) are left alone, and the tenant stays
// in the upstream's waiting set for them.
func TestUnknownUpstreamDeadLetteringIsBounded(t *testing.T) {
	t.Parallel()
	e := newOrphanEnv(t, "sms")
	items := make([]Item, 25)
	for i := range items {
		items[i] = upItem(`{}`, "sms")
		items[i].Delay = time.Minute
	}
	e.enqueue("acme", items...)
	if err := e.store.DeleteUpstream(e.ctx, "sms", ""); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute)
	shard := e.store.keys.shardOf("acme")
	res, missing, n, more := e.orphanPass(shard, 10)
	if res.Promoted != 25 || !slices.Equal(missing, []string{"sms"}) || n != 10 || !more {
		t.Fatalf("first round: promoted %d, missing %v, %d dead (more %v); want 25, [sms], 10, true", res.Promoted, missing, n, more)
	}
	cutoff := e.clock.Now()
	e.clock.Advance(time.Millisecond)
	e.putUpstream("sms", 20*time.Millisecond, 1) // created again, and a job enqueued: not an orphan
	fresh := e.enqueueOne("acme", upItem(`{}`, "sms")).ID
	for _, want := range []struct {
		n    int
		more bool
	}{{10, true}, {5, false}} {
		n, more, err := e.store.DeadLetterUnknownUpstream(e.ctx, shard, "sms", OrphanConfig{Before: cutoff, Limit: 10})
		if err != nil || n != want.n || more != want.more {
			t.Fatalf("call: %d dead (more %v), %v; want %d (more %v)", n, more, err, want.n, want.more)
		}
	}
	if st := e.state("acme"); st.DeadLetters != 25 || st.Queued != 1 {
		t.Fatalf("tenant: %d dead letters, %d queued; want 25, 1 (the job enqueued after the cutoff)", st.DeadLetters, st.Queued)
	}
	if j := e.job(fresh); j.State != StateQueued {
		t.Fatalf("job enqueued after the cutoff: %s, want queued", j.State)
	}
	if ok, err := e.rdb.ZScore(e.ctx, e.store.keys.base(shard)+"uw:sms", "acme").Result(); err != nil || ok == 0 {
		t.Fatalf("acme left sms's waiting set (%v, %v) though a job still waits", ok, err)
	}
	// Bad input: refused, nothing changes.
	for _, cfg := range []OrphanConfig{{}, {Before: cutoff, Limit: 1001}, {Before: cutoff, DeadRetention: -1}} {
		if _, _, err := e.store.DeadLetterUnknownUpstream(e.ctx, shard, "sms", cfg); !errors.Is(err, ErrInvalid) {
			t.Fatalf("config %+v: %v, want ErrInvalid", cfg, err)
		}
	}
	if _, _, err := e.store.DeadLetterUnknownUpstream(e.ctx, 9, "sms", OrphanConfig{Before: cutoff}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("shard 9 of 4: %v, want ErrInvalid", err)
	}
	if _, _, err := e.store.DeadLetterUnknownUpstream(e.ctx, shard, "a b", OrphanConfig{Before: cutoff}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a bad name: %v, want ErrInvalid", err)
	}
}
