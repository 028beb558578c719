package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/internal/worker"
)

// releaseTaskJob enqueues one task job for tenant and releases it with a
// pass; it returns the release and its asynq task as the dispatcher builds
// it (the protocol in the headers, no payload).
func (h *harness) releaseTaskJob(tenant string, payload string) (wire.Release, *asynq.Task) {
	h.t.Helper()
	spec := job.Spec{Type: wire.TypeTask, TaskType: "email:send", Queue: "default", Payload: json.RawMessage(payload)}
	rs, err := h.st.Enqueue(h.ctx, tenant, []store.Item{{Type: wire.TypeTask, Body: spec.Canonical()}})
	if err != nil || rs[0].Outcome != store.Accepted {
		h.t.Fatalf("enqueue: %v %+v", err, rs)
	}
	shard, _ := store.ShardOfJobID(rs[0].ID)
	res, err := h.st.Pass(h.ctx, shard, store.PassConfig{Capacity: -1})
	if err != nil || len(res.Released) != 1 || res.Released[0].ID != rs[0].ID {
		h.t.Fatalf("pass: %v %+v", err, res.Released)
	}
	r := res.Released[0]
	return r, asynq.NewTaskWithHeaders(r.TaskType, nil, map[string]string{
		wire.HeaderJob:  r.ID,
		wire.HeaderGen:  strconv.FormatInt(r.Gen, 10),
		wire.HeaderSlot: strconv.FormatInt(r.Slot.UnixMicro(), 10),
	})
}

type ctxKey struct{}

// recordingExecutor records the jobs it runs and the ctx value under ctxKey.
type recordingExecutor struct {
	mu     sync.Mutex
	jobs   []store.ClaimedJob
	values []any
}

func (e *recordingExecutor) Execute(ctx context.Context, cj store.ClaimedJob) wire.AttemptOutcome {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.jobs, e.values = append(e.jobs, cj), append(e.values, ctx.Value(ctxKey{}))
	return wire.AttemptOutcome{Kind: wire.FinishSuccess}
}

// TestTaskJobIsClaimedFromItsHeaders: ProcessTaskJob reads the protocol
// from the headers, claims, hands the executor the call names the stored
// body with the caller's ctx values, and finishes; a second delivery of the same task is
// dropped by the generation fence.
func TestTaskJobIsClaimedFromItsHeaders(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2)
	exec := &recordingExecutor{}
	w := h.newWorker(&recordingExecutor{}, nil) // not the one the call names
	r, task := h.releaseTaskJob("t1", `{"to":"a@example.com"}`)
	ctx := context.WithValue(h.ctx, ctxKey{}, "handler")
	for range 2 {
		if err := w.ProcessTaskJob(ctx, task, exec); err != nil {
			t.Fatalf("ProcessTaskJob: %v", err)
		}
	}
	if len(exec.jobs) != 1 || exec.values[0] != "handler" {
		t.Fatalf("executor ran %d times with ctx values %v, want once with the caller's", len(exec.jobs), exec.values)
	}
	got := exec.jobs[0]
	spec, err := job.Parse(got.Body)
	if err != nil || got.ID != r.ID || got.Type != wire.TypeTask || got.Attempt != 1 ||
		spec.TaskType != "email:send" || string(spec.Payload) != `{"to":"a@example.com"}` {
		t.Fatalf("claimed job %+v (body %s, %v)", got, got.Body, err)
	}
	if j := h.jobOf(r.ID); j.State != store.StateSucceeded || j.Attempt != 1 {
		t.Fatalf("job after the attempt: %s, attempt %d", j.State, j.Attempt)
	}
}

// TestTaskJobWithMalformedHeadersIsAnError: a task whose sluice headers do
// not parse is returned as an error wrapping wire.ErrBadPayload (asynq
// archives it for inspection) and runs nothing.
func TestTaskJobWithMalformedHeadersIsAnError(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2)
	exec := &recordingExecutor{}
	w := h.newWorker(exec, nil)
	for _, headers := range []map[string]string{
		{wire.HeaderJob: "j1_01KJMMA2G0WAAKMBBJK9MDDZKB"},
		{wire.HeaderJob: "j1_01KJMMA2G0WAAKMBBJK9MDDZKB", wire.HeaderGen: "x", wire.HeaderSlot: "1"},
		{wire.HeaderGen: "1", wire.HeaderSlot: "1"},
	} {
		err := w.ProcessTaskJob(h.ctx, asynq.NewTaskWithHeaders("email:send", nil, headers), nil)
		if !errors.Is(err, wire.ErrBadPayload) {
			t.Errorf("headers %v: %v, want ErrBadPayload", headers, err)
		}
	}
	if len(exec.jobs) != 0 {
		t.Fatalf("executor ran %d jobs", len(exec.jobs))
	}
}

// TestAnnounceReplacesTheHeartbeat: a Worker with an Announce hook
// announces through it — its concurrency and three intervals at Start, 0
// and 1 s at Stop — and writes nothing to <prefix>:workers itself.
func TestAnnounceReplacesTheHeartbeat(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2)
	type announcement struct {
		concurrency int
		ttl         time.Duration
	}
	var mu sync.Mutex
	var got []announcement
	w, err := worker.New(worker.Config{Store: h.st, Redis: h.rdb, Executor: &recordingExecutor{}, Prefix: h.prefix,
		Concurrency: 5, HeartbeatInterval: time.Hour, Logger: testLogger(t),
		Announce: func(_ context.Context, concurrency int, ttl time.Duration) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, announcement{concurrency, ttl})
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(h.ctx); err != nil {
		t.Fatal(err)
	}
	w.Stop()
	want := []announcement{{5, 3 * time.Hour}, {0, time.Second}}
	if !slices.Equal(got, want) {
		t.Fatalf("announcements %v, want %v", got, want)
	}
	if n, err := h.st.Capacity(h.ctx); err != nil || n != 0 {
		t.Fatalf("capacity %d (%v): the Worker wrote its own heartbeat", n, err)
	}
}

var _ worker.Executor = (*recordingExecutor)(nil)
