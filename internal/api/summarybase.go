package api

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/store"
)

// SummaryWarmDefault is Options.SummaryWarm of a throttler serving the
// console: the base of GET /v1/summary is read at least this often, so a
// page opened finds one at most this old.
const SummaryWarmDefault = time.Minute

// SummaryWarmIdle is how long after the last request of the summary the
// warmer goes on reading: the console's pages poll it every second, so a
// deployment whose pages are all closed stops walking its tenants ten
// minutes later, and one whose console nobody opened never starts (at
// 100 000 tenants a walk a minute is ~10 % of a Redis core, issue #13).
// The next page opened after that waits for a read.
const SummaryWarmIdle = 10 * time.Minute

// SummaryReadTimeout bounds one read of the summary's base. The read
// walks every tenant in short steps (a ZSCAN page of a shard's tenant index
// each), so its length is the deployment's size, not a Redis stall: it may
// outlast a request's Redis wait (Options.RequestTimeout), which at 100 000
// tenants it did — every read was cut there and retried, and the overview
// never loaded. A request waits for a read only as long as its own budget
// and is answered 503 unavailable with Retry-After: 1 meanwhile (the read
// goes on; the console's overview polls again a second later).
const SummaryReadTimeout = time.Minute

// errSummaryReading is get's error when the request's wait ended while
// the read it waited for goes on.
var errSummaryReading = errors.New("the summary of every tenant is being read")

// summaryBase is what every key's GET /v1/summary is computed from: the
// summary of every tenant (store.Tenants) and the deployment-wide reads.
// It is shared by all keys (each filters the tenants by its globs) and
// never changed once read.
type summaryBase struct {
	all               []store.TenantSummary
	inFlight          int
	workers, capacity int
	throttlers        []throttlerView
	unowned           []int
	deliveriesPerS    float64
	readAt            time.Time     // wall clock at the read's end
	took              time.Duration // the read's duration
}

// summaryBases holds the latest base and reads the next, one read at a
// time (concurrent askers wait for the running one). A base is fresh for
// SummaryCache or SummaryCostFactor times its read's duration, whichever is
// longer: the reads take at most 1/SummaryCostFactor of the time however
// many pages poll. With warming on (Options.SummaryWarm > 0) a base that is
// no longer fresh but younger than twice the warm period is served at once
// while the next is read in the background, and the warmer (Start) reads
// one whenever the latest turns the warm period old: a page opened on a
// large deployment is answered from memory, not after a walk of every
// tenant. Safe for concurrent use.
type summaryBases struct {
	read func(ctx context.Context) (*summaryBase, error)
	// failed is told each failed read (the server logs it: a background
	// read has no request to answer with its error).
	failed func(error)
	fresh  time.Duration // Options.SummaryCache
	warm   time.Duration // Options.SummaryWarm; 0: off
	// timeout bounds a read (max(Options.RequestTimeout, SummaryReadTimeout)).
	timeout time.Duration
	now     func() time.Time // the wall clock (tests replace it)

	mu      sync.Mutex
	cur     *summaryBase
	asked   time.Time     // the last get (wall clock); zero before the first
	reading chan struct{} // not nil while a read runs; closed at its end
	err     error         // the last read's error, nil after a success
	// life is the warmer's context (Start; Stop cancels it); background
	// reads run under it, or under context.Background when not started.
	life     context.Context
	stopLife context.CancelFunc
	done     chan struct{} // closed when the warmer has returned
}

// freshFor is how long b serves polls without a new read.
func (sb *summaryBases) freshFor(b *summaryBase) time.Duration {
	return max(sb.fresh, SummaryCostFactor*b.took)
}

// get returns a base for a request: the latest when fresh, or — warming on
// — when younger than twice the warm period (starting a read in the
// background); else it waits for a new read (ctx bounds the wait: its end
// is errSummaryReading, the read going on).
func (sb *summaryBases) get(ctx context.Context) (*summaryBase, error) {
	sb.mu.Lock()
	now := sb.now()
	sb.asked = now
	b := sb.cur
	if b != nil {
		age := now.Sub(b.readAt)
		if age < sb.freshFor(b) {
			sb.mu.Unlock()
			return b, nil
		}
		if sb.warm > 0 && age < 2*sb.warm {
			sb.startRead()
			sb.mu.Unlock()
			return b, nil
		}
	}
	done := sb.startRead()
	sb.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", errSummaryReading, ctx.Err())
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.err != nil {
		return nil, sb.err
	}
	return sb.cur, nil
}

// startRead starts a read unless one runs and returns the channel closed
// at its end. Called with mu held.
func (sb *summaryBases) startRead() <-chan struct{} {
	if sb.reading != nil {
		return sb.reading
	}
	done := make(chan struct{})
	sb.reading = done
	life := sb.life
	if life == nil {
		life = context.Background()
	}
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(life, sb.timeout)
		defer cancel()
		start := time.Now()
		b, err := sb.read(ctx)
		sb.mu.Lock()
		defer sb.mu.Unlock()
		sb.reading, sb.err = nil, err
		if err != nil && sb.failed != nil {
			sb.failed(err)
		}
		if err == nil {
			b.took, b.readAt = time.Since(start), sb.now()
			sb.cur = b
		}
	}()
	return done
}

// Start runs the warmer when warming is on (Options.SummaryWarm > 0): while
// the summary was asked for within SummaryWarmIdle, it reads a base
// whenever the latest is the warm period old (warmDue). A failed read is
// retried after the warm period. It returns at once; Stop ends it. Start
// while started is a no-op.
func (sb *summaryBases) Start(ctx context.Context) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.warm <= 0 || sb.life != nil {
		return
	}
	sb.life, sb.stopLife = context.WithCancel(ctx)
	sb.done = make(chan struct{})
	go sb.warmLoop(sb.life, sb.done)
}

func (sb *summaryBases) warmLoop(ctx context.Context, done chan struct{}) {
	defer close(done)
	for {
		sb.mu.Lock()
		due, wait := sb.warmDue()
		if due {
			read := sb.startRead()
			sb.mu.Unlock()
			select {
			case <-read:
			case <-ctx.Done():
				return
			}
			sb.mu.Lock()
			wait = sb.warm // after a failed read too: retried then, not in a loop
		}
		sb.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// warmDue tells the warmer whether to read a base now and, if not, how long
// to wait before it asks again: while the summary was asked for within
// SummaryWarmIdle, a read when there is no base or the latest is the warm
// period old; with no request for that long (or none yet), no read: it
// looks again a warm period later. Called with mu held.
func (sb *summaryBases) warmDue() (bool, time.Duration) {
	now := sb.now()
	if sb.asked.IsZero() || now.Sub(sb.asked) > SummaryWarmIdle {
		return false, sb.warm
	}
	if sb.cur == nil {
		return true, 0
	}
	if wait := sb.warm - now.Sub(sb.cur.readAt); wait > 0 {
		return false, wait
	}
	return true, 0
}

// Stop ends the warmer and waits for it; idempotent. A background read
// under way is canceled.
func (sb *summaryBases) Stop() {
	sb.mu.Lock()
	stop, done := sb.stopLife, sb.done
	sb.mu.Unlock()
	if stop == nil {
		return
	}
	stop()
	<-done
	sb.mu.Lock()
	sb.life, sb.stopLife = nil, nil
	sb.mu.Unlock()
}
