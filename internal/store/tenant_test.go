package store

import (
	"fmt"
	"testing"
	"time"
)

// The tenant hash expires only when idle, and not before its admission
// bucket would be full again (expiry must not hand out free tokens).
func TestTenantHashExpiresOnlyWhenIdle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.AdmitBurst, p.AdmitUS = 10, 1_000_000 }))
	rs := e.enqueue("acme", item(`1`), item(`2`), item(`3`))
	key := e.store.keys.tenant("acme")
	if ttl := e.rdb.PTTL(e.ctx, key).Val(); ttl != -1 {
		t.Fatalf("tenant with jobs has TTL %s", ttl)
	}
	for _, r := range rs {
		e.cancel(r.ID)
	}
	if ttl := e.rdb.PTTL(e.ctx, key).Val(); ttl < 3*time.Second {
		t.Fatalf("idle tenant TTL %s, want ≥ 3s (3 tokens to refill at 1/s)", ttl)
	}
	e.enqueueOne("acme", item(`4`))
	if ttl := e.rdb.PTTL(e.ctx, key).Val(); ttl != -1 {
		t.Fatalf("busy again, TTL %s, want none", ttl)
	}
	e.requireConsistent()
}

// Pop skips a tombstone left in the backlog (the dispatcher may cancel
// without LREM later) and drops it from the list.
func TestPopSkipsTombstones(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rs := e.enqueue("acme", item(`1`), item(`2`))
	key, _ := e.store.keys.job(rs[0].ID)
	e.rdb.HSet(e.ctx, key, "state", "canceled")
	e.rdb.PExpire(e.ctx, key, time.Hour)
	for field, by := range map[string]int64{"live": -1, "bytes": -1, "qtok": -1} {
		e.addTenantField("acme", field, by)
	}
	rel, ok := e.pop("acme", 0)
	if !ok || rel.ID != rs[1].ID || rel.Gen != 1 {
		t.Fatalf("pop: %+v %v, want %s at gen 1", rel, ok, rs[1].ID)
	}
	if j := e.job(rs[1].ID); j.State != StateReleased || !j.Slot.Equal(epoch) {
		t.Fatalf("released record: %+v", j)
	}
	e.requireConsistent()
}

func TestPopHonoursConcurrencyAndRate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Concurrency = 10_000, 1, 2 }))
	e.enqueue("acme", item(`1`), item(`2`), item(`3`))
	if _, ok := e.pop("acme", 0); !ok {
		t.Fatal("first pop: nothing due")
	}
	if _, ok := e.pop("acme", 9999*time.Microsecond); ok {
		t.Fatal("second pop before its slot")
	}
	if st := e.state("acme"); !st.NextAt.Equal(epoch.Add(10 * time.Millisecond)) {
		t.Fatalf("ready score %s, want the next slot +10ms", st.NextAt.Sub(epoch))
	}
	if _, ok := e.pop("acme", 10*time.Millisecond); !ok {
		t.Fatal("second pop at its slot: nothing due")
	}
	if st := e.state("acme"); !st.NextAt.IsZero() || st.Queued != 1 {
		t.Fatalf("at the concurrency cap the tenant must leave ready: %+v", st)
	}
	if _, ok := e.pop("acme", time.Hour); ok {
		t.Fatal("popped past the concurrency cap")
	}
	e.requireConsistent()
}

func TestFullBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	batch := make([]Item, MaxBatch)
	for i := range batch {
		batch[i] = idemItem(fmt.Sprint("k", i), fmt.Sprintf(`{"i":%d}`, i))
	}
	rs := e.enqueue("acme", batch...)
	if st := e.state("acme"); st.Backlog != MaxBatch || len(rs) != MaxBatch || rs[MaxBatch-1].Outcome != Accepted {
		t.Fatalf("state %+v after %d results", st, len(rs))
	}
	e.requireConsistent()
}
