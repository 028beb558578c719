package worker_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
)

// A backlog of due jobs with the pass's pre-claim on: every job reaches the
// receiver exactly once and signed as a claimed one would, without a single
// claim call (claims outcome "preclaimed", none "ok" or "early"), and
// finishes as succeeded.
func TestPreclaimedJobsNeedNoClaim(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2)
	h.policy("acme", store.Overrides{RateUS: ptr(1_000), Burst: ptr(40), Concurrency: ptr(40)})
	h.startWorker(40, nil) // its heartbeat opens the dispatcher's gate
	ids := h.enqueue("acme", 30)
	h.startDispatcher(func(c *dispatch.Config) { c.Pass.Preclaim = 2 * time.Millisecond })

	got := h.recv.waitFor(t, "acme", 30, 10*time.Second)
	exactlyOnce(t, got, ids)
	h.noStall(t)
	if n := h.counter("sluice_worker_claims_total", "outcome=preclaimed"); n != 30 {
		t.Errorf("%v jobs pre-claimed, want 30 (%s)", n, h.metrics("sluice_worker_claims"))
	}
	for _, o := range []string{"ok", "early", "stale", "returned"} {
		if n := h.counter("sluice_worker_claims_total", "outcome="+o); n != 0 {
			t.Errorf("%v claims %s, want none", n, o)
		}
	}
	for _, id := range ids {
		redistest.Poll(t, 10*time.Second, "job succeeded", func() bool { return h.jobOf(id).State == store.StateSucceeded })
	}
}

// A live worker of an earlier version (its heartbeat under its plain id)
// keeps the dispatcher from pre-claiming: every job is claimed.
func TestPreclaimGateClosedByAnOldWorker(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2)
	h.policy("acme", store.Overrides{RateUS: ptr(1_000), Burst: ptr(40), Concurrency: ptr(40)})
	h.startWorker(40, nil)
	old := time.Now().Add(time.Hour).UnixMicro() // far past the test on any clock
	if err := h.rdb.HSet(h.ctx, h.st.WorkersKey(), "old", "0 "+strconv.FormatInt(old, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	ids := h.enqueue("acme", 10)
	h.startDispatcher(func(c *dispatch.Config) { c.Pass.Preclaim = 2 * time.Millisecond })

	got := h.recv.waitFor(t, "acme", 10, 10*time.Second)
	exactlyOnce(t, got, ids)
	if n := h.counter("sluice_worker_claims_total", "outcome=preclaimed"); n != 0 {
		t.Errorf("%v jobs pre-claimed beside an old worker, want none", n)
	}
	if n := h.counter("sluice_worker_claims_total", "outcome=ok"); n != 10 {
		t.Errorf("%v claims ok, want 10", n)
	}
}
