package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/internal/worker"
)

// TestLapsedBatchIsDroppedWithoutAClaim: a batch fetched after its jobs'
// send time + grace (their leases have run out) is dropped job by job
// without a claim — no Redis call, no attempt, the records left as they
// are for the sweep — and the sweep's new releases deliver each job once.
func TestLapsedBatchIsDroppedWithoutAClaim(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	const grace = 500 * time.Millisecond
	exec := &sentExecutor{}
	w := h.newWorker(exec, func(c *worker.Config) { c.Settings.Grace = grace })
	h.policy("t1", store.Overrides{RateUS: ptr(20_000), Burst: ptr(1)})
	h.enqueue("t1", 5)
	rel := h.passOf(0, 200*time.Millisecond, grace).Released
	if len(rel) != 5 {
		t.Fatalf("released %d jobs, want 5 (T = 20ms, D = 200ms)", len(rel))
	}
	lastLease := rel[len(rel)-1].SendAt.Add(grace)
	redistest.Poll(t, 10*time.Second, "every lease to run out", func() bool { return h.clock.Now().After(lastLease) })

	h.process(w, batchOf(t, rel...)) // fetched late: a starved worker
	if got := exec.sent(); len(got) != 0 {
		t.Fatalf("a lapsed batch sent %v", got)
	}
	if n := h.counter("sluice_worker_claims_total", "outcome=lapsed"); n != 5 {
		t.Fatalf("%v releases dropped as lapsed, want 5", n)
	}
	for _, outcome := range []string{"ok", "stale", "early", "error"} {
		if n := h.counter("sluice_worker_claims_total", "outcome="+outcome); n != 0 {
			t.Fatalf("%v claims %s: a lapsed release must not be claimed", n, outcome)
		}
	}
	for _, r := range rel {
		if j := h.jobOf(r.ID); j.State != store.StateReleased || j.Gen != r.Gen || j.Attempt != 0 {
			t.Fatalf("job %s: %s gen %d, %d attempts; want released gen %d unclaimed (for the sweep)", r.ID, j.State, j.Gen, j.Attempt, r.Gen)
		}
	}

	h.process(w, batchOf(t, h.sweepUntil(0, 200*time.Millisecond, idsOf(rel))...))
	exec.requireEachOnce(t, rel)
}

// TestStarvedWorkerResumesAtOnce simulates a worker starved of CPU: it
// announces its capacity but fetches nothing while the dispatcher's
// releases lapse (send time + grace) and are swept and released again. The
// stale copies stay bounded — the budget counts the batch tasks waiting in
// the hand-off queues, so the dispatcher stops releasing once they fill the
// capacity, and releases nothing more however long the worker stalls —
// and when the worker fetches everything at once it drops the stale copies
// without claiming them, the releases resume, and every job is delivered
// exactly once.
func TestStarvedWorkerResumesAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2)
	const (
		capacity = 6
		grace    = 300 * time.Millisecond
	)
	var ids []string
	for _, tenant := range []string{"a", "b", "c"} {
		h.policy(tenant, store.Overrides{RateUS: ptr(10_000), Burst: ptr(2), Concurrency: ptr(20)})
		ids = append(ids, h.enqueue(tenant, 12)...)
	}
	if err := h.st.Heartbeat(h.ctx, "starved", capacity, time.Minute); err != nil {
		t.Fatal(err)
	}
	// MaxSleep = grace: a dispatcher whose workers are full sweeps at its
	// safety-net pass; a short one keeps the stall's rounds short.
	h.startDispatcher(func(c *dispatch.Config) { c.Pass.Grace, c.MaxSleep = grace, grace })

	// The stall: every release lapses; the stale copies pile up in asynq
	// until they fill the capacity, then the dispatcher holds back.
	// The queue is read before the leases: a release made between the two
	// readings still holds its lease at the second (its grace is 300 ms),
	// while read the other way round it could be missed by the first
	// (lease not yet written) and counted by the second (task queued).
	held := func() (bool, string) {
		waiting := h.handoffWaiting()
		leases := h.leases()
		return leases == 0 && waiting >= capacity, fmt.Sprintf("%d leases, %d batch tasks waiting", leases, waiting)
	}
	redistest.PollMsg(t, 30*time.Second, held)
	// A release would hold a lease for its grace, and its batch would wait.
	waiting := h.handoffWaiting()
	redistest.Hold(t, 4*grace, "no release while the stale copies fill the capacity", func() bool {
		now := h.handoffWaiting()
		leases := h.leases()
		if leases != 0 || now != waiting {
			t.Logf("%d leases, %d batch tasks waiting (%d at the start)", leases, now, waiting)
			return false
		}
		return true
	})
	swept := h.counter("sluice_dispatch_swept_total")
	if waiting > 2*capacity {
		t.Fatalf("%d batch tasks waiting, want at most 2 × capacity %d", waiting, capacity)
	}
	t.Logf("stall: %v releases swept, %d batch tasks waiting", swept, waiting)

	// The worker fetches again (its announcement now its own).
	if err := h.st.Heartbeat(h.ctx, "starved", 0, time.Second); err != nil {
		t.Fatal(err)
	}
	h.startWorker(capacity, nil, func(c *worker.Config) { c.Settings.Grace = grace })
	got := h.recv.waitFor(t, "", len(ids), 30*time.Second)
	exactlyOnce(t, got, ids)
	lapsed, stale := h.counter("sluice_worker_claims_total", "outcome=lapsed"), h.counter("sluice_worker_claims_total", "outcome=stale")
	t.Logf("recovery: %v stale copies dropped unclaimed, %v claims stale", lapsed, stale)
	if lapsed < float64(waiting) {
		t.Fatalf("%v releases dropped as lapsed, want at least one per stale batch (%d)", lapsed, waiting)
	}
	if stale > lapsed/2 {
		t.Fatalf("%v stale claims beside %v lapsed drops: the stale copies should go without a claim", stale, lapsed)
	}
}

// leases counts the leases of every shard (released and running jobs).
func (h *harness) leases() int {
	h.t.Helper()
	n := 0
	for shard := range h.st.Shards() {
		c, err := h.rdb.ZCard(h.ctx, store.LeasesKey(h.prefix, shard)).Result()
		if err != nil {
			h.t.Fatal(err)
		}
		n += int(c)
	}
	return n
}

// handoffWaiting counts the batch tasks waiting in the hand-off queues.
func (h *harness) handoffWaiting() int {
	h.t.Helper()
	n := 0
	for _, q := range wire.HandoffQueueNames(h.prefix) {
		c, err := h.rdb.LLen(h.ctx, wire.AsynqQueueKey(q, "pending")).Result()
		if err != nil {
			h.t.Fatal(err)
		}
		n += int(c)
	}
	return n
}

// TestStaleFinishIsNotAFailure: when the worker's finish finds the job
// already finished at its gen — the first run of a call re-sent after its
// reply was lost — nothing is left for the sweep: the finish is not counted
// as failed, and the job stays succeeded with one recorded attempt.
func TestStaleFinishIsNotAFailure(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	exec := worker.ExecutorFunc(func(ctx context.Context, cj store.ClaimedJob) wire.AttemptOutcome {
		o := wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 204}
		if _, err := h.st.Finish(ctx, cj.ID, cj.Gen, o, store.FinishConfig{}); err != nil { // the lost first run
			t.Error(err)
		}
		return o
	})
	w := h.newWorker(exec, nil)
	r, task := h.release("t1")
	h.process(w, task)
	if n := h.counter("sluice_worker_finish_errors_total"); n != 0 {
		t.Fatalf("%v finish errors, want 0: a stale finish leaves nothing to retry", n)
	}
	if j := h.jobOf(r.ID); j.State != store.StateSucceeded || j.Attempt != 1 {
		t.Fatalf("job %s: %s after %d attempts, want succeeded after 1", r.ID, j.State, j.Attempt)
	}
}
