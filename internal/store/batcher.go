package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// batcher runs the requests of concurrent callers in shared calls, per
// stream (key K): a request for a stream with no call in flight goes at
// once, in a call of its own (no added wait when idle); the requests that
// arrive while a call of that stream is in flight queue and go together in
// the next call — in arrival order, at most max requests and, with a
// weight, at most budget of weight a call (a request heavier than budget
// goes alone). A stream with requests has one sender goroutine, which ends
// when the stream is idle: an idle batcher holds no goroutine.
//
// The Coalescer's claims and finishes and the Store's enqueues go through
// one each.
type batcher[K comparable, R batchedReq] struct {
	max    int
	budget int          // most weight a call; 0: no bound but max
	weight func(R) int  // a request's weight; nil: 1 each
	call   func(K, []R) // runs one call and answers every request of it (batchState.answer)
	// dropEnded leaves out of its call a request whose caller's context
	// ended while it waited: it gets ErrNotSent (wrapping the context's
	// error) and nothing of it reaches Redis. Without it such a request is
	// still sent (a finish must be recorded though nobody waits for it).
	dropEnded bool

	mu      sync.Mutex
	streams map[K]*batchQueue[R]
}

// batchedReq is a request of a batcher: it carries its caller's context,
// its result's error and the channel closed once it is answered.
type batchedReq interface{ state() *batchState }

// batchState is the batcher's part of a request.
type batchState struct {
	ctx  context.Context
	done chan struct{}
	err  error // the call's, for every request of it
}

func (b *batchState) state() *batchState { return b }

// answer records err and releases the request's caller.
func (b *batchState) answer(err error) {
	b.err = err
	close(b.done)
}

// ErrNotSent is a batched request's error when its caller's context ended
// before its call was sent: nothing of it reached Redis.
var ErrNotSent = errors.New("store: not sent (the caller gave up while it waited for a shared call)")

// batchQueue is a stream's waiting requests and whether a call of it is in
// flight.
type batchQueue[R any] struct {
	busy    bool
	waiting []R
}

func newBatcher[K comparable, R batchedReq](max int, call func(K, []R)) *batcher[K, R] {
	return &batcher[K, R]{max: max, call: call, streams: make(map[K]*batchQueue[R])}
}

// do queues r on stream k and waits for its answer; ctx is r's caller's
// (one already ended: not queued). A caller whose ctx ends first returns
// at once: with dropEnded, while r
// still waits, r is withdrawn and the error wraps ErrNotSent and
// ctx.Err(); else ctx.Err(), and r is still sent (or, once sent, still
// runs).
func (b *batcher[K, R]) do(ctx context.Context, k K, r R) error {
	if err := ctx.Err(); err != nil {
		if b.dropEnded {
			return fmt.Errorf("%w: %w", ErrNotSent, err)
		}
		return err
	}
	st := r.state()
	st.ctx, st.done = ctx, make(chan struct{})
	b.mu.Lock()
	q := b.streams[k]
	if q == nil {
		q = &batchQueue[R]{}
		b.streams[k] = q
	}
	q.waiting = append(q.waiting, r)
	send := !q.busy
	q.busy = true
	b.mu.Unlock()
	if send {
		go b.send(k, q)
	}
	select {
	case <-st.done:
		return st.err
	case <-ctx.Done():
		if b.dropEnded && b.withdraw(k, r) {
			return fmt.Errorf("%w: %w", ErrNotSent, ctx.Err())
		}
		select {
		case <-st.done: // answered meanwhile: prefer the answer
			return st.err
		default:
			return ctx.Err()
		}
	}
}

// withdraw removes r from stream k's waiting requests; false when it is
// not there (taken into a call, or answered).
func (b *batcher[K, R]) withdraw(k K, r R) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.streams[k]
	if q == nil {
		return false
	}
	for i, w := range q.waiting {
		if w.state() == r.state() {
			q.waiting = append(q.waiting[:i:i], q.waiting[i+1:]...)
			return true
		}
	}
	return false
}

// send runs the calls of stream k until its queue is empty, then marks it
// idle (and forgets it, so idle streams cost nothing).
func (b *batcher[K, R]) send(k K, q *batchQueue[R]) {
	for {
		b.mu.Lock()
		batch := b.take(q)
		if len(batch) == 0 && len(q.waiting) == 0 {
			q.busy = false
			delete(b.streams, k)
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		if len(batch) > 0 {
			b.call(k, batch)
		}
	}
}

// take removes the next call's requests from q (b.mu held), answering those
// left out for their ended contexts (dropEnded).
func (b *batcher[K, R]) take(q *batchQueue[R]) []R {
	var batch []R
	weight, n := 0, 0
	for _, r := range q.waiting {
		if len(batch) == b.max {
			break
		}
		w := 1
		if b.weight != nil {
			w = b.weight(r)
		}
		if b.budget > 0 && len(batch) > 0 && weight+w > b.budget {
			break
		}
		n++
		if st := r.state(); b.dropEnded && st.ctx.Err() != nil {
			st.answer(fmt.Errorf("%w: %w", ErrNotSent, st.ctx.Err()))
			continue
		}
		batch = append(batch, r)
		weight += w
	}
	q.waiting = q.waiting[n:]
	return batch
}
