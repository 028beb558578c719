package worker_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync/atomic"
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
// lease ends): nothing is sent, no claim is made, and it is given back at
// once — queued with gen + 1, the pre-claim's attempt taken back — not left
// running until the sweep finds its lease ended (send + timeout + grace).
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
		if j := h.jobOf(r.ID); j.State != store.StateQueued || j.Gen != r.Gen+1 || j.Attempt != 0 {
			t.Fatalf("job %s: %s gen %d attempt %d; want given back: queued at gen %d, no attempt", r.ID, j.State, j.Gen, j.Attempt, r.Gen+1)
		}
	}
}

// A pre-claimed job that lapses while it waits for a job slot (the job
// before it holds the worker's only slot past the second's send +
// grace/2) is given back too.
func TestPreclaimedJobLapsedWaitingForASlotIsGivenBack(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	const grace = 400 * time.Millisecond
	var late atomic.Int64 // µs of the Redis clock estimate
	exec := &sentExecutor{}
	exec.then = func(n int, _ store.ClaimedJob) {
		if n == 1 { // hold the only slot until the second job has lapsed
			redistest.Poll(t, 10*time.Second, "send + grace/2 of the second job to pass",
				func() bool { return h.clock.Now().UnixMicro() > late.Load() })
		}
	}
	w := h.newWorker(exec, func(c *worker.Config) { c.Settings.Grace, c.Concurrency = grace, 1 })
	h.policy("t1", store.Overrides{Burst: ptr(2)})
	h.enqueue("t1", 2)
	res, err := h.st.Pass(h.ctx, 0, store.PassConfig{Capacity: -1, Grace: grace, Preclaim: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Released) != 2 {
		t.Fatalf("released %d jobs, want 2", len(res.Released))
	}
	first, second := res.Released[0], res.Released[1]
	late.Store(second.SendAt.Add(grace / 2).UnixMicro())
	b := wire.Batch{}
	for _, r := range res.Released {
		if r.Claimed == nil {
			t.Fatalf("release %+v not pre-claimed", r)
		}
		b.Jobs = append(b.Jobs, wire.Payload{ID: r.ID, Gen: r.Gen, SlotUS: r.SendAt.UnixMicro(), Claimed: r.Claimed})
	}
	h.process(w, asynq.NewTask(wire.TaskTypeBatch, wire.EncodeBatch(b)))
	if got, want := exec.sent(), []string{first.ID}; !slices.Equal(got, want) {
		t.Fatalf("sent %v, want %v (not the lapsed %s)", got, want, second.ID)
	}
	if j := h.jobOf(second.ID); j.State != store.StateQueued || j.Gen != second.Gen+1 || j.Attempt != 0 {
		t.Fatalf("lapsed job: %s gen %d attempt %d; want given back: queued at gen %d, no attempt", j.State, j.Gen, j.Attempt, second.Gen+1)
	}
	if j := h.jobOf(first.ID); j.State != store.StateSucceeded {
		t.Fatalf("first job: %s, want succeeded", j.State)
	}
	if n := h.counter("sluice_worker_claims_total", "outcome=lapsed"); n != 1 {
		t.Errorf("%v dropped as lapsed, want 1", n)
	}
}

// failingFinish is the real store whose next fails Finish calls fail, as
// finishes sent to a master that died do; calls counts every Finish,
// confirms every Confirm.
type failingFinish struct {
	worker.Store
	fails, calls atomic.Int32
	confirms     atomic.Int32
}

func (f *failingFinish) Confirm(ctx context.Context, id string, gen int64) (bool, error) {
	f.confirms.Add(1)
	return f.Store.Confirm(ctx, id, gen)
}

func (f *failingFinish) Finish(ctx context.Context, id string, gen int64, o wire.AttemptOutcome, cfg store.FinishConfig) (store.State, error) {
	f.calls.Add(1)
	if f.fails.Add(-1) >= 0 {
		return "", errors.New("dial tcp: connection refused")
	}
	return f.Store.Finish(ctx, id, gen, o, cfg)
}

// preclaimedBatch is the hand-off task of release r alone.
func preclaimedBatch(t *testing.T, r wire.Release) *asynq.Task {
	t.Helper()
	if r.Claimed == nil {
		t.Fatalf("release %+v not pre-claimed", r)
	}
	p := wire.Payload{ID: r.ID, Gen: r.Gen, SlotUS: r.SendAt.UnixMicro(), Claimed: r.Claimed}
	return asynq.NewTask(wire.TaskTypeBatch, wire.EncodeBatch(wire.Batch{Jobs: []wire.Payload{p}}))
}

// preclaimedWithFailingFinish passes n due jobs of tenant t1, pre-claimed,
// for a worker whose store is a failingFinish.
func preclaimedWithFailingFinish(t *testing.T, n int) (*harness, *sentExecutor, *failingFinish, *worker.Worker, store.PassResult) {
	t.Helper()
	h := newHarness(t, 1)
	exec := &sentExecutor{}
	st := &failingFinish{Store: h.st}
	w := h.newWorker(exec, func(c *worker.Config) { c.Store = st })
	h.policy("t1", store.Overrides{Burst: ptr(int64(n))})
	h.enqueue("t1", n)
	res, err := h.st.Pass(h.ctx, 0, store.PassConfig{Capacity: -1, Grace: 3 * time.Second, Preclaim: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Released) != n {
		t.Fatalf("released %d jobs, want %d", len(res.Released), n)
	}
	return h, exec, st, w, res
}

// A finish that Redis does not answer is sent again until it is recorded
// (within the finish's 5s): the attempt is the job's one, not left for the
// sweep to send again. The finish that then succeeded does not end the
// pre-claim fence (a failover's new master may lack pre-claims): the next
// pre-claimed job is confirmed before it is sent.
func TestFinishIsSentAgainWhileRedisDoesNotAnswer(t *testing.T) {
	t.Parallel()
	h, exec, st, w, res := preclaimedWithFailingFinish(t, 2)
	st.fails.Store(3)
	h.process(w, preclaimedBatch(t, res.Released[0]))
	if n := st.calls.Load(); n != 4 {
		t.Fatalf("%d finish calls, want 3 failed and the one recorded", n)
	}
	if j := h.jobOf(res.Released[0].ID); j.State != store.StateSucceeded || j.Attempt != 1 {
		t.Fatalf("job %s: %s attempt %d, want succeeded at its first attempt", j.ID, j.State, j.Attempt)
	}
	if n := h.counter("sluice_worker_finish_errors_total"); n != 0 {
		t.Errorf("%v finishes given up, want none", n)
	}
	h.process(w, preclaimedBatch(t, res.Released[1]))
	if got, want := exec.sent(), []string{res.Released[0].ID, res.Released[1].ID}; !slices.Equal(got, want) {
		t.Fatalf("sent %v, want %v", got, want)
	}
	if n := h.counter("sluice_worker_claims_total", "outcome=preclaimed"); n != 2 {
		t.Errorf("%v pre-claimed sent, want 2", n)
	}
	if n := st.confirms.Load(); n != 1 {
		t.Errorf("%d confirmations, want the second job's", n)
	}
}

// After a finish failed, a pre-claimed job is sent only when Redis confirms
// it runs at its gen: one whose record moved on (a failover's new master
// released it again) is dropped unsent (outcome "unconfirmed"); one that
// runs at its gen is sent, and the confirmation ends the fence, so the job
// after it is sent without one.
func TestPreclaimedJobIsConfirmedAfterAFailedFinish(t *testing.T) {
	t.Parallel()
	h, exec, st, w, res := preclaimedWithFailingFinish(t, 4)
	batch := func(i int) *asynq.Task { return preclaimedBatch(t, res.Released[i]) }
	st.fails.Store(1)
	h.process(w, batch(0)) // sent; its finish fails
	// The second job's record moved on, as on a new master that released it again.
	moved := res.Released[1]
	key, err := h.st.JobKey(moved.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.rdb.HSet(h.ctx, key, "gen", moved.Gen+1, "state", "released").Err(); err != nil {
		t.Fatal(err)
	}
	h.process(w, batch(1))
	h.process(w, batch(2)) // confirmed: sent, the fence ends
	h.process(w, batch(3))
	want := []string{res.Released[0].ID, res.Released[2].ID, res.Released[3].ID}
	if got := exec.sent(); !slices.Equal(got, want) {
		t.Fatalf("sent %v, want %v (not the moved %s)", got, want, moved.ID)
	}
	if n := h.counter("sluice_worker_claims_total", "outcome=unconfirmed"); n != 1 {
		t.Errorf("%v dropped unconfirmed, want 1", n)
	}
	if n := h.counter("sluice_worker_claims_total", "outcome=preclaimed"); n != 3 {
		t.Errorf("%v pre-claimed sent, want 3", n)
	}
	if j := h.jobOf(moved.ID); j.State != store.StateReleased || j.Gen != moved.Gen+1 {
		t.Errorf("the moved job: %s gen %d; want released at gen %d, untouched", j.State, j.Gen, moved.Gen+1)
	}
	for _, r := range res.Released[2:] {
		if j := h.jobOf(r.ID); j.State != store.StateSucceeded {
			t.Errorf("job %s: %s, want succeeded", r.ID, j.State)
		}
	}
}
