package dispatch

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// gatedStore answers InFlight from its fields; while gate is set, it
// waits for it to be closed. It counts the readings.
type gatedStore struct {
	fakeStore
	mu       sync.Mutex
	reads    int
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

// TestBudgetNeverWaitsOnRedisAfterTheFirstReading: share waits for the
// first reading only; a reading in progress does not hold up the passes;
// using the capacity up brings the next reading forward (the refresh
// interval here is an hour), and a failed reading is reported.
func TestBudgetNeverWaitsOnRedisAfterTheFirstReading(t *testing.T) {
	t.Parallel()
	g := &gatedStore{fakeStore: fakeStore{shards: 1, capacity: 40}, inFlight: 10}
	gate := make(chan struct{})
	g.gate = gate
	b := newBudget(g, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); b.run(ctx) }()
	defer func() { cancel(); <-done }()

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
	if left := b.spend(30); left {
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
	b.spend(5)
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
	b := newBudget(g, time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.run(ctx) }()
	defer func() { cancel(); <-done }()

	if n, err := b.share(ctx, 1); err != nil || n != 40 {
		t.Fatalf("first share %d, %v; want 40", n, err)
	}
	b.spend(0) // a pass that released nothing
	redistest.Hold(t, 100*time.Millisecond, "no reading while idle", func() bool { return g.readings() == 1 })
	b.mu.Lock()
	released := b.fresh // closed when the reading the release asks for has completed
	b.mu.Unlock()
	b.spend(3)
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
