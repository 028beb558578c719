package worker_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/internal/worker"
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

// A pre-claimed job fetched after its send time + grace/2 is dropped unsent
// like a lapsed release (its attempt could not finish grace/2 before its
// lease ends): nothing is sent, no claim is made, the record stays running
// for the sweep, which returns it as a lost release.
func TestLatePreclaimedJobIsDropped(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	const grace = 400 * time.Millisecond
	exec := &sentExecutor{}
	w := h.newWorker(exec, func(c *worker.Config) { c.Settings.Grace = grace })
	h.policy("t1", store.Overrides{Burst: ptr(3)})
	h.enqueue("t1", 3)
	res, err := h.st.Pass(h.ctx, 0, store.PassConfig{Capacity: -1, Grace: grace, Preclaim: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b := wire.Batch{}
	for _, r := range res.Released {
		if r.Claimed == nil {
			t.Fatalf("release %+v not pre-claimed", r)
		}
		b.Jobs = append(b.Jobs, wire.Payload{ID: r.ID, Gen: r.Gen, SlotUS: r.SendAt.UnixMicro(), Claimed: r.Claimed})
	}
	if len(b.Jobs) != 3 {
		t.Fatalf("released %d jobs, want 3", len(b.Jobs))
	}
	late := res.Released[len(res.Released)-1].SendAt.Add(grace / 2)
	redistest.Poll(t, 10*time.Second, "send + grace/2 to pass", func() bool { return h.clock.Now().After(late) })

	h.process(w, asynq.NewTask(wire.TaskTypeBatch, wire.EncodeBatch(b)))
	if got := exec.sent(); len(got) != 0 {
		t.Fatalf("a late pre-claimed batch sent %v", got)
	}
	if n := h.counter("sluice_worker_claims_total", "outcome=lapsed"); n != 3 {
		t.Fatalf("%v dropped as lapsed, want 3", n)
	}
	for _, o := range []string{"ok", "stale", "preclaimed"} {
		if n := h.counter("sluice_worker_claims_total", "outcome="+o); n != 0 {
			t.Fatalf("%v claims %s, want none", n, o)
		}
	}
	for _, r := range res.Released {
		if j := h.jobOf(r.ID); j.State != store.StateRunning || j.Gen != r.Gen || j.Attempt != 1 {
			t.Fatalf("job %s: %s gen %d attempt %d; want running, left for the sweep", r.ID, j.State, j.Gen, j.Attempt)
		}
	}
}
