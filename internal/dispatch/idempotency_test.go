package dispatch

import (
	"sync"
	"testing"
	"time"
)

func TestIdempotencyReplaysTheOriginal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.enqueueOne("acme", idemItem("order-1", `{"a":1}`))

	e.clock.Advance(time.Second)
	again := e.enqueue("acme", idemItem("order-1", `{"a":1}`))[0]
	if again.Outcome != Duplicate || again.ID != first.ID || again.State != StateQueued || !again.ETA.Equal(first.ETA) {
		t.Fatalf("replay: %+v, want the original %+v", again, first)
	}
	other := e.enqueue("acme", idemItem("order-1", `{"a":2}`))[0]
	if other.Outcome != Refused || other.Code != CodeIdempotencyMismatch || other.ID != "" {
		t.Fatalf("same key, other body: %+v, want idempotency_mismatch", other)
	}
	// The key is per tenant.
	if r := e.enqueue("globex", idemItem("order-1", `{"a":2}`))[0]; r.Outcome != Accepted {
		t.Fatalf("another tenant's key: %+v", r)
	}
	// Within one batch, a later item sees an earlier one.
	rs := e.enqueue("acme", idemItem("k2", `{"b":1}`), idemItem("k2", `{"b":1}`), idemItem("k2", `{"b":2}`))
	if got := outcomes(rs); got != "ADR" || rs[1].ID != rs[0].ID || rs[2].Code != CodeIdempotencyMismatch {
		t.Fatalf("batch: %s %+v", got, rs)
	}
	// Full again after the second (1000 tokens), then one accepted item.
	if st := e.state("acme"); st.Backlog != 2 || st.AdmitTokens != 999 {
		t.Fatalf("duplicates and mismatches must charge nothing: %+v", st)
	}
	e.requireConsistent()
}

func TestIdempotencyRefusedItemStoresNoKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.AdmitBurst, p.AdmitUS = 1, 1_000_000 }))
	e.enqueueOne("acme", item(`{}`))
	r := e.enqueue("acme", idemItem("k", `{"x":1}`))[0]
	if r.Code != CodeRateLimited {
		t.Fatalf("got %+v, want rate_limited", r)
	}
	if n, err := e.rdb.Exists(e.ctx, e.store.keys.idem("acme", "k")).Result(); err != nil || n != 0 {
		t.Fatalf("a refused item stored its idempotency key (%d, %v)", n, err)
	}
	e.clock.Advance(r.RetryAfter)
	// A different body is not a mismatch: nothing was stored under the key.
	if r := e.enqueue("acme", idemItem("k", `{"x":2}`))[0]; r.Outcome != Accepted {
		t.Fatalf("after the retry-after: %+v", r)
	}
	e.requireConsistent()
}

func TestIdempotencyKeyFollowsTheJobToItsEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.enqueueOne("acme", idemItem("k", `{}`))
	key := e.store.keys.idem("acme", "k")
	if ttl := e.rdb.PTTL(e.ctx, key).Val(); ttl != -1 {
		t.Fatalf("live job's idempotency key has TTL %s, want none", ttl)
	}
	if _, _, err := e.store.Cancel(e.ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	if ttl := e.rdb.PTTL(e.ctx, key).Val(); ttl <= CanceledRetentionDefault-time.Minute || ttl > CanceledRetentionDefault {
		t.Fatalf("idempotency key TTL %s, want the retention %s", ttl, CanceledRetentionDefault)
	}
	d := e.enqueue("acme", idemItem("k", `{}`))[0]
	if d.Outcome != Duplicate || d.ID != r.ID || d.State != StateCanceled {
		t.Fatalf("replay after cancel: %+v, want the canceled original", d)
	}
	e.requireConsistent()
}

func TestIdempotencyUnderConcurrency(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 50
	results := make([]Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			rs, err := e.store.Enqueue(e.ctx, "acme", []Item{idemItem("once", `{"pay":42}`)})
			errs[i] = err
			if err == nil {
				results[i] = rs[0]
			}
		})
	}
	wg.Wait()
	accepted := 0
	for i, r := range results {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if r.Outcome == Accepted {
			accepted++
		}
		if r.ID != results[0].ID {
			t.Fatalf("caller %d got job %s, caller 0 got %s", i, r.ID, results[0].ID)
		}
	}
	if accepted != 1 {
		t.Fatalf("%d callers created a job, want exactly 1", accepted)
	}
	if st := e.state("acme"); st.Backlog != 1 || st.Queued != 1 {
		t.Fatalf("state %+v: want one job", st)
	}
	e.requireConsistent()
}
