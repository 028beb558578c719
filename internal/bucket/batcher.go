package bucket

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redisscript"
)

// Batcher defaults.
const (
	// FlushersDefault is BatcherConfig.Flushers when zero.
	FlushersDefault = 4
	// MaxBatchDefault is BatcherConfig.MaxBatch when zero.
	MaxBatchDefault = 64
)

// ErrClosed: the Limiter or Batcher was closed.
var ErrClosed = errors.New("limiter closed")

// BatcherConfig tunes a Batcher. The zero value is the defaults.
type BatcherConfig struct {
	// Flushers is the number of goroutines sending pipelines; each has at
	// most one pipeline (one connection) in flight. Default FlushersDefault.
	Flushers int
	// MaxBatch is the most script calls in one pipeline. Default
	// MaxBatchDefault.
	MaxBatch int
}

// WithDefaults returns c with zero fields set to their defaults.
func (c BatcherConfig) WithDefaults() BatcherConfig {
	if c.Flushers == 0 {
		c.Flushers = FlushersDefault
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = MaxBatchDefault
	}
	return c
}

func (c BatcherConfig) validate() error {
	var errs []error
	if c.Flushers < 1 {
		errs = append(errs, fmt.Errorf("flushers must be at least 1, got %d", c.Flushers))
	}
	if c.MaxBatch < 1 {
		errs = append(errs, fmt.Errorf("max batch must be at least 1, got %d", c.MaxBatch))
	}
	return errors.Join(errs...)
}

// Batcher coalesces concurrent script calls on one Redis client into
// pipelined round trips: each of a few flusher goroutines takes one waiting
// call (blocking), drains whatever else is queued (without blocking, up to
// MaxBatch) and sends them all as one pipeline of EVALSHA, then hands each
// reply back to its caller. A lone caller pays two goroutine hand-offs on top
// of its round trip; under load the round trips are shared.
//
// Share one Batcher among the Limiters of one client (WithBatcher) so their
// calls share pipelines. The flushers start with the first call; Close stops
// them. A Batcher is safe for concurrent use. It never closes the client.
type Batcher struct {
	rdb    redis.UniversalClient
	runner *redisscript.Runner
	cfg    BatcherConfig
	queue  chan *call
	pool   sync.Pool // of *call, each with its done channel

	mu      sync.RWMutex
	closed  bool
	senders sync.WaitGroup // callers between the closed check and their send
	start   sync.Once
	workers sync.WaitGroup

	pipelines atomic.Int64 // round trips sent, for tests
}

// NewBatcher returns a Batcher sending on rdb. It does no I/O and starts no
// goroutine until the first call.
func NewBatcher(rdb redis.UniversalClient, cfg BatcherConfig) (*Batcher, error) {
	if rdb == nil {
		return nil, errors.New("new batcher: nil Redis client")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("new batcher: %w", err)
	}
	b := &Batcher{rdb: rdb, runner: redisscript.NewRunner(rdb, nil), cfg: cfg, queue: make(chan *call, cfg.Flushers*cfg.MaxBatch)}
	b.pool.New = func() any {
		return &call{run: redisscript.Call{Keys: make([]string, 1)}, done: make(chan struct{}, 1)}
	}
	return b, nil
}

// Close stops accepting calls (they fail with ErrClosed), waits until every
// queued call has been sent and answered, and stops the flushers. It is
// idempotent and safe to call concurrently with calls in flight.
func (b *Batcher) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	b.senders.Wait() // nobody sends after this
	close(b.queue)   // flushers drain the queue, then exit
	b.workers.Wait()
	return nil
}

// do runs s on key with args through a pipeline and returns the decoded
// reply. It returns ctx.Err() as soon as ctx is done, even with the call in
// flight (the script may still run: a decision may be spent unseen), and
// ErrClosed after Close.
func (b *Batcher) do(ctx context.Context, s *script, key string, args []any) ([4]int64, error) {
	if err := ctx.Err(); err != nil {
		return [4]int64{}, err
	}
	c := b.pool.Get().(*call)
	c.ctx, c.run.Script, c.run.Keys[0], c.run.Args, c.err = ctx, s, key, args, nil
	if err := b.enqueue(ctx, c); err != nil {
		b.release(c)
		return [4]int64{}, err
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		select {
		case <-c.done: // answered meanwhile: prefer the answer
		default:
			return [4]int64{}, ctx.Err() // c stays with the flusher, not pooled
		}
	}
	reply, err := c.reply, c.err
	b.release(c)
	return reply, err
}

func (b *Batcher) enqueue(ctx context.Context, c *call) error {
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		return ErrClosed
	}
	b.senders.Add(1)
	b.start.Do(b.startFlushers)
	b.mu.RUnlock()
	defer b.senders.Done()
	select {
	case b.queue <- c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *Batcher) release(c *call) {
	c.ctx, c.run.Script, c.run.Args, c.err = nil, nil, nil, nil
	c.run.Reply, c.run.Err = redisscript.Reply{}, nil
	b.pool.Put(c)
}

func (b *Batcher) startFlushers() {
	b.workers.Add(b.cfg.Flushers)
	for range b.cfg.Flushers {
		go b.flush()
	}
}

// flush is one flusher goroutine: it runs until the queue is closed and empty.
func (b *Batcher) flush() {
	defer b.workers.Done()
	batch := make([]*call, 0, b.cfg.MaxBatch)
	scratch := make([]*redisscript.Call, 0, b.cfg.MaxBatch)
	for c := range b.queue {
		batch = append(batch[:0], c)
		batch = b.drain(batch)
		scratch = b.send(batch, scratch)
	}
}

// drain appends queued calls to batch without blocking, up to MaxBatch.
func (b *Batcher) drain(batch []*call) []*call {
	for len(batch) < b.cfg.MaxBatch {
		select {
		case c, ok := <-b.queue:
			if !ok {
				return batch
			}
			batch = append(batch, c)
		default:
			return batch
		}
	}
	return batch
}

// send answers the calls whose callers gave up and pipelines the rest. The
// pipeline runs on a context of its own: it carries many callers, each of
// whom stops waiting on its own context; the client's timeouts bound it.
// scratch is the flusher's reusable slice for the runner, returned for the
// next send.
func (b *Batcher) send(batch []*call, scratch []*redisscript.Call) []*redisscript.Call {
	live := batch[:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.fail(err)
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return scratch
	}
	b.pipelines.Add(1)
	return runBatch(context.Background(), b.runner, live, scratch)
}
