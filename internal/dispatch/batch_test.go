package dispatch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// Property: batches hands off every release once, in send-time order, each
// batch within the size and span bounds, and starts a new batch only when
// the last one is full or the next job is past its span.
func TestBatchesAreOrderedBoundedAndFew(t *testing.T) {
	t.Parallel()
	t0 := time.UnixMicro(1772366400000000)
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 300).Draw(rt, "jobs")
		maxJobs := rapid.IntRange(1, 70).Draw(rt, "max")
		span := time.Duration(rapid.IntRange(1, 120_000).Draw(rt, "span µs")) * time.Microsecond
		rels := make([]wire.Release, n)
		for i := range rels {
			at := t0.Add(time.Duration(rapid.IntRange(0, 150_000).Draw(rt, "send µs")) * time.Microsecond)
			rels[i] = wire.Release{ID: fmt.Sprintf("j%d", i), Gen: int64(i%3 + 1), Type: wire.TypeWebhook, Slot: at, SendAt: at}
		}
		byID := map[string]wire.Release{}
		for _, r := range rels {
			byID[r.ID] = r
		}
		got := batches(5, slices.Clone(rels), maxJobs, span)
		seen := map[string]bool{}
		var last int64
		for i, b := range got {
			if b.Shard != 5 || len(b.Jobs) == 0 || len(b.Jobs) > maxJobs {
				rt.Fatalf("batch %d: shard %d, %d jobs (max %d)", i, b.Shard, len(b.Jobs), maxJobs)
			}
			first := b.Jobs[0].SlotUS
			if w := time.Duration(b.Jobs[len(b.Jobs)-1].SlotUS-first) * time.Microsecond; w > span {
				rt.Fatalf("batch %d spans %s > %s", i, w, span)
			}
			if i > 0 {
				prev := got[i-1]
				if len(prev.Jobs) < maxJobs && time.Duration(first-prev.Jobs[0].SlotUS)*time.Microsecond <= span {
					rt.Fatalf("batch %d started although batch %d (%d jobs) had room and span", i, i-1, len(prev.Jobs))
				}
			}
			for _, p := range b.Jobs {
				r := byID[p.ID]
				if seen[p.ID] || p.Gen != r.Gen || p.SlotUS != r.SendAt.UnixMicro() || p.SlotUS < last {
					rt.Fatalf("job %+v: twice, wrong gen or send time, or out of order (after %d)", p, last)
				}
				seen[p.ID], last = true, p.SlotUS
			}
		}
		if len(seen) != n {
			rt.Fatalf("%d of %d jobs handed off", len(seen), n)
		}
	})
}

// handoffEnv is a Dispatcher (not started) whose hand-off goes to a real
// asynq on the test's Redis, and an inspector of it.
func handoffEnv(t *testing.T, cfg func(*Config)) (*Dispatcher, *asynq.Inspector) {
	t.Helper()
	rdb, prefix := redistest.New(t)
	c := Config{Store: newFakeStore(8), Asynq: asynq.NewClientFromRedisClient(rdb), Redis: rdb, Prefix: prefix,
		Registerer: prometheus.NewRegistry()}
	if cfg != nil {
		cfg(&c)
	}
	d, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return d, asynq.NewInspectorFromRedisClient(rdb)
}

func pending(t *testing.T, in *asynq.Inspector, queue string) []*asynq.TaskInfo {
	t.Helper()
	tasks, err := in.ListPendingTasks(queue, asynq.PageSize(1000))
	if errors.Is(err, asynq.ErrQueueNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("list pending tasks of %s: %v", queue, err)
	}
	return tasks
}

// A pass's webhook and http releases become few batch tasks on the shard's
// hand-off queue — every job once, bounded, with the contract's id,
// retries and timeout — and the queue's name is published once; a task job
// stays one task on its producer's queue; the same hand-off again
// conflicts and adds nothing.
func TestHandoffEnqueuesBatchesAndAnnouncesTheQueue(t *testing.T) {
	t.Parallel()
	d, in := handoffEnv(t, func(c *Config) { c.BatchMax = 8 })
	ctx := context.Background()
	sub := d.cfg.Redis.Subscribe(ctx, wire.HandoffChannel(d.cfg.Prefix))
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	t0 := time.UnixMicro(time.Now().UnixMicro())
	var rels []wire.Release
	for i := range 30 { // 30 jobs over 60ms, newest first, one of them 3.5s late
		at := t0.Add(time.Duration(29-i) * 2 * time.Millisecond)
		r := wire.Release{ID: fmt.Sprintf("j%02d", i), Tenant: "acme", Type: wire.TypeWebhook, Gen: 2, Slot: at, SendAt: at, Timeout: 5 * time.Second}
		if i%2 == 1 {
			r.Type = wire.TypeHTTP
		}
		if i == 10 {
			r.SendAt = at.Add(3500 * time.Millisecond)
		}
		rels = append(rels, r)
	}
	rels = append(rels, wire.Release{ID: "t1", Tenant: "acme", Type: wire.TypeTask, Gen: 4, Slot: t0, SendAt: t0,
		Timeout: time.Second, Queue: d.cfg.Prefix + "-emails", TaskType: "email:send"})

	d.handoff(ctx, 3, slices.Clone(rels))

	queue := wire.HandoffQueueOf(d.cfg.Prefix, 3)
	tasks := pending(t, in, queue)
	// 8 a batch, span L = 50ms: [0,14ms] [16,30] [32,46] [48,58] and the late one.
	if len(tasks) != 5 {
		t.Fatalf("%d batch tasks on %s, want 5", len(tasks), queue)
	}
	seen := map[string]bool{}
	for _, ti := range tasks {
		b, err := wire.DecodeBatch(ti.Payload)
		if err != nil {
			t.Fatal(err)
		}
		wantTimeout := wire.TaskTimeout(d.cfg.Pass.Lead, 5*time.Second, d.cfg.Pass.Grace) // 7s
		if len(b.Jobs) == 1 && b.Jobs[0].ID == "j10" {
			wantTimeout = 10 * time.Second // ⌈0.2 + 5 + 1 + its 3.5s of lateness⌉
		}
		if ti.Type != wire.TaskTypeBatch || ti.ID != batchTaskID(b) || ti.MaxRetry != 0 || ti.Timeout != wantTimeout || b.Shard != 3 {
			t.Errorf("task %s: type %s, retries %d, timeout %s (want %s), shard %d", ti.ID, ti.Type, ti.MaxRetry, ti.Timeout, wantTimeout, b.Shard)
		}
		if len(b.Jobs) > 8 || b.Jobs[len(b.Jobs)-1].SlotUS-b.Jobs[0].SlotUS > d.cfg.BatchSpan.Microseconds() {
			t.Errorf("batch %s: %d jobs spanning %dµs", ti.ID, len(b.Jobs), b.Jobs[len(b.Jobs)-1].SlotUS-b.Jobs[0].SlotUS)
		}
		for _, p := range b.Jobs {
			if seen[p.ID] || p.Gen != 2 {
				t.Errorf("job %+v twice or with the wrong gen", p)
			}
			seen[p.ID] = true
		}
	}
	if len(seen) != 30 {
		t.Fatalf("%d of 30 jobs in the batches", len(seen))
	}
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil || msg.Payload != queue {
		t.Fatalf("hand-off announcement %v, %v; want %q", msg, err, queue)
	}
	tj := pending(t, in, d.cfg.Prefix+"-emails")
	if len(tj) != 1 || tj[0].Type != "email:send" || tj[0].ID != "t1:4" || len(tj[0].Payload) != 0 {
		t.Fatalf("task jobs' queue holds %v, want the one task t1:4", tj)
	}
	if j, b := testutil.ToFloat64(d.metrics.handoffJobs.WithLabelValues(queue)), testutil.ToFloat64(d.metrics.handoffBatches.WithLabelValues(queue)); j != 30 || b != 5 {
		t.Fatalf("hand-off metrics of %s: %v jobs, %v batches; want 30, 5", queue, j, b)
	}
	if j := testutil.ToFloat64(d.metrics.handoffJobs.WithLabelValues("task")); j != 1 {
		t.Fatalf("task jobs handed off: %v, want 1", j)
	}

	d.handoff(ctx, 3, slices.Clone(rels)) // a repeat: every id conflicts
	if n, m := len(pending(t, in, queue)), len(pending(t, in, d.cfg.Prefix+"-emails")); n != 5 || m != 1 {
		t.Fatalf("after a repeated hand-off: %d batches, %d tasks; want 5 and 1", n, m)
	}
	if e := testutil.ToFloat64(d.metrics.enqueueErrors); e != 0 {
		t.Fatalf("%v enqueue errors; a conflict is no error", e)
	}
}

// Passes on the real store hand every released job to asynq in batches on
// the shard's hand-off queue, far fewer tasks than jobs, each within its
// bounds.
func TestPassesHandOffEveryJobInBatches(t *testing.T) {
	t.Parallel()
	rdb, prefix, st := realStore(t, 1, 10_000)
	ctx := context.Background()
	const tenants, perTenant = 4, 50
	for i := range tenants {
		tn := fmt.Sprintf("t%d", i)
		if _, err := st.PutTenantPolicy(ctx, tn, store.Overrides{RateUS: ptrInt(1000), Burst: ptrInt(10), Concurrency: ptrInt(1000)}, 0); err != nil {
			t.Fatal(err)
		}
		items := make([]store.Item, perTenant)
		for j := range items {
			items[j] = store.Item{Type: wire.TypeWebhook, Body: []byte(`{}`)}
		}
		if _, err := st.Enqueue(ctx, tn, items); err != nil {
			t.Fatal(err)
		}
	}
	d := start(t, Config{Store: st, Asynq: asynq.NewClientFromRedisClient(rdb), Redis: rdb, Prefix: prefix,
		BatchMax: 32, Pass: store.PassConfig{Grace: time.Minute}, Registerer: prometheus.NewRegistry()})
	in := asynq.NewInspectorFromRedisClient(rdb)
	queue := wire.HandoffQueueOf(prefix, 0)
	var tasks []*asynq.TaskInfo
	jobs := map[string]bool{}
	redistest.PollMsg(t, 10*time.Second, func() (bool, string) {
		tasks, jobs = pending(t, in, queue), map[string]bool{}
		for _, ti := range tasks {
			b, err := wire.DecodeBatch(ti.Payload)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range b.Jobs {
				jobs[p.ID] = true
			}
		}
		return len(jobs) == tenants*perTenant, fmt.Sprintf("%d of %d jobs in %d batches", len(jobs), tenants*perTenant, len(tasks))
	})
	d.Stop()
	for _, ti := range tasks {
		b, _ := wire.DecodeBatch(ti.Payload)
		if n := len(b.Jobs); n > 32 || time.Duration(b.Jobs[n-1].SlotUS-b.Jobs[0].SlotUS)*time.Microsecond > d.cfg.BatchSpan {
			t.Errorf("batch %s: %d jobs spanning %dµs", ti.ID, n, b.Jobs[n-1].SlotUS-b.Jobs[0].SlotUS)
		}
	}
	passes := testutil.ToFloat64(d.metrics.passes)
	t.Logf("%d jobs in %d batches over %v passes", len(jobs), len(tasks), passes)
	if len(tasks) > len(jobs)/5 {
		t.Fatalf("%d jobs took %d tasks: want at most a fifth as many", len(jobs), len(tasks))
	}
}
