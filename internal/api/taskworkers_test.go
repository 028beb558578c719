package api

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/store"
)

// liveTaskWorker announces a sluicetask middleware on queue for an hour of
// the store's time.
func (f *fixture) liveTaskWorker(t *testing.T, queue string) {
	t.Helper()
	if err := f.srv.opts.Store.TaskHeartbeat(context.Background(), queue, "test-"+queue, 4, 20*time.Millisecond, time.Hour); err != nil {
		t.Fatal(err)
	}
}

// testClock is a settable clock, safe for concurrent use.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

const taskJob = `{"type":"task","task_type":"email:send","queue":"default","payload":{"to":"a@example.com"}}`

// requireNoTaskWorker checks a 422 no_task_worker naming queue.
func requireNoTaskWorker(t *testing.T, r response, queue string) {
	t.Helper()
	e, _ := r.body["error"].(map[string]any)
	msg, _ := e["message"].(string)
	if r.status != http.StatusUnprocessableEntity || errorCode(r) != CodeNoTaskWorker ||
		!strings.Contains(msg, `"`+queue+`"`) || !strings.Contains(msg, "sluicetask") {
		t.Fatalf("got %d %v, want 422 no_task_worker naming queue %q and the sluicetask middleware", r.status, r.body, queue)
	}
}

// TestEnqueueTaskJobNeedsALiveTaskWorker (docs/design.md §2.5): a task job for a
// queue without a live middleware heartbeat is refused with 422
// no_task_worker and changes nothing; with one it is accepted; once the
// heartbeat expires (store time) it is refused again. In a batch only that
// item is refused. The answer is cached per queue for the cache TTL, both
// ways.
func TestEnqueueTaskJobNeedsALiveTaskWorker(t *testing.T) {
	t.Parallel()
	storeClock := &testClock{t: time.Now()}
	f := newStoreFixture(t, func(o *Options, rdb redis.UniversalClient, prefix string) {
		st, err := store.NewStore(rdb, store.Config{Prefix: prefix, Shards: 4, Clock: storeClock.Now})
		if err != nil {
			t.Fatal(err)
		}
		o.Store, o.TaskQueues = st, []string{"default", "mail"}
	})
	cacheClock := &testClock{t: time.Now()}
	f.srv.taskWorkers.Clock = cacheClock.Now
	ctx, st := context.Background(), f.srv.opts.Store
	const jobs, bat = "/v1/tenants/acme-t/jobs", "/v1/tenants/acme-t/jobs:batch"

	requireNoTaskWorker(t, f.post(t, jobs, producerToken, taskJob), "default")
	if ts := f.tenant(t, "acme-t"); ts["backlog"] != 0.0 || ts["admit_tokens"] != 1000.0 {
		t.Fatalf("after a no_task_worker refusal the tenant changed: %v", ts)
	}
	if err := st.TaskHeartbeat(ctx, "default", "w1", 4, 20*time.Millisecond, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	requireNoTaskWorker(t, f.post(t, jobs, producerToken, taskJob), "default") // "not live" is cached
	cacheClock.Advance(TaskWorkerCacheDefault)
	requireAccepted(t, f.post(t, jobs, producerToken, taskJob), "acme-t", "queued")

	// A batch: the task item for "mail" (allowed, but served by no one) is
	// refused on its own.
	mailJob := strings.Replace(taskJob, `"default"`, `"mail"`, 1)
	r := f.post(t, bat, producerToken, batch(taskJob, mailJob, webhookJob))
	res := results(t, r)
	if r.status != http.StatusAccepted || res[0]["status"] != 202.0 || res[2]["status"] != 202.0 ||
		res[1]["status"] != 422.0 || res[1]["error"].(map[string]any)["code"] != CodeNoTaskWorker ||
		!strings.Contains(res[1]["error"].(map[string]any)["message"].(string), `"mail"`) {
		t.Fatalf("batch: %d %v, want 202 with item 1 refused no_task_worker", r.status, r.body)
	}

	// The heartbeat expires in the store's time: refused again once the
	// cached answer is older than the TTL.
	storeClock.Advance(10 * time.Second)
	requireAccepted(t, f.post(t, jobs, producerToken, taskJob), "acme-t", "queued") // "live" is cached
	cacheClock.Advance(TaskWorkerCacheDefault)
	requireNoTaskWorker(t, f.post(t, jobs, producerToken, taskJob), "default")
	r = f.post(t, bat, producerToken, batch(taskJob))
	if res := results(t, r); r.status != http.StatusUnprocessableEntity || errorCode(r) != CodeNoTaskWorker ||
		res[0]["status"] != 422.0 {
		t.Fatalf("batch of one refused item: %d %v, want 422 no_task_worker", r.status, r.body)
	}
	if ts := f.tenant(t, "acme-t"); ts["backlog"] != 4.0 {
		t.Fatalf("tenant backlog %v, want the 4 accepted jobs", ts["backlog"])
	}
}

// TestTaskWorkerCacheOff: with a negative TTL every enqueue asks Redis, so a
// withdrawn middleware is seen at once.
func TestTaskWorkerCacheOff(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, func(o *Options, _ redis.UniversalClient, _ string) { o.TaskWorkerCache = -1 })
	ctx, st := context.Background(), f.srv.opts.Store
	if err := st.TaskHeartbeat(ctx, "default", "w1", 4, 20*time.Millisecond, time.Hour); err != nil {
		t.Fatal(err)
	}
	requireAccepted(t, f.post(t, "/v1/tenants/acme-t/jobs", producerToken, taskJob), "acme-t", "queued")
	if err := st.TaskWithdraw(ctx, "default", "w1"); err != nil {
		t.Fatal(err)
	}
	requireNoTaskWorker(t, f.post(t, "/v1/tenants/acme-t/jobs", producerToken, taskJob), "default")
}

// TestTaskJobReplayAnswersWithoutALiveWorker: a task request accepted under
// an idempotency key gets its original 202 (Idempotent-Replayed) when it is
// retried after the queue's last middleware went away; a new key, or a
// batch item with a new key, is still refused with no_task_worker and
// leaves no key behind.
func TestTaskJobReplayAnswersWithoutALiveWorker(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, func(o *Options, _ redis.UniversalClient, _ string) { o.TaskWorkerCache = -1 })
	ctx, st := context.Background(), f.srv.opts.Store
	const jobs, bat = "/v1/tenants/acme-t/jobs", "/v1/tenants/acme-t/jobs:batch"
	if err := st.TaskHeartbeat(ctx, "default", "w1", 4, 20*time.Millisecond, time.Hour); err != nil {
		t.Fatal(err)
	}
	first := f.post(t, jobs, producerToken, taskJob, HeaderIdempotencyKey, "order-1")
	id := requireAccepted(t, first, "acme-t", "queued")
	itemJob := strings.Replace(taskJob, `{"type"`, `{"idempotency_key":"item-1","type"`, 1)
	if r := f.post(t, bat, producerToken, batch(itemJob)); r.status != http.StatusAccepted {
		t.Fatalf("batch with a live worker: %d %v", r.status, r.body)
	}
	if err := st.TaskWithdraw(ctx, "default", "w1"); err != nil {
		t.Fatal(err)
	}

	again := f.post(t, jobs, producerToken, taskJob, HeaderIdempotencyKey, "order-1")
	if requireAccepted(t, again, "acme-t", "queued") != id || again.header.Get(HeaderReplayed) != "true" {
		t.Fatalf("replay without a live worker: %v %v, want the original %s, replayed", again.header, again.body, id)
	}
	requireNoTaskWorker(t, f.post(t, jobs, producerToken, taskJob, HeaderIdempotencyKey, "order-2"), "default")
	r := f.post(t, bat, producerToken, batch(itemJob, strings.Replace(itemJob, "item-1", "item-2", 1)))
	res := results(t, r)
	if r.status != http.StatusAccepted || res[0]["status"] != 202.0 || res[0]["idempotent_replayed"] != true ||
		res[1]["status"] != 422.0 || res[1]["error"].(map[string]any)["code"] != CodeNoTaskWorker {
		t.Fatalf("batch without a live worker: %d %v, want item 0 replayed and item 1 no_task_worker", r.status, r.body)
	}
	if ts := f.tenant(t, "acme-t"); ts["backlog"] != 2.0 {
		t.Fatalf("tenant backlog %v, want the 2 jobs accepted while the worker lived", ts["backlog"])
	}
	// order-2 was not remembered: with a worker back it is a new job.
	if err := st.TaskHeartbeat(ctx, "default", "w2", 4, 20*time.Millisecond, time.Hour); err != nil {
		t.Fatal(err)
	}
	r = f.post(t, jobs, producerToken, taskJob, HeaderIdempotencyKey, "order-2")
	if requireAccepted(t, r, "acme-t", "queued"); r.header.Get(HeaderReplayed) != "" {
		t.Fatalf("order-2 after the worker came back: replayed %q, want a new job", r.header.Get(HeaderReplayed))
	}
}
