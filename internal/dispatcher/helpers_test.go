package dispatcher

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// passCall is one Pass a fakeStore saw.
type passCall struct {
	shard int
	cfg   dispatch.PassConfig
	at    time.Time
}

// fakeStore stands in for dispatch.Store in the loop tests (leases, wake-ups,
// back-pressure): it records passes and answers with result(shard, n), n
// counting the shard's passes from 0. Safe for concurrent use.
type fakeStore struct {
	shards             int
	capacity, inFlight int
	result             func(shard, n int) dispatch.PassResult

	mu       sync.Mutex
	calls    []passCall
	unserved map[string]bool // task queues without a live middleware
	seen     chan struct{}   // receives (without blocking) on every pass
}

func newFakeStore(shards int) *fakeStore {
	return &fakeStore{shards: shards, capacity: 100, seen: make(chan struct{}, 1)}
}

func (f *fakeStore) Shards() int { return f.shards }

func (f *fakeStore) Pass(_ context.Context, shard int, cfg dispatch.PassConfig) (dispatch.PassResult, error) {
	f.mu.Lock()
	n := 0
	for _, c := range f.calls {
		if c.shard == shard {
			n++
		}
	}
	f.calls = append(f.calls, passCall{shard: shard, cfg: cfg, at: time.Now()})
	f.mu.Unlock()
	select {
	case f.seen <- struct{}{}:
	default:
	}
	if f.result != nil {
		return f.result(shard, n), nil
	}
	return dispatch.PassResult{Now: time.Now()}, nil
}

func (f *fakeStore) FreeCapacity(context.Context) (int, error) {
	return max(f.capacity-f.inFlight, 0), nil
}

// TaskQueueLive: every task queue is served, unless listed in unserved.
func (f *fakeStore) TaskQueueLive(_ context.Context, queue string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.unserved[queue], nil
}

// passes returns a copy of the passes so far.
func (f *fakeStore) passes() []passCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]passCall(nil), f.calls...)
}

func (f *fakeStore) count(shard int) int {
	n := 0
	for _, c := range f.passes() {
		if c.shard == shard {
			n++
		}
	}
	return n
}

// enqueued returns the types of the tasks enqueued so far.
func (f *fakeAsynq) enqueued() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, t := range f.tasks {
		out = append(out, t.Type())
	}
	return out
}

// fakeAsynq records enqueued tasks and how long each enqueue's ctx had
// left.
type fakeAsynq struct {
	mu    sync.Mutex
	tasks []*asynq.Task
	left  []time.Duration // until the ctx's deadline (0: none)
}

func (f *fakeAsynq) EnqueueContext(ctx context.Context, t *asynq.Task, _ ...asynq.Option) (*asynq.TaskInfo, error) {
	var left time.Duration
	if dl, ok := ctx.Deadline(); ok {
		left = time.Until(dl)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tasks = append(f.tasks, t)
	f.left = append(f.left, left)
	return &asynq.TaskInfo{}, nil
}

// start builds and starts a Dispatcher, stopped when t ends.
func start(t *testing.T, cfg Config) *Dispatcher {
	t.Helper()
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return d
}

// eventually is redistest.Poll.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	redistest.Poll(t, within, what, cond)
}

// publish sends a wake-up for shard at us.
func publish(t *testing.T, rdb redis.UniversalClient, prefix string, shard int, us int64) {
	t.Helper()
	if err := rdb.Publish(context.Background(), wakeChannel(prefix, shard), us).Err(); err != nil {
		t.Fatal(err)
	}
}
