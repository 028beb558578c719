package dispatcher

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// budget is one Dispatcher's view of free worker capacity (DESIGN §2.2
// "Back-pressure"): Capacity − InFlight as read from Redis at most every
// refresh (every fullRefresh while it is used up), less what this
// Dispatcher has released since. All shard loops of
// the Dispatcher draw from it. Safe for concurrent use.
//
// Several Dispatchers (replicas owning different shards) each see the whole
// free capacity, so together they can overshoot it by what they release
// within one refresh; the next refresh corrects it, and an overshoot only
// makes released jobs wait longer in asynq (the claim re-slots a late job).
type budget struct {
	store   Store
	refresh time.Duration

	mu   sync.Mutex
	at   time.Time // local (monotonic) time of the last read; zero: never
	free int       // free capacity, ≥ 0
}

// share returns the Capacity of one pass over one of owned shards:
// ⌈free / owned⌉ but at least minShare, at most free, and 0 when nothing is
// free. It reads Redis
// when the last read is older than the refresh interval.
func (b *budget) share(ctx context.Context, owned int) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.at.IsZero() || time.Since(b.at) >= b.interval() {
		capacity, err := b.store.Capacity(ctx)
		if err != nil {
			return 0, fmt.Errorf("read worker capacity: %w", err)
		}
		inFlight, err := b.store.InFlight(ctx)
		if err != nil {
			return 0, fmt.Errorf("read jobs in flight: %w", err)
		}
		b.at, b.free = time.Now(), max(capacity-inFlight, 0)
	}
	owned = max(owned, 1)
	return min(max((b.free+owned-1)/owned, minShare), b.free), nil
}

// minShare is the smallest capacity share of a pass while that much is
// free: with many shards and a trickle of free capacity, an even split
// would run one pass per job or two, and a pass has a fixed cost.
const minShare = 16

// spend takes n released jobs off the free capacity and reports whether any
// is left.
func (b *budget) spend(n int) (left bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.free = max(b.free-n, 0)
	return b.free > 0
}

// refreshAt is when share will next read the free capacity from Redis.
func (b *budget) refreshAt() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.at.Add(b.interval())
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
