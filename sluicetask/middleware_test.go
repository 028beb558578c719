package sluicetask_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/sluicetask"
)

// TestHeartbeatsAnnounceQueuesAndCapacity: a started middleware on two
// queues is live on each (<prefix>:mw:<queue> with its id, concurrency and
// TaskCheckInterval) and adds its concurrency once to the dispatcher's
// capacity; Stop withdraws all of it at once.
func TestHeartbeatsAnnounceQueuesAndCapacity(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	other := e.queue + "-2"
	m := e.newMiddleware(6, func(c *sluicetask.Config) { c.Queues = append(c.Queues, other) })
	if err := m.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	for _, q := range []string{e.queue, other} {
		ws, err := e.st.TaskWorkers(e.ctx, q)
		if err != nil || len(ws) != 1 || ws[0].ID != m.ID() || ws[0].Concurrency != 6 || ws[0].TaskCheckInterval != tci {
			t.Fatalf("queue %s: task workers %+v (%v), want %s with concurrency 6, TCI %s", q, ws, err, m.ID(), tci)
		}
		if d := time.Until(ws[0].Expiry); d < 8*time.Second || d > 10*time.Second {
			t.Errorf("queue %s: heartbeat expires in %s, want 3 intervals (9s)", q, d)
		}
	}
	if n, err := e.st.Capacity(e.ctx); err != nil || n != 6 {
		t.Fatalf("capacity %d (%v), want the concurrency 6 counted once", n, err)
	}
	if err := m.Start(e.ctx); err == nil {
		t.Fatal("second Start succeeded")
	}

	m.Stop()
	m.Stop() // idempotent
	for _, q := range []string{e.queue, other} {
		if live, err := e.st.TaskQueueLive(e.ctx, q); err != nil || live {
			t.Fatalf("queue %s after Stop: live %v (%v)", q, live, err)
		}
	}
	if n, err := e.st.Capacity(e.ctx); err != nil || n != 0 {
		t.Fatalf("capacity after Stop %d (%v), want 0", n, err)
	}
}

// TestStartReadsMetaAndChecksThePickupBudget: Start takes dispatch.min_lead
// from <prefix>:meta (a budget that fails with the stored 20ms passes with a
// faster TaskCheckInterval) and refuses a TaskCheckInterval the pickup
// budget cannot cover — asynq's default among them.
func TestStartReadsMetaAndChecksThePickupBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // meta: 4 shards, L = 50ms
	start := func(edit func(*sluicetask.Config)) error {
		m := e.newMiddleware(2, edit)
		err := m.Start(e.ctx)
		t.Cleanup(m.Stop)
		return err
	}
	if err := start(func(c *sluicetask.Config) { c.TaskCheckInterval = 0 }); err == nil ||
		!strings.Contains(err.Error(), "1.5 × worker.task_check_interval (1s)") {
		t.Errorf("asynq's default TaskCheckInterval: %v, want the pickup budget refused", err)
	}

	rdb, prefix := redistest.New(t)
	if _, err := store.EnsureMeta(e.ctx, rdb, wire.Meta{Prefix: prefix, Shards: 2, Lead: 40 * time.Millisecond, MinLead: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	e2 := &env{t: t, ctx: e.ctx, rdb: rdb, prefix: prefix, queue: prefix + "-tasks"}
	m := e2.newMiddleware(2, nil) // TCI 20ms: needs 30ms + 2 RTT
	if err := m.Start(e.ctx); err == nil || !strings.Contains(err.Error(), "dispatch.min_lead 20ms") {
		t.Fatalf("stored L 20ms with TCI 20ms: %v, want the budget refused", err)
	}
	m = e2.newMiddleware(2, func(c *sluicetask.Config) { c.TaskCheckInterval = 5 * time.Millisecond })
	if err := m.Start(e.ctx); err != nil {
		t.Fatalf("stored L 20ms with TCI 5ms: %v", err)
	}
	m.Stop()
}

// TestStartRetriesAfterAFailure: a refused Start can be retried on the same
// Middleware: the retry fails for the same reason, not over the metrics
// the first attempt registered.
func TestStartRetriesAfterAFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // meta: L = 50ms
	// TCI 40ms needs L ≥ 60ms + 2 RTT.
	m := e.newMiddleware(2, func(c *sluicetask.Config) { c.TaskCheckInterval = 40 * time.Millisecond })
	t.Cleanup(m.Stop)
	for i := range 2 {
		if err := m.Start(e.ctx); err == nil || !strings.Contains(err.Error(), "dispatch.min_lead 50ms") {
			t.Fatalf("start %d: %v, want the pickup budget refused", i+1, err)
		}
	}
	if live, _ := e.st.TaskQueueLive(e.ctx, e.queue); live {
		t.Fatal("a refused Start announced the queue")
	}
}

// TestNewRejectsBadConfig lists every problem at once.
func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	_, err := sluicetask.New(sluicetask.Config{Queues: []string{"a", "{b}", "a", ""}, Concurrency: -1, HeartbeatInterval: -time.Second})
	for _, want := range []string{"Redis is required", `Queues[1] "{b}"`, `Queues[2] "a": duplicate`, `Queues[3] ""`,
		"Concurrency -1", "HeartbeatInterval -1s"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not say %q", err, want)
		}
	}
	rdb, _ := redistest.New(t)
	if _, err := sluicetask.New(sluicetask.Config{Redis: rdb}); err == nil || !strings.Contains(err.Error(), "Queues") {
		t.Errorf("no queues: %v", err)
	}
}

// TestWrapHeaderHandling: without any sluice header a task reaches next
// untouched, even before Start; a Sluice job before Start is an error
// wrapping ErrNotStarted; after Start, malformed sluice headers are an error
// and run nothing; a well-formed one for a job that does not exist is
// dropped (nil) without running next.
func TestWrapHeaderHandling(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rec := newRecorder(nil)
	m := e.newMiddleware(2, nil)
	h := m.Wrap(rec)
	plain := asynq.NewTaskWithHeaders("email:send", []byte(`{"x":1}`), map[string]string{"trace": "abc"})
	if err := h.ProcessTask(e.ctx, plain); err != nil {
		t.Fatal(err)
	}
	if c := rec.all(); len(c) != 1 || c[0].payload != `{"x":1}` || c[0].headers["trace"] != "abc" || c[0].isJob {
		t.Fatalf("plain task reached next as %+v", c)
	}
	job := asynq.NewTaskWithHeaders("email:send", nil, map[string]string{
		wire.HeaderJob: "j1_01KJMMA2G0WAAKMBBJK9MDDZKB", wire.HeaderGen: "1", wire.HeaderSlot: "1",
	})
	if err := h.ProcessTask(e.ctx, job); !errors.Is(err, sluicetask.ErrNotStarted) {
		t.Fatalf("job before Start: %v, want ErrNotStarted", err)
	}

	if err := m.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	for _, headers := range []map[string]string{
		{wire.HeaderJob: "j1_01KJMMA2G0WAAKMBBJK9MDDZKB"},
		{wire.HeaderGen: "2", wire.HeaderSlot: "1700000000000000"},
		{wire.HeaderJob: "j1_01KJMMA2G0WAAKMBBJK9MDDZKB", wire.HeaderGen: "0", wire.HeaderSlot: "1700000000000000"},
		{wire.HeaderJob: "j1_01KJMMA2G0WAAKMBBJK9MDDZKB", wire.HeaderGen: "1", wire.HeaderSlot: "soon"},
	} {
		err := h.ProcessTask(e.ctx, asynq.NewTaskWithHeaders("email:send", nil, headers))
		if !errors.Is(err, wire.ErrBadPayload) {
			t.Errorf("headers %v: %v, want a malformed-headers error", headers, err)
		}
	}
	// A past slot: the claim runs at once and finds no such job.
	if err := h.ProcessTask(e.ctx, job); err != nil {
		t.Fatalf("unknown job: %v, want nil (a duplicate to drop)", err)
	}
	if n := len(rec.all()); n != 1 {
		t.Fatalf("next ran %d times, want only the plain task", n)
	}
}
