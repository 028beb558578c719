package dispatch

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// gatedStore answers InFlight from its fields; while gate is set, it
// waits for it to be closed. It counts the readings.
type gatedStore struct {
	fakeStore
	mu       sync.Mutex
	reads    int
	capReads int // Capacity calls
	gate     chan struct{}
	inFlight int
	err      error
}

func (g *gatedStore) InFlight(ctx context.Context) (int, error) {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reads++
	return g.inFlight, g.err
}

// Capacity answers the capacity field under the lock (set may change it).
func (g *gatedStore) Capacity(context.Context) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.capReads++
	return g.capacity, nil
}

func (g *gatedStore) set(f func(g *gatedStore)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f(g)
}

func (g *gatedStore) readings() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reads
}

// freeOf is a reading's free capacity without headroom: capacity − leases
// − tasks waiting, never below 0.
func freeOf(capacity, leases, waiting int, err error) (int, error) {
	return max(capacity-leases-waiting, 0), err
}

// runBudget starts a budget over g with the given refresh interval; its
// reader stops when the test ends. ctx is the reader's (and the shares').
// share is shareAtLeast with minShare, the share of a pass whose shard
// had more to release than its last share (the loop's, loop.go pass).
func (b *budget) share(ctx context.Context, owned int) (int, error) {
	return b.shareAtLeast(ctx, owned, minShare)
}

func runBudget(t *testing.T, g Store, refresh time.Duration) (*budget, context.Context) {
	t.Helper()
	b := newBudget(g, nil, refresh)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return b, ctx
}

// TestBudgetNeverWaitsOnRedisAfterTheFirstReading: share waits for the
// first reading only; a reading in progress does not hold up the passes;
// using the capacity up brings the next reading forward (the refresh
// interval here is an hour), and a failed reading is reported.
func TestBudgetNeverWaitsOnRedisAfterTheFirstReading(t *testing.T) {
	t.Parallel()
	g := &gatedStore{fakeStore: fakeStore{shards: 1, capacity: 40}, inFlight: 10}
	gate := make(chan struct{})
	g.gate = gate
	b, ctx := runBudget(t, g, time.Hour)

	shared := make(chan int, 1)
	go func() {
		n, err := b.share(ctx, 1)
		if err != nil {
			t.Error(err)
		}
		shared <- n
	}()
	redistest.Hold(t, 50*time.Millisecond, "share waits for the first reading", func() bool { return len(shared) == 0 })
	close(gate)
	if n := <-shared; n != 30 {
		t.Fatalf("share %d, want capacity 40 − 10 in flight", n)
	}

	// The next reading hangs; the passes go on with the last one.
	gate2 := make(chan struct{})
	g.set(func(g *gatedStore) { g.gate, g.inFlight = gate2, 35 })
	if left := b.spend(30, 30); left {
		t.Fatal("spend(30) of 30 reported capacity left")
	}
	next := b.want()
	if n, err := b.share(ctx, 1); err != nil || n != 0 {
		t.Fatalf("share while a reading hangs: %d, %v; want 0 at once", n, err)
	}
	select {
	case <-next:
		t.Fatal("next closed before the reading ended")
	default:
	}
	close(gate2)
	<-next // brought forward by the spend: the hour has not passed
	if n, err := b.share(ctx, 1); err != nil || n != 5 {
		t.Fatalf("share after the reading: %d, %v; want 40 − 35", n, err)
	}

	// A failed reading is the passes' error until a reading succeeds.
	g.set(func(g *gatedStore) { g.err = errors.New("redis down") })
	next = b.want()
	b.spend(5, 5)
	<-next
	if _, err := b.share(ctx, 1); err == nil {
		t.Fatal("share after a failed reading: no error")
	}
	if r := g.readings(); r != 3 {
		t.Fatalf("%d readings, want 3 (one at start, two brought forward)", r)
	}
}

// TestBudgetReadsOnlyOnDemand: an idle Dispatcher reads no capacity: the
// budget reads when a pass first needs a share, when jobs were released,
// and when a loop waits for capacity (want) — never on a timer.
func TestBudgetReadsOnlyOnDemand(t *testing.T) {
	t.Parallel()
	g := &gatedStore{fakeStore: fakeStore{shards: 1, capacity: 40}}
	b, ctx := runBudget(t, g, time.Millisecond)

	if n, err := b.share(ctx, 1); err != nil || n != 40 {
		t.Fatalf("first share %d, %v; want 40", n, err)
	}
	b.spend(40, 0) // a pass that released nothing
	redistest.Hold(t, 100*time.Millisecond, "no reading while idle", func() bool { return g.readings() == 1 })
	b.mu.Lock()
	released := b.fresh // closed when the reading the release asks for has completed
	b.mu.Unlock()
	b.spend(0, 3)
	<-released
	if r := g.readings(); r != 2 {
		t.Fatalf("%d readings after a release, want 2", r)
	}
	g.set(func(g *gatedStore) { g.inFlight = 40 })
	<-b.want()
	if n, err := b.share(ctx, 1); err != nil || n != 0 || g.readings() != 3 {
		t.Fatalf("after want: share %d, %v, %d readings; want 0, nil, 3", n, err, g.readings())
	}
	redistest.Hold(t, 100*time.Millisecond, "no reading while nobody wants one", func() bool { return g.readings() == 3 })
}

// TestBudgetHeadroomIsTheJobsEndedInItsWait: the headroom is the rate the
// workers ended jobs at lately (Store.FinishRate) × the wait,
// at most headroomMax capacities; nothing before a rate was read, once it is older
// than rateStale, with no wait or with no workers.
func TestBudgetHeadroomIsTheJobsEndedInItsWait(t *testing.T) {
	t.Parallel()
	const wait = 250 * time.Millisecond
	for _, tc := range []struct {
		name       string
		finishRate float64
		capacity   int
		wait       time.Duration
		after      time.Duration // from the rate's read to the reading
		want       int
	}{
		{"fast workers: capped at twice the capacity", 2000, 100, wait, 0, 200},
		{"slow attempts: 50/s × 0.25 s", 50, 100, wait, time.Second, 12},
		{"no job ended (a starved worker)", 0, 100, wait, 0, 0},
		{"a rate older than rateStale", 2000, 100, wait, rateStale + time.Millisecond, 0},
		{"no wait configured", 2000, 100, 0, 0, 0},
		{"no workers", 2000, 0, wait, 0, 0},
	} {
		b := newBudget(&gatedStore{fakeStore: fakeStore{finishRate: tc.finishRate}}, nil, time.Hour)
		if got := b.headroom(tc.capacity, tc.wait, time.Now()); got != 0 {
			t.Fatalf("%s: headroom %d before any rate was read, want 0", tc.name, got)
		}
		b.readRate(context.Background())
		b.mu.Lock()
		got := b.headroom(tc.capacity, tc.wait, b.rateAt.Add(tc.after))
		b.mu.Unlock()
		if got != tc.want {
			t.Errorf("%s: headroom %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestBudgetLendsTheHeadroomToThePasses: with every worker slot taken
// (leases = capacity) a budget has nothing to share until the workers'
// completion rate is read — at the first reading, in the background —;
// then the passes may release up to the headroom more, never beyond
// (1 + headroomMax) capacities.
func TestBudgetLendsTheHeadroomToThePasses(t *testing.T) {
	t.Parallel()
	g := &gatedStore{fakeStore: fakeStore{shards: 1, capacity: 40, finishRate: 400}, inFlight: 40}
	b := newBudget(g, nil, time.Millisecond)
	b.headroomWait = func() time.Duration { return time.Second } // 400 ended/s × 1 s, capped at 80
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	if n, err := b.share(ctx, 1); err != nil || n != 0 {
		t.Fatalf("first share with every slot taken: %d, %v; want 0 (no rate read yet)", n, err)
	}
	b.spend(0, 0)
	redistest.Poll(t, 5*time.Second, "a reading after the rate's read lends the headroom", func() bool {
		<-b.want()
		n, err := b.share(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		b.spend(n, 0)
		return n > 0
	})
	if n, err := b.share(ctx, 1); err != nil || n != 80 {
		t.Fatalf("share with the headroom lent: %d, %v; want 80 (capacity 40 + headroom 80 − 40 in flight)", n, err)
	}
}

// TestBudgetReadsTheRateOnlyWhenHalfBusy: readings that find the workers
// less than half busy read no completion rate (a script call per shard
// that only the headroom needs); one at half busy does.
func TestBudgetReadsTheRateOnlyWhenHalfBusy(t *testing.T) {
	t.Parallel()
	g := &gatedStore{fakeStore: fakeStore{shards: 1, capacity: 40, finishRate: 400}, inFlight: 19}
	b, ctx := runBudget(t, g, time.Millisecond)
	b.headroomWait = func() time.Duration { return time.Second }
	rateRead := func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return !b.rateAt.IsZero()
	}
	for range 5 {
		if _, err := b.share(ctx, 1); err != nil {
			t.Fatal(err)
		}
		b.spend(0, 0)
		<-b.want()
	}
	if rateRead() {
		t.Fatal("the rate was read with 19 of 40 slots busy")
	}
	g.set(func(g *gatedStore) { g.inFlight = 20 })
	redistest.Poll(t, 5*time.Second, "the rate read at 20 of 40 busy", func() bool {
		<-b.want()
		return rateRead()
	})
}

// TestBudgetRereadsAZeroCapacityAtOnce: a capacity of 0 (no worker had
// sent its heartbeat at the reading) is read again at the next reading, so
// the first worker is used as soon as the jobs ask (it used to be reused
// for capacityEvery: a throttler started before its worker held its first
// job ~1 s).
func TestBudgetRereadsAZeroCapacityAtOnce(t *testing.T) {
	t.Parallel()
	g := &gatedStore{fakeStore: fakeStore{shards: 1, capacity: 0}}
	b, ctx := runBudget(t, g, time.Millisecond)

	if n, err := b.share(ctx, 1); err != nil || n != 0 {
		t.Fatalf("share with no worker: %d, %v; want 0", n, err)
	}
	b.spend(0, 0)
	g.set(func(g *gatedStore) { g.capacity = 8 }) // a worker's first heartbeat
	<-b.want()
	if n, err := b.share(ctx, 1); err != nil || n != 8 {
		t.Fatalf("share at the reading after the worker came: %d, %v; want its 8", n, err)
	}
	g.set(func(g *gatedStore) {
		if g.capReads != 2 {
			t.Errorf("%d capacity reads in two readings, want 2 (a 0 is not reused)", g.capReads)
		}
	})
}

// TestBudgetNeverHandsTheSameCapacityOutTwice: a share is reserved until
// its pass spends it, so the passes of two shards running at once split the
// free capacity instead of each taking it all; what a pass did not use
// goes back; and jobs released while a reading runs are taken off that
// reading (it may have missed both their leases and their tasks).
func TestBudgetNeverHandsTheSameCapacityOutTwice(t *testing.T) {
	t.Parallel()
	g := &gatedStore{fakeStore: fakeStore{shards: 2, capacity: 10}}
	b, ctx := runBudget(t, g, time.Hour)

	first, err := b.share(ctx, 2)
	if err != nil || first != 10 {
		t.Fatalf("first share %d, %v; want all 10 (below minShare the first pass takes what is free)", first, err)
	}
	if n, err := b.share(ctx, 2); err != nil || n != 0 {
		t.Fatalf("second share while the first is out: %d, %v; want 0", n, err)
	}
	if left := b.spend(first, 4); !left {
		t.Fatal("6 of 10 left after a pass released 4: spend reported none")
	}
	if n, err := b.share(ctx, 2); err != nil || n != 6 {
		t.Fatalf("share after the first pass gave 6 back: %d, %v; want 6", n, err)
	}
	b.spend(6, 0)

	// A reading that began before a release and ended after it: the
	// release's jobs come off what it read.
	gate := make(chan struct{})
	g.set(func(g *gatedStore) { g.gate, g.inFlight = gate, 0 })
	next := b.want()
	redistest.Poll(t, 5*time.Second, "the reading to start", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.reading
	})
	n, err := b.share(ctx, 1)
	if err != nil || n != 6 {
		t.Fatalf("share during the reading: %d, %v; want the 6 still free", n, err)
	}
	b.spend(n, 3) // released while the reading (which saw none of it) runs
	close(gate)
	<-next
	if n, err := b.share(ctx, 1); err != nil || n != 7 {
		t.Fatalf("share after the reading: %d, %v; want 10 read − 3 released during it", n, err)
	}
}

// TestBudgetCountsTasksWaitingInHandoffQueues: the free capacity is the
// workers' concurrency less the leases and less the batch tasks waiting in
// the hand-off queues (a swept release's stale copy among them); tasks on
// other queues do not count, and a fetched task frees its place.
func TestBudgetCountsTasksWaitingInHandoffQueues(t *testing.T) {
	t.Parallel()
	d, st, rdb, prefix := newRedisDispatcher(t, 2)
	ctx := context.Background()
	client := asynq.NewClientFromRedisClient(rdb)
	if err := st.Heartbeat(ctx, "w1", 10, time.Minute); err != nil {
		t.Fatal(err)
	}
	put := func(queue string, n int) {
		for range n {
			if _, err := client.EnqueueContext(ctx, asynq.NewTask(wire.TaskTypeBatch, nil), asynq.Queue(queue)); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(wire.HandoffQueue(prefix, 0), 3)
	put(wire.HandoffQueue(prefix, wire.HandoffQueues-1), 2)
	put(prefix+":elsewhere", 4)
	if n, err := d.handoffWaiting(ctx); err != nil || n != 5 {
		t.Fatalf("handoffWaiting = %d, %v; want the 5 tasks of the hand-off queues", n, err)
	}
	if free, err := freeOf(d.budget.readCounts(ctx)); err != nil || free != 5 {
		t.Fatalf("free capacity %d, %v; want 10 − 0 leases − 5 tasks waiting", free, err)
	}
	// A worker fetches queue 0's tasks (asynq moves them to its active list).
	key := wire.AsynqQueueKey(wire.HandoffQueue(prefix, 0), "pending")
	if err := rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if free, err := freeOf(d.budget.readCounts(ctx)); err != nil || free != 8 {
		t.Fatalf("free capacity after the fetch %d, %v; want 10 − 2", free, err)
	}
	put(wire.HandoffQueue(prefix, 1), 12)
	if free, err := freeOf(d.budget.readCounts(ctx)); err != nil || free != 0 {
		t.Fatalf("free capacity with 14 tasks waiting %d, %v; want 0, never below", free, err)
	}
}

// TestBudgetReadingFailsWhenTheHandoffQueuesCannotBeRead: a failed count
// of the waiting tasks is a failed reading, not a capacity of zero waiting.
func TestBudgetReadingFailsWhenTheHandoffQueuesCannotBeRead(t *testing.T) {
	t.Parallel()
	g := &gatedStore{fakeStore: fakeStore{shards: 1, capacity: 40}}
	down := errors.New("redis down")
	b := newBudget(g, func(context.Context) (int, error) { return 0, down }, time.Hour)
	if _, _, _, err := b.readCounts(context.Background()); !errors.Is(err, down) {
		t.Fatalf("readCounts = %v, want the queue count's error", err)
	}
}

// newRedisDispatcher is an unstarted Dispatcher on a Store of shards shards
// on the test's Redis and prefix, its metrics registered.
func newRedisDispatcher(t *testing.T, shards int) (*Dispatcher, *store.Store, redis.UniversalClient, string) {
	t.Helper()
	rdb, prefix := redistest.New(t)
	st, err := store.NewStore(rdb, store.Config{Prefix: prefix, Shards: shards})
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Config{Store: st, Asynq: asynq.NewClientFromRedisClient(rdb), Redis: rdb, Prefix: prefix,
		Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	return d, st, rdb, prefix
}

// TestBudgetWaitsForHalfItsHeadroomWhenFull: while no capacity is free the
// next reading comes after fullRefresh — unless the last reading lent a
// pass's worth of headroom (minShare jobs or more), which queues jobs in
// front of the workers: then after the time the workers take to end half
// of them at the rate read, within fullRefresh … the refresh interval.
func TestBudgetWaitsForHalfItsHeadroomWhenFull(t *testing.T) {
	t.Parallel()
	const refresh = 25 * time.Millisecond
	for _, tc := range []struct {
		name string
		lent int
		rate float64
		want time.Duration
	}{
		{"no headroom", 0, 4000, fullRefresh},
		{"less than a pass's worth", minShare - 1, 4000, fullRefresh},
		{"no rate", 100, 0, fullRefresh},
		{"half the headroom's time", 100, 4000, 12500 * time.Microsecond},
		{"at most the refresh interval", 100, 1000, refresh},
		{"at least fullRefresh", 100, 1e6, fullRefresh},
	} {
		b := newBudget(newFakeStore(1), nil, refresh)
		b.lent, b.rate = tc.lent, tc.rate
		if got := b.fullWait(); got != tc.want {
			t.Errorf("%s: lent %d at %v/s: full wait %s, want %s", tc.name, tc.lent, tc.rate, got, tc.want)
		}
		if got := b.interval(); got != tc.want { // b.free is 0: used up
			t.Errorf("%s: interval %s while used up, want %s", tc.name, got, tc.want)
		}
	}
	// A refresh interval below fullRefresh is never exceeded.
	if got := newBudget(newFakeStore(1), nil, time.Millisecond).fullWait(); got != time.Millisecond {
		t.Errorf("refresh 1ms: full wait %s, want 1ms", got)
	}
}
