package dispatch

import (
	"context"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// passCall is one Pass a fakeStore saw.
type passCall struct {
	shard int
	cfg   store.PassConfig
	at    time.Time
}

// fakeStore stands in for store.Store in the loop tests (leases, wake-ups,
// back-pressure): it records passes and answers with result(shard, n), n
// counting the shard's passes from 0. Safe for concurrent use.
type fakeStore struct {
	clock              clock // the time passes are recorded at
	shards             int
	capacity, inFlight int
	finishRate         float64 // jobs ended per second (FinishRate); set before use
	result             func(shard, n int) store.PassResult
	weights            store.FairWeights // FairWeights' answer; set under mu

	mu       sync.Mutex
	calls    []passCall
	unserved map[string]bool // task queues without a live middleware
	seen     chan struct{}   // receives (without blocking) on every pass
}

func newFakeStore(shards int) *fakeStore {
	return &fakeStore{clock: realClock{}, shards: shards, capacity: 100, seen: make(chan struct{}, 1)}
}

func (f *fakeStore) Shards() int { return f.shards }

func (f *fakeStore) Pass(_ context.Context, shard int, cfg store.PassConfig) (store.PassResult, error) {
	f.mu.Lock()
	n := 0
	for _, c := range f.calls {
		if c.shard == shard {
			n++
		}
	}
	f.calls = append(f.calls, passCall{shard: shard, cfg: cfg, at: f.clock.Now()})
	f.mu.Unlock()
	select {
	case f.seen <- struct{}{}:
	default:
	}
	if f.result != nil {
		return f.result(shard, n), nil
	}
	return store.PassResult{Now: f.clock.Now()}, nil
}

func (f *fakeStore) Capacity(context.Context) (int, error) { return f.capacity, nil }
func (f *fakeStore) InFlight(context.Context) (int, error) { return f.inFlight, nil }

// FairWeights answers the weights field.
func (f *fakeStore) FairWeights(context.Context) (store.FairWeights, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.weights, nil
}

// FinishRate answers the finishRate field.
func (f *fakeStore) FinishRate(context.Context) (float64, error) { return f.finishRate, nil }

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

// fakeClock is a clock whose time moves only by Advance; its times are
// whole µs (as Redis's), so a time sent through a wake-up comes back
// equal. Safe for concurrent use.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.UnixMicro(time.Now().UnixMicro())}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) clockTimer {
	t := &fakeTimer{c: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// Advance moves the time on by d and fires the timers that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, t := range c.timers {
		t.fireIfDue()
	}
}

// AdvanceTo moves the time on to t when t is later (Redis time is
// monotone), as Advance.
func (c *fakeClock) AdvanceTo(t time.Time) {
	if d := t.Sub(c.Now()); d > 0 {
		c.Advance(d)
	}
}

// armedAt reports whether a timer is armed to fire at exactly at: a loop
// is asleep until then.
func (c *fakeClock) armedAt(at time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.timers {
		if t.armed && t.at.Equal(at) {
			return true
		}
	}
	return false
}

// fakeTimer is a fakeClock's timer; its fields are guarded by the clock's mu.
type fakeTimer struct {
	c     *fakeClock
	ch    chan time.Time
	at    time.Time
	armed bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.armed
	t.armed = false
	t.drain()
	t.c.timers = slices.DeleteFunc(t.c.timers, func(o *fakeTimer) bool { return o == t })
	return was
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.armed
	t.drain()
	if !slices.Contains(t.c.timers, t) {
		t.c.timers = append(t.c.timers, t)
	}
	t.at, t.armed = t.c.now.Add(d), true
	t.fireIfDue()
	return was
}

func (t *fakeTimer) fireIfDue() {
	if t.armed && !t.at.After(t.c.now) {
		t.armed = false
		t.ch <- t.c.now // buffered 1 and drained at every Stop and Reset
	}
}

func (t *fakeTimer) drain() {
	select {
	case <-t.ch:
	default:
	}
}

// realStore is a store.Store on a fresh key prefix with shards shards and,
// when capacity > 0, one worker announcing that capacity for an hour.
func realStore(tb testing.TB, shards, capacity int) (redis.UniversalClient, string, *store.Store) {
	tb.Helper()
	rdb, prefix := redistest.New(tb)
	st, err := store.NewStore(rdb, store.Config{Prefix: prefix, Shards: shards, Planner: os.Getenv("SLUICE_TEST_PLANNER")})
	if err != nil {
		tb.Fatal(err)
	}
	if capacity > 0 {
		if err := st.Heartbeat(context.Background(), "worker", capacity, time.Hour); err != nil {
			tb.Fatal(err)
		}
	}
	return rdb, prefix, st
}
