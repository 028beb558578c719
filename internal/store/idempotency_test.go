package store

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

// TestUnlessRefusesNewJobsButReplays: an item carrying Unless is refused
// with its code and stores nothing — not even its idempotency key — unless
// its key replays an earlier request, which answers as it always does.
func TestUnlessRefusesNewJobsButReplays(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	unless := &Refusal{Code: "no_task_worker", Detail: "queue default has no live worker"}
	with := func(it Item) Item { it.Unless = unless; return it }

	first := e.enqueueOne("acme", idemItem("order-1", `{"a":1}`))
	tokens := e.state("acme").AdmitTokens
	rs := e.enqueue("acme",
		with(idemItem("order-1", `{"a":1}`)), // a replay: the original answer
		with(idemItem("order-1", `{"a":2}`)), // the key with another body
		with(idemItem("order-2", `{"a":3}`)), // a new job: refused
		with(item(`{"a":4}`)))                // no key: refused
	if got := outcomes(rs); got != "DRRR" || rs[0].ID != first.ID || rs[1].Code != CodeIdempotencyMismatch {
		t.Fatalf("outcomes %s: %+v", got, rs)
	}
	for _, r := range rs[2:] {
		if r.Code != unless.Code || r.Detail != unless.Detail || r.RetryAfter != 0 || r.ID != "" {
			t.Fatalf("refused item: %+v, want %+v", r, *unless)
		}
	}
	if st := e.state("acme"); st.Backlog != 1 || st.AdmitTokens != tokens {
		t.Fatalf("state after refusals: backlog %d, tokens %d; want 1, %d (nothing stored or charged)", st.Backlog, st.AdmitTokens, tokens)
	}
	// order-2's key was not kept: once the job may be stored, it is new.
	if r := e.enqueue("acme", idemItem("order-2", `{"a":3}`))[0]; r.Outcome != Accepted {
		t.Fatalf("order-2 without Unless: %+v, want accepted", r)
	}
	bad := item(`{}`)
	bad.Unless = &Refusal{}
	if _, err := e.store.Enqueue(e.ctx, "acme", []Item{bad}); err == nil {
		t.Fatal("an Unless without a code was accepted")
	}
	e.requireConsistent()
}
