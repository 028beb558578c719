package dispatch

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// budget is one Dispatcher's view of free worker capacity (docs/design.md §2.2
// "Back-pressure"): Capacity − InFlight − the batch tasks waiting in the
// hand-off queues (queued), as read from Redis by one reader goroutine
// (run), less what this Dispatcher has released since.
//
// The tasks waiting in asynq are counted because the leases alone do not
// see them all: a release that waited in asynq past its send time + grace
// is swept and released again (gen + 1) while its task stays queued, and a
// worker must still fetch that stale copy. Without them, a worker starved of
// CPU (it fetches late, so its releases lapse) is handed one more copy of
// every job per grace, and the copies it has to wade through make the next
// releases lapse too: deliveries stop while the queues grow. Counting them
// bounds the stale copies to about the capacity; the releases resume as
// soon as the workers have fetched them (a worker drops a lapsed release
// without a round trip). A batch of live releases is counted twice (its
// leases and its task) only while it waits to be fetched, which a worker
// keeping up does at once. Readings
// are taken on demand only — when a pass released jobs (the workers' state
// moves) or found the capacity used up (want) —, at most one every refresh
// (every fullRefresh while the last reading found nothing free): an idle
// Dispatcher reads nothing. All shard loops of the Dispatcher draw from it
// without waiting on Redis: a pass never waits for a reading except the
// first, and a loop that finds nothing free waits for the next (want).
// Safe for concurrent use.
//
// Headroom: a job that a worker finishes frees its place in the budget only
// after its finish, the next reading, a pass and the hand-off — tens of
// milliseconds through a busy Redis, during which the worker's slot would
// stand empty. So the budget lends the workers a queue: free capacity is
// counted as Capacity + headroom − in flight − waiting, the headroom being
// the jobs the workers end in headroomWait (a quarter of the grace by
// default) at the rate they ended them lately (the shards' finished-jobs
// counters over the last second and the current one: Store.FinishRate,
// read at most every rateEvery, only while readings are taken and find
// the workers at least half busy: below that the headroom is not needed),
// at most headroomMax × Capacity. A job thus
// waits for a worker slot at most about headroomWait, well inside its
// grace (it never lapses for the headroom): slow attempts (a slow
// upstream) end few jobs a second and get little headroom, fast ones keep
// a queue in front of the workers, as bare asynq's would be. Nothing is
// lent on a rate older than rateStale (after an idle spell), nor for
// what no worker ended: a lease the sweep removed (a starved worker's
// lapsed release) is no completion.
//
// Several Dispatchers (replicas owning different shards) each see the whole
// free capacity, so together they can overshoot it by what they release
// within one refresh; and after a long idle time the first pass uses the
// last reading, however old. The next reading corrects either, and an
// overshoot only makes released jobs wait longer in asynq.
type budget struct {
	store   Store
	queued  func(context.Context) (int, error) // batch tasks waiting in the hand-off queues; nil: none
	refresh time.Duration
	// headroomWait is the longest a job should wait in asynq for a worker
	// slot (see Headroom above); nil or ≤ 0: no headroom.
	headroomWait func() time.Duration
	// workersCame, when set, runs at a reading that finds live workers
	// after one that found none, before any pass gets a share of them:
	// the Dispatcher reads its pre-claim gate then (meta.go readGate).
	workersCame func(context.Context)

	// The workers' total concurrency as last read, and when (run's own:
	// only read touches them).
	capacity   int
	capacityAt time.Time

	demand chan struct{} // poked (non-blocking): a reading is wanted
	empty  chan struct{} // poked (non-blocking): the capacity is used up, read again soon

	mu       sync.Mutex
	ready    bool          // a reading has succeeded
	free     int           // free capacity, ≥ 0 (reserved shares included)
	reserved int           // shares handed to passes that have not spent them yet
	spentIn  int           // jobs released while the current reading runs
	reading  bool          // a reading is in progress
	err      error         // the last read's error (nil after a success)
	fresh    chan struct{} // closed after the next read, then replaced

	// The workers' completion rate (readRate): jobs ended per second, when
	// it was read, and whether a read is under way.
	rate        float64
	rateAt      time.Time
	rateReading bool
	lent        int // the headroom the last reading counted

	// Fair shares (fairshare.go): when the pool was last found contended
	// and λ (the slots per unit of weight handed to passes; 0: not
	// contended), under mu; when the weights were last read, the largest
	// weight read since weightAt, and when (run's own).
	contendedAt time.Time
	lambda      float64
	weightsAt   time.Time
	weight      int64
	weightAt    time.Time
}

func newBudget(store Store, queued func(context.Context) (int, error), refresh time.Duration) *budget {
	return &budget{store: store, queued: queued, refresh: refresh, demand: make(chan struct{}, 1), empty: make(chan struct{}, 1), fresh: make(chan struct{})}
}

// The completion rate is read at most every rateEvery, and lends nothing
// once older than rateStale (an idle Dispatcher reads nothing).
const (
	rateEvery = 250 * time.Millisecond
	rateStale = 3 * time.Second
)

// run takes a reading whenever one is wanted (poke), then waits the
// refresh interval before it takes the next — only fullWait when the
// capacity is used up meanwhile —, until ctx is done.
func (b *budget) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.demand:
		}
		select { // a used-up capacity from before this reading is no news
		case <-b.empty:
		default:
		}
		b.read(ctx)
		b.mu.Lock()
		wait, full := b.interval(), b.fullWait()
		b.mu.Unlock()
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		case <-b.empty:
			timer.Stop()
			if !sleepCtx(ctx, full) {
				return
			}
		}
	}
}

// sleepCtx sleeps d (real time) and reports false when ctx ended it.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// read takes one reading and wakes the loops waiting for it. The jobs
// released while it runs are taken off it: the reading may have counted
// their leases before they were written and their tasks before they were
// queued, and must not hand their capacity out again (a release counted
// twice only lowers one reading).
func (b *budget) read(ctx context.Context) {
	b.mu.Lock()
	b.reading, b.spentIn = true, 0
	b.mu.Unlock()
	capacity, leases, waiting, err := b.readCounts(ctx)
	var wait time.Duration
	if b.headroomWait != nil {
		wait = b.headroomWait()
	}
	now := time.Now()
	var lambda float64
	var lambdaErr error
	if err == nil {
		lambda, lambdaErr = b.readLambda(ctx, capacity, leases+waiting, now)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reading = false
	if ctx.Err() != nil {
		return
	}
	b.err = err
	if err == nil {
		b.err = lambdaErr
	}
	if b.err == nil {
		b.lambda = lambda
		b.lent = b.headroom(capacity, wait, now)
		free := capacity + b.lent - leases - waiting
		b.ready, b.free = true, max(free-b.spentIn, 0)
		if wait > 0 && !b.rateReading && now.Sub(b.rateAt) >= rateEvery && 2*(leases+waiting) >= capacity {
			b.rateReading = true
			go b.readRate(ctx)
		}
	}
	close(b.fresh)
	b.fresh = make(chan struct{})
}

// readRate reads the workers' completion rate, deployment-wide (a failed
// read is a rate of 0). Its own goroutine: the count takes a script call
// per shard, which the readings do not wait for.
func (b *budget) readRate(ctx context.Context) {
	rate, err := b.store.FinishRate(ctx)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rateReading = false
	if err != nil {
		rate = 0
	}
	b.rate, b.rateAt = rate, time.Now()
}

// headroom is the jobs the workers end in wait at the rate last read (none
// when that is older than rateStale at now), at most capacity. b.mu must
// be held.
func (b *budget) headroom(capacity int, wait time.Duration, now time.Time) int {
	if wait <= 0 || capacity <= 0 || now.Sub(b.rateAt) > rateStale {
		return 0
	}
	return min(int(b.rate*wait.Seconds()), headroomMax*capacity)
}

// headroomMax bounds the headroom, in capacities. A job holds its lease from
// its release through the hand-off, the fetch, the attempt and the finish:
// at 100 slots and an attempt of a few ms the lease lasts several times the
// attempt, so the workers' slots stand idle unless about as many jobs again
// wait in front of them — with the headroom at one capacity, in the
// throughput benchmark, 65 of 100 slots were busy on average. A deeper
// queue in front of the workers makes a stall drop more pre-claimed jobs
// as lapsed: their workers give them back at once (internal/worker).
const headroomMax = 2

// readCounts reads what the free capacity is made of: the workers' total
// concurrency (read at most every capacityEvery while it is above 0:
// workers come and go far more rarely than jobs), the jobs in flight (their
// leases: one ZCARD per shard, pipelined) and the batch tasks waiting in
// the hand-off queues (one LLEN per queue, pipelined).
func (b *budget) readCounts(ctx context.Context) (capacity, leases, waiting int, err error) {
	if now := time.Now(); b.capacity == 0 || now.Sub(b.capacityAt) >= capacityEvery {
		c, err := b.store.Capacity(ctx)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("read worker capacity: %w", err)
		}
		if b.capacity == 0 && c > 0 && b.workersCame != nil {
			b.workersCame(ctx)
		}
		b.capacity, b.capacityAt = c, now
	}
	leases, err = b.store.InFlight(ctx)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("read jobs in flight: %w", err)
	}
	if b.queued != nil {
		if waiting, err = b.queued(ctx); err != nil {
			return 0, 0, 0, fmt.Errorf("read hand-off tasks waiting: %w", err)
		}
	}
	return b.capacity, leases, waiting, nil
}

// capacityEvery is the longest the workers' total concurrency is reused
// between readings: a worker that joins is used within it; one that left
// is counted until its heartbeat expires anyway. A total of 0 (no worker
// yet, or none left) is not reused: the first worker to start is used at
// the next reading — a throttler that started first, or outlived its
// workers, would otherwise hold its first jobs up to capacityEvery after
// a worker came. A reading is taken only while jobs wait (at most one per
// fullRefresh when nothing is free), so a fleet without workers costs one
// more script call per reading, not a poll of its own.
const capacityEvery = time.Second

// shareAtLeast reserves and returns the Capacity of one pass over one of
// owned shards: ⌈avail / owned⌉ but at least least, at most avail (the free
// capacity not yet reserved by other passes), and 0 when nothing is
// available. Passes of several shards running at once thus never release
// the same free capacity twice. The pass gives its share back with spend.
// Before the first reading it waits for one (or ctx); after a failed
// reading it returns that error and asks for another reading.
func (b *budget) shareAtLeast(ctx context.Context, owned, least int) (int, error) {
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
		b.poke()
		return 0, b.err
	}
	owned = max(owned, 1)
	avail := max(b.free-b.reserved, 0)
	n := min(max((avail+owned-1)/owned, least), avail)
	b.reserved += n
	return n, nil
}

// minShare is the smallest capacity share of a pass while that much is
// free, when its shard's last pass used its share up or released
// minShareQuiet jobs or more (hungry): with many shards and a trickle of
// free capacity, an even split would run one pass per job or two, and a
// pass has a fixed cost — so has each batch task it hands off (asynq's
// enqueue, dequeue and done scripts, the workers' claim and finish
// calls). A batch's worth (BatchMaxDefault); at 16, the throughput
// benchmark's passes released ~14 jobs each. Other shards' passes (a
// tenant at a modest rate, an idle shard's safety-net pass) take at least
// minShareQuiet: a pass reserves its share while it runs, and idle shards
// passing at once must not hold a busy shard's capacity back.
const (
	minShare      = BatchMaxDefault
	minShareQuiet = 16
)

// spend ends a pass's share (reserved, as share returned it): it takes the
// n jobs the pass released off the free capacity, gives the rest of the
// share back, and reports whether any capacity is available. Releasing
// jobs asks for a reading (the workers' state moves).
func (b *budget) spend(reserved, n int) (left bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reserved = max(b.reserved-reserved, 0)
	b.free = max(b.free-n, 0)
	if b.reading {
		b.spentIn += n
	}
	if n > 0 {
		b.poke()
		if b.free == 0 {
			b.used()
			b.contendedAt = time.Now()
		}
	}
	return b.free > b.reserved
}

// poke asks run for a reading, as soon as the refresh interval allows.
func (b *budget) poke() {
	select {
	case b.demand <- struct{}{}:
	default:
	}
}

// used tells run that the capacity is used up: read again soon.
func (b *budget) used() {
	select {
	case b.empty <- struct{}{}:
	default:
	}
}

// want asks for a reading soon (a loop found the capacity used up) and
// returns a channel closed by it.
func (b *budget) want() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.poke()
	b.used()
	b.contendedAt = time.Now()
	return b.fresh
}

// fullRefresh is the refresh interval while no capacity is free and no
// headroom queues jobs in front of the workers: the workers free their
// capacity continuously, and the sooner the dispatcher sees it the less a
// job waits for a worker (at saturation, throughput is about capacity /
// (attempt time + this wait)).
const fullRefresh = 2 * time.Millisecond

// fullWait is the refresh interval while no capacity is free: fullRefresh,
// but while the last reading lent at least minShare jobs of headroom, the
// time the workers take to end half of them at the rate last read (at most
// b.refresh). Those jobs wait in asynq in front of the workers, so no
// worker slot stands empty meanwhile, and each reading then frees enough
// capacity for passes and batches of tens of jobs instead of a few: the
// scripts' and asynq's cost per call is spread over more jobs. b.mu must
// be held.
func (b *budget) fullWait() time.Duration {
	if b.lent < minShare || b.rate <= 0 {
		return min(b.refresh, fullRefresh)
	}
	wait := time.Duration(float64(b.lent) / (2 * b.rate) * float64(time.Second))
	return min(max(wait, fullRefresh), b.refresh)
}

// interval is the refresh interval now: b.refresh, or fullWait while the
// last read capacity is used up. b.mu must be held.
func (b *budget) interval() time.Duration {
	if b.free == 0 {
		return b.fullWait()
	}
	return b.refresh
}
