package worker_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/internal/worker"
)

// batchOf is the batch task a dispatcher hands off for rs (one shard, in
// slot order).
func batchOf(t *testing.T, rs ...wire.Release) *asynq.Task {
	t.Helper()
	shard, err := store.ShardOfJobID(rs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	b := wire.Batch{Shard: shard}
	for _, r := range rs {
		b.Jobs = append(b.Jobs, wire.Payload{ID: r.ID, Gen: r.Gen, SlotUS: r.SendAt.UnixMicro()})
	}
	return asynq.NewTask(wire.TaskTypeBatch, wire.EncodeBatch(b))
}

// passAll runs one pass over shard 0 with D = 250 ms and grace 3 s
// (passOf) and requires it to release n jobs.
func (h *harness) passAll(n int) []wire.Release {
	h.t.Helper()
	rel := h.passOf(0, 250*time.Millisecond, 3*time.Second).Released
	if len(rel) != n {
		h.t.Fatalf("released %d jobs, want %d (D = 250ms)", len(rel), n)
	}
	return rel
}

// passOf runs one pass over shard with lead D and grace, releasing without
// a capacity bound.
func (h *harness) passOf(shard int, lead, grace time.Duration) store.PassResult {
	h.t.Helper()
	res, err := h.st.Pass(h.ctx, shard, store.PassConfig{Capacity: -1, Lead: lead, Grace: grace})
	if err != nil {
		h.t.Fatal(err)
	}
	return res
}

// sentExecutor records the ids it ran, in order, and calls then (when set)
// with the number of jobs run so far.
type sentExecutor struct {
	mu   sync.Mutex
	ids  []string
	then func(n int, job store.ClaimedJob)
}

func (e *sentExecutor) Execute(_ context.Context, cj store.ClaimedJob) wire.AttemptOutcome {
	e.mu.Lock()
	e.ids = append(e.ids, cj.ID)
	n := len(e.ids)
	e.mu.Unlock()
	if e.then != nil {
		e.then(n, cj)
	}
	return wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 204}
}

func (e *sentExecutor) sent() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.ids)
}

// requireEachOnce fails unless the jobs of rel, and only they, were sent,
// each once.
func (e *sentExecutor) requireEachOnce(t *testing.T, rel []wire.Release) {
	t.Helper()
	sent := slices.Sorted(slices.Values(e.sent()))
	if want := slices.Sorted(slices.Values(idsOf(rel))); !slices.Equal(sent, want) {
		t.Fatalf("sent %v, want each of %v once", sent, want)
	}
}

func idsOf(rs []wire.Release) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

// sweepUntil passes shard with a 1 ms grace until every job of ids was
// swept and released again; it returns those new releases, each job's
// latest (a job released again early in the polling may lapse and be swept
// once more by a later pass), in slot order.
func (h *harness) sweepUntil(shard int, lead time.Duration, ids []string) []wire.Release {
	h.t.Helper()
	latest := map[string]wire.Release{}
	redistest.Poll(h.t, 5*time.Second, "the sweep to return and re-release the jobs", func() bool {
		for _, r := range h.passOf(shard, lead, time.Millisecond).Released {
			if slices.Contains(ids, r.ID) {
				latest[r.ID] = r
			}
		}
		return len(latest) == len(ids)
	})
	again := slices.Collect(maps.Values(latest))
	slices.SortFunc(again, func(a, b wire.Release) int { return a.SendAt.Compare(b.SendAt) })
	return again
}

// TestBatchWhoseWorkerDiesHalfWay: the batch's ctx ends (the worker shuts
// down) after its second job ran: the jobs not yet claimed stay released,
// the sweep returns them, and with the old batch delivered again (asynq's
// recovery) beside their new releases, every job is sent exactly once.
func TestBatchWhoseWorkerDiesHalfWay(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	h.policy("t1", store.Overrides{RateUS: ptr(60_000), Burst: ptr(1)}) // T = 60ms
	ctx, cancel := context.WithCancel(h.ctx)
	defer cancel()
	exec := &sentExecutor{then: func(n int, _ store.ClaimedJob) {
		if n == 2 {
			cancel() // the process dies with the third and fourth jobs still waiting
		}
	}}
	w := h.newWorker(exec, nil)
	h.enqueue("t1", 4)
	rel := h.passAll(4)
	batch := batchOf(t, rel...)
	if err := w.ProcessTask(ctx, batch); err != nil {
		t.Fatalf("ProcessTask = %v, want nil once settled", err)
	}
	if got := exec.sent(); !slices.Equal(got, idsOf(rel[:2])) {
		t.Fatalf("sent %v before the worker died, want the first two of %v", got, idsOf(rel))
	}
	for _, r := range rel[2:] {
		if j := h.jobOf(r.ID); j.State != store.StateReleased || j.Gen != r.Gen {
			t.Fatalf("job %s after the worker died: %s gen %d, want released gen %d (for the sweep)", r.ID, j.State, j.Gen, r.Gen)
		}
	}

	again := h.sweepUntil(0, 250*time.Millisecond, idsOf(rel[2:]))
	var wg sync.WaitGroup
	for _, task := range []*asynq.Task{batch, batchOf(t, again...)} { // the old batch again, and the new one
		wg.Go(func() { // as on a restarted worker
			if err := w.ProcessTask(h.ctx, task); err != nil {
				t.Errorf("ProcessTask = %v", err)
			}
		})
	}
	wg.Wait()
	exec.requireEachOnce(t, rel)
	// The old batch's jobs are fenced: claimed stale, or dropped unclaimed
	// when their send time + grace passed before the worker reached them.
	if n := h.counter("sluice_worker_claims_total", "outcome=stale") + h.counter("sluice_worker_claims_total", "outcome=lapsed"); n < 4 {
		t.Fatalf("%v stale claims and lapsed drops, want the 4 jobs of the old batch fenced", n)
	}
}

// TestBatchArrivingAfterSomeJobsWereSweptAndReleased: of a batch's two
// jobs the first is swept and released again before the batch arrives; the
// batch sends only the second (the first's gen is stale), the new release
// sends the first: each job once.
func TestBatchArrivingAfterSomeJobsWereSweptAndReleased(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	h.policy("t1", store.Overrides{RateUS: ptr(400_000), Burst: ptr(1)}) // T = 400ms: the second's lease outlives the sweep
	exec := &sentExecutor{}
	w := h.newWorker(exec, nil)
	h.enqueue("t1", 2)
	rel := h.passOf(0, 500*time.Millisecond, time.Millisecond).Released
	if len(rel) != 2 {
		t.Fatalf("released %d jobs, want 2", len(rel))
	}
	late := batchOf(t, rel...)
	again := h.sweepUntil(0, 500*time.Millisecond, idsOf(rel[:1]))
	if again[0].Gen <= rel[0].Gen {
		t.Fatalf("re-released at gen %d, want past %d", again[0].Gen, rel[0].Gen)
	}
	h.process(w, late)
	if got := exec.sent(); !slices.Equal(got, idsOf(rel[1:])) {
		t.Fatalf("the late batch sent %v, want only %s (the other was swept)", got, rel[1].ID)
	}
	h.process(w, batchOf(t, again...))
	exec.requireEachOnce(t, rel)
}

// TestBatchSpanningAPause: the tenant is paused while its batch is being
// delivered (by the second job's attempt): the jobs after it are returned
// at their claims, not sent.
func TestBatchSpanningAPause(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	h.policy("t1", store.Overrides{RateUS: ptr(60_000), Burst: ptr(1)})
	exec := &sentExecutor{}
	exec.then = func(n int, cj store.ClaimedJob) {
		if n == 2 {
			if err := h.st.Pause(context.Background(), cj.Tenant, time.Now().Add(time.Hour)); err != nil {
				t.Error(err)
			}
		}
	}
	w := h.newWorker(exec, nil)
	h.enqueue("t1", 4)
	rel := h.passAll(4)
	h.process(w, batchOf(t, rel...))
	if got := exec.sent(); !slices.Equal(got, idsOf(rel[:2])) {
		t.Fatalf("sent %v, want only the two before the pause", got)
	}
	if n := h.counter("sluice_worker_claims_total", "outcome=returned"); n != 2 {
		t.Fatalf("%v claims returned, want the 2 after the pause", n)
	}
	for _, r := range rel[2:] {
		if j := h.jobOf(r.ID); j.State == store.StateRunning || j.State == store.StateSucceeded || j.Attempt != 0 {
			t.Fatalf("job %s after the pause: %s, %d attempts; want it back in its tenant's backlog unsent", r.ID, j.State, j.Attempt)
		}
	}
}

// TestBatchOfMixedTenantsKeepsEachTenantsSpacing: one batch holds two
// tenants' jobs interleaved; each tenant's claims (Redis time, the store's
// own instants) are at least its T − ε apart, and every job is sent once.
func TestBatchOfMixedTenantsKeepsEachTenantsSpacing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	spacing := map[string]time.Duration{"fast": 40 * time.Millisecond, "slow": 70 * time.Millisecond}
	for tenant, T := range spacing {
		h.policy(tenant, store.Overrides{RateUS: ptr(T.Microseconds()), Burst: ptr(1)})
	}
	exec := &sentExecutor{}
	w := h.newWorker(exec, nil)
	ids := map[string][]string{"fast": h.enqueue("fast", 4), "slow": h.enqueue("slow", 3)}
	rel := h.passAll(7)
	tenants := map[string]bool{}
	for _, r := range rel {
		tenants[r.Tenant] = true
	}
	if len(tenants) != 2 {
		t.Fatalf("the batch holds tenants %v, want both", tenants)
	}
	h.process(w, batchOf(t, rel...))

	exec.requireEachOnce(t, rel)
	const eps = 10 * time.Millisecond // newWorker's tolerance
	for tenant, T := range spacing {
		var claimed []time.Time
		for _, id := range ids[tenant] {
			claimed = append(claimed, h.jobOf(id).Claimed)
		}
		slices.SortFunc(claimed, func(a, b time.Time) int { return a.Compare(b) })
		for i := 1; i < len(claimed); i++ {
			if gap := claimed[i].Sub(claimed[i-1]); gap < T-eps {
				t.Fatalf("tenant %s: claims %s apart, want ≥ T − ε = %s", tenant, gap, T-eps)
			}
		}
	}
}

// TestBatchHoldsAtMostConcurrencyJobs: a batch larger than the Worker's
// concurrency never runs more than Concurrency of its jobs at once, and
// every job still runs once.
func TestBatchHoldsAtMostConcurrencyJobs(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	var (
		mu       sync.Mutex
		running  int
		most     int
		released = make(chan struct{})
		release  sync.Once // running may reach 3 again after the release
	)
	exec := worker.ExecutorFunc(func(ctx context.Context, _ store.ClaimedJob) wire.AttemptOutcome {
		mu.Lock()
		running++
		most = max(most, running)
		full := running == 3
		mu.Unlock()
		if full {
			release.Do(func() { close(released) })
		}
		select {
		case <-released:
		case <-ctx.Done():
		}
		mu.Lock()
		running--
		mu.Unlock()
		return wire.AttemptOutcome{Kind: wire.FinishSuccess}
	})
	w := h.newWorker(exec, func(c *worker.Config) { c.Concurrency = 3 })
	h.policy("t1", store.Overrides{RateUS: ptr(1_000), Burst: ptr(9), Concurrency: ptr(20)})
	h.enqueue("t1", 9)
	rel := h.passAll(9)
	h.process(w, batchOf(t, rel...))
	mu.Lock()
	defer mu.Unlock()
	if most != 3 {
		t.Fatalf("at most %d jobs ran at once, want the concurrency, 3", most)
	}
	for _, r := range rel {
		if j := h.jobOf(r.ID); j.State != store.StateSucceeded {
			t.Fatalf("job %s: %s, want succeeded", r.ID, j.State)
		}
	}
}

// TestBatchesShareTheJobSlots: two batches delivered at once by a Worker
// of concurrency 2 share its runners (a runner that settled a job takes
// the next one given, whichever batch it is of); every job runs once, and each batch returns only once its own jobs have run
// (TestBatchHoldsAtMostConcurrencyJobs checks the bound).
func TestBatchesShareTheJobSlots(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	var (
		mu  sync.Mutex
		ran = map[string]int{}
	)
	exec := worker.ExecutorFunc(func(_ context.Context, cj store.ClaimedJob) wire.AttemptOutcome {
		mu.Lock()
		ran[cj.ID]++
		mu.Unlock()
		return wire.AttemptOutcome{Kind: wire.FinishSuccess}
	})
	w := h.newWorker(exec, func(c *worker.Config) { c.Concurrency = 2 })
	h.policy("t1", store.Overrides{RateUS: ptr(1_000), Burst: ptr(8), Concurrency: ptr(20)})
	h.enqueue("t1", 8)
	rel := h.passAll(8)
	batches := [][]wire.Release{rel[:4], rel[4:]}
	errs := make(chan error, len(batches))
	for _, b := range batches {
		task := batchOf(t, b...)
		go func() {
			err := w.ProcessTask(h.ctx, task)
			mu.Lock()
			defer mu.Unlock()
			for _, r := range b {
				if err == nil && ran[r.ID] != 1 {
					err = fmt.Errorf("batch returned with job %s run %d times", r.ID, ran[r.ID])
				}
			}
			errs <- err
		}()
	}
	for range batches {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, r := range rel {
		if j := h.jobOf(r.ID); j.State != store.StateSucceeded || ran[r.ID] != 1 {
			t.Fatalf("job %s: %s after %d runs, want succeeded after 1", r.ID, j.State, ran[r.ID])
		}
	}
}

func TestMalformedBatchIsAnError(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	w := h.newWorker(nil, nil)
	err := w.ProcessTask(h.ctx, asynq.NewTask(wire.TaskTypeBatch, []byte(`{"shard":0,"jobs":[]}`)))
	if !errors.Is(err, wire.ErrBadPayload) {
		t.Fatalf("ProcessTask = %v, want ErrBadPayload", err)
	}
}
