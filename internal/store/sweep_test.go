package store

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

// sweep runs a pass that releases nothing: promotion and the lease sweep only.
func (e *env) sweep(tenant string) PassResult {
	e.t.Helper()
	return e.pass(e.store.keys.shardOf(tenant), PassConfig{Grace: time.Second, Capacity: 0})
}

// A released job whose lease expired (the hand-off to asynq was lost)
// returns to the head lane with gen + 1 and no attempt used; its old task is
// stale at the claim.
func TestSweepReleased(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rs := e.enqueue("acme", item(`1`), item(`2`))
	if rel, ok := e.pop("acme", 0); !ok || rel.ID != rs[0].ID {
		t.Fatalf("pop: %+v", rel)
	}
	first := e.job(rs[0].ID)
	e.clock.Set(first.Slot.Add(time.Second - time.Microsecond))
	if res := e.sweep("acme"); res.Swept != 0 {
		t.Fatalf("swept %d before slot + grace", res.Swept)
	}
	e.clock.Advance(time.Microsecond)
	if res := e.sweep("acme"); res.Swept != 1 {
		t.Fatalf("swept %d at slot + grace, want 1", res.Swept)
	}
	j := e.job(rs[0].ID)
	head := e.rdb.ZRange(e.ctx, e.store.keys.tenantHead("acme"), 0, -1).Val()
	if j.State != StateQueued || j.Gen != first.Gen+1 || j.Attempt != 0 || len(head) != 1 || head[0] != rs[0].ID {
		t.Fatalf("swept job %+v, head lane %v", j, head)
	}
	if c := e.claim(rs[0].ID, first.Gen); c.Outcome != ClaimStale {
		t.Fatalf("claim of the lost task: %+v, want stale", c)
	}
	e.requireConsistent()
}

// A running job past claim + timeout + grace (the worker crashed) is retried
// with its attempt used, or dead when none is left; its late finish is stale.
func TestSweepRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.TimeoutUS, p.MaxAttempts, p.MinBackoffUS = 2_000_000, 2, 1_000_000 }))
	id := e.enqueueOne("acme", item(`{}`)).ID
	c := e.attempt(id)
	e.clock.Advance(3*time.Second - time.Microsecond)
	if res := e.sweep("acme"); res.Swept != 0 {
		t.Fatalf("swept %d before claim + timeout + grace", res.Swept)
	}
	e.clock.Advance(time.Microsecond)
	if res := e.sweep("acme"); res.Swept != 1 {
		t.Fatalf("swept %d, want 1", res.Swept)
	}
	j := e.job(id)
	wait := j.Due.Sub(e.clock.Now())
	if j.State != StateRetrying || j.Attempt != 1 || j.Gen != c.Gen+1 || wait < 900*ms || wait > 1100*ms ||
		len(j.Attempts) != 1 || j.Attempts[0].Outcome != "lease_expired" {
		t.Fatalf("swept running job %+v (due in %s)", j, wait)
	}
	st, err := e.store.Finish(e.ctx, id, c.Gen, wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200}, FinishConfig{})
	if !errors.Is(err, ErrStale) || st != StateRetrying {
		t.Fatalf("late finish: %s, %v; want retrying and ErrStale", st, err)
	}
	if j := e.job(id); len(j.Attempts) != 2 || !j.Attempts[1].Stale || j.Attempts[1].Gen != c.Gen {
		t.Fatalf("log %+v, want the stale finish appended", j.Attempts)
	}
	e.requireConsistent()

	// The second and last attempt is lost too: dead.
	c = e.attempt(id)
	e.clock.Advance(3 * time.Second)
	e.sweep("acme")
	if j := e.job(id); j.State != StateDead || j.Attempt != 2 {
		t.Fatalf("after the last attempt's lease: %+v, want dead", j)
	}
	if st := e.state("acme"); st.DeadLetters != 1 || st.Running != 0 {
		t.Fatalf("state %+v", st)
	}
	e.requireConsistent()
}
