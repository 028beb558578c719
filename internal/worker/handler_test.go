package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/internal/worker"
)

// newWorker starts a Worker without an asynq server: the tests call
// ProcessTask themselves. exec nil is the webhook executor. These tests are
// about the protocol, not precision: ε is 10 ms, so that a claim delayed by
// a loaded machine under -race is not returned as late.
func (h *harness) newWorker(exec worker.Executor, edit func(*worker.Config)) *worker.Worker {
	h.t.Helper()
	if exec == nil {
		exec = &worker.WebhookExecutor{Client: loopbackClient(h.t)}
	}
	cfg := worker.Config{Store: h.st, Redis: h.rdb, Executor: exec, Prefix: h.prefix, Concurrency: 7,
		// Grace as startDispatcher's and most passes' here: a starved test
		// machine must not make the worker drop a release as lapsed.
		Settings: wire.Settings{Tolerance: 10 * time.Millisecond, Grace: 3 * time.Second}, Registerer: h.reg, Logger: testLogger(h.t)}
	if edit != nil {
		edit(&cfg)
	}
	w, err := worker.New(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := w.Start(h.ctx); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(w.Stop)
	return w
}

// release enqueues one webhook job for tenant and releases it with a pass;
// it returns the release and its asynq task.
func (h *harness) release(tenant string) (wire.Release, *asynq.Task) {
	h.t.Helper()
	id := h.enqueue(tenant, 1)[0]
	shard, err := store.ShardOfJobID(id)
	if err != nil {
		h.t.Fatal(err)
	}
	res, err := h.st.Pass(h.ctx, shard, store.PassConfig{Capacity: -1})
	if err != nil {
		h.t.Fatal(err)
	}
	for _, r := range res.Released {
		if r.ID == id {
			payload, _ := json.Marshal(wire.Payload{ID: r.ID, Gen: r.Gen, SlotUS: r.Slot.UnixMicro()})
			return r, asynq.NewTask(wire.TaskTypeWebhook, payload)
		}
	}
	h.t.Fatalf("pass released %+v, not %s", res.Released, id)
	return wire.Release{}, nil
}

// releaseN enqueues n webhook jobs for tenant and releases them with one
// pass, in slot order.
func (h *harness) releaseN(tenant string, n int) []wire.Release {
	h.t.Helper()
	ids := h.enqueue(tenant, n)
	shard, err := store.ShardOfJobID(ids[0])
	if err != nil {
		h.t.Fatal(err)
	}
	res, err := h.st.Pass(h.ctx, shard, store.PassConfig{Capacity: -1})
	if err != nil {
		h.t.Fatal(err)
	}
	if len(res.Released) != n {
		h.t.Fatalf("released %+v, want %d jobs", res.Released, n)
	}
	return res.Released
}

// taskOf is the asynq task the dispatcher would enqueue for r.
func taskOf(r wire.Release) *asynq.Task {
	payload, _ := json.Marshal(wire.Payload{ID: r.ID, Gen: r.Gen, SlotUS: r.Slot.UnixMicro()})
	return asynq.NewTask(wire.TaskTypeWebhook, payload)
}

func (h *harness) process(w *worker.Worker, task *asynq.Task) {
	h.t.Helper()
	if err := w.ProcessTask(h.ctx, task); err != nil {
		h.t.Fatalf("ProcessTask: %v", err)
	}
}

func TestTaskIsSentAtItsSlotAndFinished(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2)
	w := h.newWorker(nil, nil)
	r, task := h.release("t1")
	h.process(w, task)

	got := h.recv.arrivals("t1")
	if len(got) != 1 || got[0].id != r.ID {
		t.Fatalf("arrivals %+v, want job %s once", got, r.ID)
	}
	if off := got[0].redis.Sub(r.Slot); off < -3*time.Millisecond || off > sendBound() {
		t.Fatalf("sent %s off its slot, want within %s", off, sendBound())
	}
	if j := h.jobOf(r.ID); j.State != store.StateSucceeded || j.Attempt != 1 {
		t.Fatalf("job after the attempt: %s, attempt %d", j.State, j.Attempt)
	}
}

func TestDuplicateTaskIsDroppedWithoutSending(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2)
	w := h.newWorker(nil, nil)
	_, task := h.release("t1")
	h.process(w, task)
	h.process(w, task) // asynq delivered it twice: the claim's gen fence drops it
	if n := len(h.recv.arrivals("t1")); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
	if m := h.metrics("sluice_worker_claims_total"); !strings.Contains(m, `value:"stale"] 1`) {
		t.Fatalf("claims:\n%s", m)
	}
}

func TestCanceledJobIsNotSent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2)
	w := h.newWorker(nil, nil)
	r, task := h.release("t1")
	if _, _, err := h.st.Cancel(h.ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	h.process(w, task)
	if n := len(h.recv.arrivals("t1")); n != 0 {
		t.Fatalf("%d requests for a canceled job", n)
	}
	if m := h.metrics("sluice_worker_claims_total"); !strings.Contains(m, `value:"canceled"] 1`) {
		t.Fatalf("claims:\n%s", m)
	}
}

// TestLateTaskWaitsItsTurnNotSentInAClump: the second of two jobs goes out
// on time; then the first one's task arrives late. It is not sent at once
// (that would be a clump: two requests closer than T) but when the send
// schedule allows it, T after the second.
func TestLateTaskWaitsItsTurnNotSentInAClump(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2)
	h.policy("t1", store.Overrides{RateUS: ptr(80_000), Burst: ptr(1)}) // T = 80ms
	w := h.newWorker(nil, nil)
	rel := h.releaseN("t1", 2)
	first, second := rel[0], rel[1]
	h.process(w, taskOf(second)) // on time, at first's slot + T
	h.process(w, taskOf(first))  // late by more than T

	got := h.recv.arrivals("t1")
	if len(got) != 2 || got[0].id != second.ID || got[1].id != first.ID {
		t.Fatalf("arrivals %+v, want the second job, then the first", got)
	}
	// The send schedule acts on the claims (Redis time); the arrivals add
	// each request's own latency, which a busy machine stretches.
	if gap := h.jobOf(first.ID).Claimed.Sub(h.jobOf(second.ID).Claimed); gap < 80*time.Millisecond-10*time.Millisecond {
		t.Fatalf("the late job was claimed %s after the other, want at least T = 80ms − ε (10ms)", gap)
	}
	if n := h.counter("sluice_worker_claims_total", "outcome=early"); n < 1 {
		t.Fatalf("%v early replies, want the late claim told to wait", n)
	}
	if j := h.jobOf(first.ID); j.State != store.StateSucceeded || j.Attempt != 1 || j.Gen != first.Gen {
		t.Fatalf("late job %+v: want succeeded in its first attempt, same generation", j)
	}
}

func TestExecutorPanicIsARetryableFailure(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2)
	w := h.newWorker(worker.ExecutorFunc(func(context.Context, store.ClaimedJob) wire.AttemptOutcome {
		panic("boom")
	}), nil)
	r, task := h.release("t1")
	h.process(w, task)
	j := h.jobOf(r.ID)
	if j.State != store.StateRetrying || j.Attempt != 1 {
		t.Fatalf("job after a panic: %s, attempt %d; want retrying after attempt 1", j.State, j.Attempt)
	}
	if len(j.Attempts) != 1 || j.Attempts[0].Error != "panic" {
		t.Fatalf("attempt log %+v, want reason panic", j.Attempts)
	}
	if m := h.metrics("sluice_worker_attempts_total"); !strings.Contains(m, `value:"retry"] 1`) {
		t.Fatalf("attempts:\n%s", m)
	}
}

func TestExecutorGetsTheJobsTimeoutAsDeadline(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2)
	h.policy("t1", store.Overrides{TimeoutUS: ptr(300_000)})
	deadline := make(chan time.Duration, 1)
	w := h.newWorker(worker.ExecutorFunc(func(ctx context.Context, _ store.ClaimedJob) wire.AttemptOutcome {
		d, _ := ctx.Deadline()
		deadline <- time.Until(d)
		return wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200}
	}), nil)
	_, task := h.release("t1")
	h.process(w, task)
	if d := <-deadline; d > 300*time.Millisecond || d < 250*time.Millisecond {
		t.Fatalf("attempt deadline %s away, want the policy's 300ms", d)
	}
}

func TestMalformedPayloadIsAnError(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	w := h.newWorker(nil, nil)
	err := w.ProcessTask(h.ctx, asynq.NewTask(wire.TaskTypeWebhook, []byte("not json")))
	if !errors.Is(err, wire.ErrBadPayload) {
		t.Fatalf("ProcessTask = %v, want ErrBadPayload", err)
	}
}

func TestHandlerReturnsWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2)
	h.policy("t1", store.Overrides{RateUS: ptr(90_000), Burst: ptr(1)}) // T = 90ms < D
	w := h.newWorker(nil, nil)
	r := h.releaseN("t1", 2)[1] // slot T away: the handler waits for it
	task := taskOf(r)
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error, 1)
	go func() { done <- w.ProcessTask(ctx, task) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Second):
		t.Fatal("ProcessTask ignored its context")
	}
	if ended := time.Now(); !ended.Before(w.Clock().Local(r.Slot)) {
		t.Fatalf("ProcessTask returned %s after the slot, not when its context ended", ended.Sub(w.Clock().Local(r.Slot)))
	}
	if j := h.jobOf(r.ID); j.State != store.StateReleased || len(h.recv.arrivals("t1")) != 0 {
		t.Fatalf("job %s with %d requests; want it left released (for the sweep), unsent", j.State, len(h.recv.arrivals("t1")))
	}
}

func TestHeartbeatAnnouncesAndWithdrawsConcurrency(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	w := h.newWorker(nil, func(c *worker.Config) { c.Concurrency = 13; c.Registerer = prometheus.NewRegistry() })
	if n, err := h.st.Capacity(h.ctx); err != nil || n != 13 {
		t.Fatalf("capacity after Start: %d, %v; want 13", n, err)
	}
	w.Stop()
	w.Stop()
	if n, err := h.st.Capacity(h.ctx); err != nil || n != 0 {
		t.Fatalf("capacity after Stop: %d, %v; want 0", n, err)
	}
}

func TestStartRefusesAPickupBudgetBelowOnePointFiveTCI(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	w, err := worker.New(worker.Config{Store: h.st, Redis: h.rdb, Executor: &worker.WebhookExecutor{}, Concurrency: 1,
		MinLead: 25 * time.Millisecond, TaskCheckInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(h.ctx); err == nil || !strings.Contains(err.Error(), "min_lead") {
		t.Fatalf("Start = %v, want the L ≥ 1.5 × TCI + 2 RTT refusal", err)
	}
	w.Stop()
	if err := worker.CheckPickupBudget(50*time.Millisecond, 20*time.Millisecond, time.Millisecond); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
}

// TestClockTracksRedisTime: the estimate stays within a few ms of Redis
// TIME, read in between two local readings.
func TestClockTracksRedisTime(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	c := worker.NewClock(h.rdb, 0)
	if err := c.Sync(h.ctx); err != nil {
		t.Fatal(err)
	}
	if c.RTT() <= 0 || c.Uncertainty() <= 0 {
		t.Fatalf("RTT %s, uncertainty %s", c.RTT(), c.Uncertainty())
	}
	for range 20 {
		before := c.Now()
		redisNow, err := h.rdb.Time(h.ctx).Result()
		after := c.Now()
		if err != nil {
			t.Fatal(err)
		}
		// Redis read its clock between the two estimates, up to the error.
		const slack = 2 * time.Millisecond
		if redisNow.Before(before.Add(-slack)) || redisNow.After(after.Add(slack)) {
			t.Fatalf("Redis TIME %s outside the estimate [%s, %s] ± %s", redisNow, before, after, slack)
		}
	}
	// Local inverts Now on the local monotonic clock.
	if d := time.Until(c.Local(c.Now().Add(time.Second))); d < 999*time.Millisecond || d > time.Second {
		t.Fatalf("Local(Now + 1s) is %s away", d)
	}
}

func TestPermanentFailureCountsADeadLetterAndItsLatency(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2)
	w := h.newWorker(worker.ExecutorFunc(func(context.Context, store.ClaimedJob) wire.AttemptOutcome {
		return wire.AttemptOutcome{Kind: wire.FinishPermanent, Status: 404, Latency: 3 * time.Millisecond, Error: "http_404"}
	}), nil)
	r, task := h.release("t1")
	h.process(w, task)
	if j := h.jobOf(r.ID); j.State != store.StateDead {
		t.Fatalf("job after a 404: %s, want dead", j.State)
	}
	if m := h.metrics("sluice_worker_dead_letters_total"); !strings.Contains(m, " 1\n") {
		t.Errorf("dead letters metric:\n%s", m)
	}
	if m := h.metrics("sluice_worker_delivery_seconds"); !strings.Contains(m, `value:"permanent"] 1`) {
		t.Errorf("delivery latency histogram:\n%s", m)
	}
}

// earlyOnceStore answers a job's first claim "early" by wait and records
// when the second claim comes, which it answers "canceled".
type earlyOnceStore struct {
	worker.Store
	wait    time.Duration
	mu      sync.Mutex
	replied time.Time // when the early reply left
	again   time.Time // when the second claim came
	done    chan struct{}
}

func (s *earlyOnceStore) Claim(_ context.Context, _ string, _ int64, _ time.Duration) (store.Claim, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.replied.IsZero() {
		s.replied = time.Now()
		return store.Claim{Outcome: store.ClaimEarly, Wait: s.wait}, nil
	}
	s.again = time.Now()
	close(s.done)
	return store.Claim{Outcome: store.ClaimCanceled}, nil
}

// reclaimGap delivers one job whose first claim is answered "early, wait
// wait" (earlyOnceStore) by a worker of the given tolerance, and returns
// the time from that reply to the second claim.
func reclaimGap(t *testing.T, wait, tolerance time.Duration) time.Duration {
	t.Helper()
	h := newHarness(t, 1)
	st := &earlyOnceStore{Store: h.st, wait: wait, done: make(chan struct{})}
	w := h.newWorker(&sentExecutor{}, func(c *worker.Config) {
		c.Store = st
		c.Settings.Tolerance = tolerance
	})
	payload, _ := json.Marshal(wire.Payload{ID: "0-early", Gen: 1, SlotUS: time.Now().UnixMicro()})
	h.process(w, asynq.NewTask(wire.TaskTypeWebhook, payload))
	<-st.done
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.again.Sub(st.replied)
}

// TestReclaimAfterAnEarlyReplyAimsInsideTheWindow: after an "early, wait
// W" reply the worker claims again half a tolerance and a round trip
// before W is up — like its first claim — not at W, when the claim would
// land a round trip past its target and shift the tenant's send schedule.
// (Tolerance 400 ms, W 1 s: the re-claim is due ~800 ms after the reply;
// 100 ms of slack for a busy machine.)
func TestReclaimAfterAnEarlyReplyAimsInsideTheWindow(t *testing.T) {
	t.Parallel()
	gap := reclaimGap(t, time.Second, 400*time.Millisecond)
	if lo, hi := 750*time.Millisecond, 900*time.Millisecond; gap < lo || gap > hi {
		t.Fatalf("re-claim %s after the early reply, want within [%s, %s] (W − ε/2 − RTT)", gap, lo, hi)
	}
}

// TestReclaimAfterAnEarlyReplyNeverComesBeforeTheWindow: with a tolerance
// (1 µs) below any round trip, aiming the re-claim a round trip before the
// target would send it before target − ε, where it could only come back
// early again (8 times, then the sweep); the re-claim waits until W − ε
// after the early reply at least (a lower bound: timers never fire early).
func TestReclaimAfterAnEarlyReplyNeverComesBeforeTheWindow(t *testing.T) {
	t.Parallel()
	const wait, tolerance = 200 * time.Millisecond, time.Microsecond
	if gap := reclaimGap(t, wait, tolerance); gap < wait-tolerance {
		t.Fatalf("re-claim %s after the early reply, want at least W − ε = %s", gap, wait-tolerance)
	}
}

// sendLaterStore claims through the real store and moves the reply's send
// instant to later after the reply: a claim answered up to ε before the
// send instant of a schedule running late.
type sendLaterStore struct {
	worker.Store
	later   time.Duration
	mu      sync.Mutex
	replied time.Time // when the claim's reply came back
	sendAt  time.Time // the send instant the (moved) reply named
}

func (s *sendLaterStore) Claim(ctx context.Context, id string, gen int64, tolerance time.Duration) (store.Claim, error) {
	c, err := s.Store.Claim(ctx, id, gen, tolerance)
	if err == nil && c.Outcome == store.ClaimOK {
		s.mu.Lock()
		s.replied = time.Now()
		c.Job.SendAt = s.replied.Add(s.later)
		s.sendAt = c.Job.SendAt
		s.mu.Unlock()
	}
	return c, err
}

// TestClaimedJobIsSentAtTheClaimsSendInstant: the worker sends at the send
// instant the claim answered, not on the claim's reply, even when the job's
// slot is past — behind a late job the schedule puts each later one at its
// planned distance, and a claim's round trip must not move that.
func TestClaimedJobIsSentAtTheClaimsSendInstant(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	st := &sendLaterStore{Store: h.st, later: 300 * time.Millisecond}
	var sentAt time.Time
	exec := &sentExecutor{then: func(int, store.ClaimedJob) { sentAt = time.Now() }}
	w := h.newWorker(exec, func(c *worker.Config) { c.Store = st })
	r, task := h.release("t1")
	h.process(w, task)
	if got := exec.sent(); len(got) != 1 || got[0] != r.ID {
		t.Fatalf("sent %v, want %s once", got, r.ID)
	}
	st.mu.Lock()
	early, wait := st.sendAt.Sub(sentAt), sentAt.Sub(st.replied)
	st.mu.Unlock()
	// The reply names a send instant 300 ms after itself (the slot is past by
	// then, by however much the machine is busy): a timer never beats it.
	if early > 5*time.Millisecond { // the clock estimate's slack
		t.Fatalf("sent %s after the claim's reply, %s before its send instant 300ms after it", wait, early)
	}
	if j := h.jobOf(r.ID); j.State != store.StateSucceeded {
		t.Fatalf("job after the attempt: %s", j.State)
	}
}

// finishHeldStore holds every finish until release is closed, and counts
// the finishes that began.
type finishHeldStore struct {
	worker.Store
	release chan struct{}
	began   atomic.Int64
}

func (s *finishHeldStore) Finish(ctx context.Context, id string, gen int64, o wire.AttemptOutcome, cfg store.FinishConfig) (store.State, error) {
	s.began.Add(1)
	<-s.release
	return s.Store.Finish(ctx, id, gen, o, cfg)
}

// heldFinishes runs n jobs of tenant acme (1 000/s, burst and concurrency
// 10) as one batch on a worker of the given concurrency whose finishes are
// held until st.release closes; done gets ProcessTask's result.
func (h *harness) heldFinishes(concurrency, n int) (st *finishHeldStore, rels []wire.Release, done chan error) {
	h.policy("acme", store.Overrides{RateUS: ptr(1_000), Burst: ptr(10), Concurrency: ptr(10)})
	st = &finishHeldStore{Store: h.st, release: make(chan struct{})}
	w := h.newWorker(nil, func(c *worker.Config) {
		c.Store = st
		c.Concurrency = concurrency
	})
	rels = h.releaseN("acme", n)
	done = make(chan error, 1)
	go func() { done <- w.ProcessTask(h.ctx, batchOf(h.t, rels...)) }()
	return st, rels, done
}

// TestFinishRunsOutsideTheJobSlot: a job's slot is given back when its
// attempt ends, before its finish: with one slot and the first two jobs'
// finishes held, the third job is still sent; its own finish then waits
// for a finish place (two per slot) while holding its slot, so a fourth is
// not sent until a finish ends. Every job then succeeds.
func TestFinishRunsOutsideTheJobSlot(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	st, rels, done := h.heldFinishes(1, 4)

	h.recv.waitFor(t, "acme", 3, 10*time.Second) // the third sent while the first two finishes are held
	if n := st.began.Load(); n != 2 {
		t.Fatalf("%d finishes began with three jobs sent, want 2 (the third waits for a finish place)", n)
	}
	if got := len(h.recv.arrivals("acme")); got != 3 {
		t.Fatalf("%d jobs sent with one slot and both finish places taken, want 3", got)
	}
	close(st.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(rels))
	for i, r := range rels {
		ids[i] = r.ID
	}
	exactlyOnce(t, h.recv.arrivals("acme"), ids)
	for _, id := range ids {
		if s := h.jobOf(id).State; s != store.StateSucceeded {
			t.Errorf("job %s: %s, want succeeded", id, s)
		}
	}
}

// TestFinishSecondsTimesEachFinish: sluice_worker_finish_seconds observes
// every finish once, for at least as long as the store held it.
func TestFinishSecondsTimesEachFinish(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	st, rels, done := h.heldFinishes(2, 3) // four finish places: the three finishes held at once
	redistest.Poll(t, 10*time.Second, "three finishes began", func() bool { return st.began.Load() == 3 })
	const held = 30 * time.Millisecond
	redistest.Hold(t, held, "the finishes stay held", func() bool { return st.began.Load() == 3 })
	close(st.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, r := range rels {
		if s := h.jobOf(r.ID).State; s != store.StateSucceeded {
			t.Fatalf("job %s: %s, want succeeded", r.ID, s)
		}
	}
	if n, sum := h.histogram("sluice_worker_finish_seconds"); n != 3 || sum < 3*held.Seconds() {
		t.Fatalf("finish seconds: %d finishes over %.3f s, want 3 over at least %.3f s", n, sum, 3*held.Seconds())
	}
}
