package sluicetask_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/sluicetask"
)

// TestTaskJobsRunOnceWithinRateAndConcurrency: task jobs enqueued in Sluice
// reach the user's handler through a real dispatcher and a real asynq
// server, each exactly once, as a task of the job's task_type with the job's
// payload and the delivery's headers; the tenant's concurrency cap (2,
// while a handler holds 120 ms and the rate would allow 3) is never
// exceeded, and no window of starts holds more than the rate allows
// (b + r·(Δ + 2·20 ms) + 1).
func TestTaskJobsRunOnceWithinRateAndConcurrency(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const tenant, n, rate = "acme", 12, 20.0
	e.policy(tenant, store.Overrides{RateUS: p64(50_000), Burst: p64(1), Concurrency: p64(2), Adaptive: p64(0)})
	rec := newRecorder(func(ctx context.Context, _ call, _ int) error {
		hold(ctx, 120*time.Millisecond)
		return nil
	})
	e.startServer(4, rec.ProcessTask)
	e.startDispatcher()
	payloads := make([]string, n)
	for i := range payloads {
		payloads[i] = fmt.Sprintf(`{"n":%d,"to":"user-%d@example.com"}`, i, i)
	}
	ids := e.enqueue(tenant, payloads...)
	for _, id := range ids {
		e.waitState(id, store.StateSucceeded, 30*time.Second)
	}

	for i, id := range ids {
		calls := rec.callsOf(id)
		if len(calls) != 1 {
			t.Fatalf("job %s ran %d times, want once", id, len(calls))
		}
		c := calls[0]
		if c.taskType != "email:send" || c.payload != payloads[i] || c.headers[wire.HeaderJob] != id ||
			c.job.Tenant != tenant || c.job.Attempt != 1 {
			t.Errorf("job %s: handler got %+v, want type email:send, payload %s, its headers", id, c, payloads[i])
		}
		if j := e.jobOf(id); j.Attempt != 1 {
			t.Errorf("job %s: %d attempts used, want 1", id, j.Attempt)
		}
	}
	if got := len(rec.all()); got != n {
		t.Errorf("%d handler calls, want %d", got, n)
	}
	if m := rec.maxRunning(tenant); m > 2 || m < 1 {
		t.Errorf("at most %d handlers ran at once, want ≤ the cap 2", m)
	}
	starts := make([]time.Time, 0, n)
	for _, c := range rec.all() {
		starts = append(starts, c.start)
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	for i := range starts {
		for j := i + 1; j < len(starts); j++ {
			span := starts[j].Sub(starts[i]) + 2*tci
			if got, allowed := float64(j-i+1), 1+rate*span.Seconds()+1; got > allowed {
				t.Fatalf("%v jobs started within %s: more than b + r·(Δ + 2ε) + 1 = %.2f", got, starts[j].Sub(starts[i]), allowed)
			}
		}
	}
}

// TestFailuresGoThroughSluice: a handler error is retried through Sluice's
// backoff until max_attempts, then dead-lettered; a panic is a retryable
// failure; Permanent and asynq.SkipRetry dead-letter at once. Attempt
// numbers reach the handler, the job records count the attempts and log
// the errors, and asynq never retries or archives a task: the wrapper
// returned nil every time.
func TestFailuresGoThroughSluice(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const tenant = "acme"
	e.policy(tenant, store.Overrides{RateUS: p64(10_000), Concurrency: p64(10), MaxAttempts: p64(3),
		MinBackoffUS: p64(20_000), MaxBackoffUS: p64(50_000), Adaptive: p64(0)})
	rec := newRecorder(func(_ context.Context, c call, n int) error {
		switch c.payload {
		case `{"kind":"fail"}`:
			return errors.New("upstream said 500")
		case `{"kind":"panic-once"}`:
			if n == 1 {
				panic("handler bug")
			}
			return nil
		case `{"kind":"permanent"}`:
			return sluicetask.Permanent(errors.New("no such address"))
		case `{"kind":"skip"}`:
			return fmt.Errorf("unknown user: %w", asynq.SkipRetry)
		}
		return nil
	})
	e.startServer(4, rec.ProcessTask)
	e.startDispatcher()
	ids := e.enqueue(tenant, `{"kind":"fail"}`, `{"kind":"panic-once"}`, `{"kind":"permanent"}`, `{"kind":"skip"}`)
	fail, panicOnce, permanent, skip := ids[0], ids[1], ids[2], ids[3]

	j := e.waitState(fail, store.StateDead, 30*time.Second)
	var numbers []int
	for _, c := range rec.callsOf(fail) {
		numbers = append(numbers, c.job.Attempt)
	}
	if !slices.Equal(numbers, []int{1, 2, 3}) || j.Attempt != 3 || len(j.Attempts) != 3 {
		t.Errorf("failing job: handler saw attempts %v, record %d attempts, log %+v; want 1, 2, 3 then dead", numbers, j.Attempt, j.Attempts)
	}
	for _, a := range j.Attempts {
		if a.Outcome != "retry" || a.Error != "upstream said 500" {
			t.Errorf("failing job's log entry %+v, want retry \"upstream said 500\"", a)
		}
	}

	j = e.waitState(panicOnce, store.StateSucceeded, 30*time.Second)
	if n := len(rec.callsOf(panicOnce)); n != 2 || j.Attempt != 2 || len(j.Attempts) != 2 || j.Attempts[0].Error != "panic" {
		t.Errorf("panicking job: %d calls, record %d attempts, log %+v; want a retried panic then success", n, j.Attempt, j.Attempts)
	}
	for _, c := range []struct{ id, msg string }{{permanent, "no such address"}, {skip, "unknown user: skip retry for the task"}} {
		j = e.waitState(c.id, store.StateDead, 30*time.Second)
		if n := len(rec.callsOf(c.id)); n != 1 || j.Attempt != 1 || len(j.Attempts) != 1 ||
			j.Attempts[0].Outcome != "permanent" || j.Attempts[0].Error != c.msg {
			t.Errorf("job %s: %d calls, record %d attempts, log %+v; want one permanent failure %q", c.id, n, j.Attempt, j.Attempts, c.msg)
		}
	}
	dead, _, err := e.st.DeadLetters(e.ctx, tenant, "", 10)
	if err != nil || len(dead) != 3 {
		t.Errorf("dead letters: %d (%v), want 3", len(dead), err)
	}

	insp := asynq.NewInspectorFromRedisClient(e.rdb)
	q, err := insp.GetQueueInfo(e.queue)
	if err != nil {
		t.Fatal(err)
	}
	if q.Retry != 0 || q.Archived != 0 || q.Failed != 0 {
		t.Errorf("asynq queue: %d retrying, %d archived, %d failed; want 0: Sluice owns retries", q.Retry, q.Archived, q.Failed)
	}
}

// TestThrottledPausesTheTenant: a handler returning Throttled(1h) pauses
// the tenant for an hour and returns the job to its backlog without using an
// attempt; nothing of the tenant runs during the pause; after a resume the
// job runs again as attempt 1 and succeeds.
func TestThrottledPausesTheTenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const tenant = "acme"
	e.policy(tenant, store.Overrides{RateUS: p64(10_000), Adaptive: p64(0)})
	rec := newRecorder(func(_ context.Context, c call, n int) error {
		if c.payload == `{"n":1}` && n == 1 {
			return sluicetask.Throttled(time.Hour)
		}
		return nil
	})
	e.startServer(4, rec.ProcessTask)
	e.startDispatcher()
	id := e.enqueue(tenant, `{"n":1}`)[0]

	var st store.TenantState
	redistest.PollMsg(t, 30*time.Second, func() (bool, string) {
		var err error
		if st, err = e.st.TenantState(e.ctx, tenant); err != nil {
			t.Fatal(err)
		}
		return !st.PausedUntil.IsZero(), "tenant not paused"
	})
	if d := st.PausedUntil.Sub(st.Now); d < time.Hour-time.Minute || d > time.Hour {
		t.Fatalf("tenant paused for %s, want the hour the handler asked for", d)
	}
	j := e.waitState(id, store.StateQueued, 10*time.Second)
	if j.Attempt != 0 || len(j.Attempts) != 1 || j.Attempts[0].Outcome != "throttled" {
		t.Fatalf("after the throttle: %d attempts used, log %+v; want none used, one throttled entry", j.Attempt, j.Attempts)
	}
	second := e.enqueue(tenant, `{"n":2}`)[0]
	redistest.Hold(t, 300*time.Millisecond, "a job of the paused tenant ran", func() bool { return len(rec.all()) == 1 })

	if err := e.st.Resume(e.ctx, tenant); err != nil {
		t.Fatal(err)
	}
	j = e.waitState(id, store.StateSucceeded, 30*time.Second)
	e.waitState(second, store.StateSucceeded, 30*time.Second)
	calls := rec.callsOf(id)
	if len(calls) != 2 || calls[1].job.Attempt != 1 || j.Attempt != 1 {
		t.Fatalf("after the resume: %d calls (%+v), record %d attempts; want the second call as attempt 1", len(calls), calls, j.Attempt)
	}
}

// TestTaskWithoutSluiceHeadersPassesThrough: a plain asynq task on the same
// queue reaches the handler untouched (type, payload, no headers, no Job in
// its context), and the handler's error goes back to asynq as it is.
func TestTaskWithoutSluiceHeadersPassesThrough(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rec := newRecorder(func(context.Context, call, int) error { return errors.New("plain failure") })
	e.startServer(2, rec.ProcessTask)
	client := asynq.NewClientFromRedisClient(e.rdb)
	if _, err := client.EnqueueContext(e.ctx, asynq.NewTask("email:send", []byte(`{"plain":true}`)),
		asynq.Queue(e.queue), asynq.MaxRetry(0)); err != nil {
		t.Fatal(err)
	}
	insp := asynq.NewInspectorFromRedisClient(e.rdb)
	redistest.PollMsg(t, 10*time.Second, func() (bool, string) {
		q, err := insp.GetQueueInfo(e.queue)
		if err != nil {
			t.Fatal(err)
		}
		return q.Archived == 1, fmt.Sprintf("asynq queue: %d archived, want the failed plain task", q.Archived)
	})
	calls := rec.all()
	if len(calls) != 1 || calls[0].taskType != "email:send" || calls[0].payload != `{"plain":true}` ||
		len(calls[0].headers) != 0 || calls[0].isJob {
		t.Fatalf("handler calls %+v, want the plain task once, untouched", calls)
	}
}
