package dispatch

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// budget is one Dispatcher's view of free worker capacity (DESIGN §2.2
// "Back-pressure"): Capacity − InFlight as read from Redis by one refresher
// goroutine (run), every refresh — every fullRefresh while it is used up —
// less what this Dispatcher has released since. All shard loops of the
// Dispatcher draw from it without waiting on Redis: a pass never waits for
// the read, and a loop that finds nothing free waits for the next read
// (fresh). Safe for concurrent use.
//
// Several Dispatchers (replicas owning different shards) each see the whole
// free capacity, so together they can overshoot it by what they release
// within one refresh; the next refresh corrects it, and an overshoot only
// makes released jobs wait longer in asynq.
type budget struct {
	store   Store
	refresh time.Duration
	empty   chan struct{} // poked (non-blocking) when spending used the capacity up

	mu    sync.Mutex
	ready bool          // a reading has succeeded
	free  int           // free capacity, ≥ 0
	err   error         // the last read's error (nil after a success)
	fresh chan struct{} // closed after the next read, then replaced
}

func newBudget(store Store, refresh time.Duration) *budget {
	return &budget{store: store, refresh: refresh, empty: make(chan struct{}, 1), fresh: make(chan struct{})}
}

// run reads the free capacity until ctx is done: at once, then after every
// interval; a poke shortens the wait to fullRefresh. active
// reports whether anybody needs the reads (this Dispatcher owns a shard);
// while it does not, run only waits.
func (b *budget) run(ctx context.Context, active func() bool) {
	for {
		wait := b.refresh
		if active() {
			b.read(ctx)
			b.mu.Lock()
			wait = b.interval()
			b.mu.Unlock()
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		case <-b.empty:
			timer.Stop()
			select {
			case <-ctx.Done():
				return
			case <-time.After(fullRefresh):
			}
		}
	}
}

// read takes one reading and wakes the loops waiting for it.
func (b *budget) read(ctx context.Context) {
	free, err := b.readFree(ctx)
	b.mu.Lock()
	defer b.mu.Unlock()
	if ctx.Err() != nil {
		return
	}
	b.err = err
	if err == nil {
		b.ready, b.free = true, free
	}
	close(b.fresh)
	b.fresh = make(chan struct{})
}

func (b *budget) readFree(ctx context.Context) (int, error) {
	free, err := b.store.FreeCapacity(ctx)
	if err != nil {
		return 0, fmt.Errorf("read free worker capacity: %w", err)
	}
	return free, nil
}

// share returns the Capacity of one pass over one of owned shards:
// ⌈free / owned⌉ but at least minShare, at most free, and 0 when nothing is
// free. Before the first reading it waits for one (or ctx); after a failed
// reading it returns that error.
func (b *budget) share(ctx context.Context, owned int) (int, error) {
	b.mu.Lock()
	for !b.ready && b.err == nil {
		fresh := b.fresh
		b.mu.Unlock()
		b.poke()
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-fresh:
		}
		b.mu.Lock()
	}
	defer b.mu.Unlock()
	if b.err != nil {
		return 0, b.err
	}
	owned = max(owned, 1)
	return min(max((b.free+owned-1)/owned, minShare), b.free), nil
}

// minShare is the smallest capacity share of a pass while that much is
// free: with many shards and a trickle of free capacity, an even split
// would run one pass per job or two, and a pass has a fixed cost.
const minShare = 16

// spend takes n released jobs off the free capacity and reports whether any
// is left. Using it up asks the refresher for an early reading.
func (b *budget) spend(n int) (left bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.free = max(b.free-n, 0)
	if b.free == 0 && n > 0 {
		b.poke()
	}
	return b.free > 0
}

// poke asks run for a reading soon.
func (b *budget) poke() {
	select {
	case b.empty <- struct{}{}:
	default:
	}
}

// next returns a channel closed by the next reading.
func (b *budget) next() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fresh
}

// fullRefresh is the refresh interval while no capacity is free: the
// workers free theirs continuously, and the sooner the dispatcher sees it
// the less a job waits for a worker (at saturation, throughput is about
// capacity / (attempt time + this wait)).
const fullRefresh = 2 * time.Millisecond

// interval is the refresh interval now: b.refresh, or fullRefresh while the
// last read capacity is used up. b.mu must be held.
func (b *budget) interval() time.Duration {
	if b.free == 0 {
		return min(b.refresh, fullRefresh)
	}
	return b.refresh
}
