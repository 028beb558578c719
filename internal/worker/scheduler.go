package worker

import (
	"container/heap"
	"context"
	"runtime"
	"sync"
	"time"
)

// scheduler releases waiters at local instants with sub-millisecond
// precision for the whole process at the cost of one timer: its one
// goroutine sleeps on a timer until spin before the earliest instant it
// holds, then approaches it in short precise sleeps and a final spin
// (approach) and releases every waiter whose instant has come, all in the
// same spin. It runs only
// while it holds a waiter: an idle scheduler has no goroutine.
//
// Instants are compared on the monotonic clock (times from time.Now or
// Clock.Local carry it). The zero scheduler is not usable; newScheduler
// returns one. Its methods are safe for concurrent use.
type scheduler struct {
	spin time.Duration

	mu      sync.Mutex
	waiters waitHeap
	running bool          // the goroutine runs (or is about to)
	kick    chan struct{} // wakes the goroutine's timer: the earliest instant changed
}

// newScheduler returns a scheduler that spins the last spin (≥ 0) before
// each instant.
func newScheduler(spin time.Duration) *scheduler {
	return &scheduler{spin: max(spin, 0), kick: make(chan struct{}, 1)}
}

// waiter is one call of Wait: released (ch closed) at at.
type waiter struct {
	at    time.Time
	ch    chan struct{}
	index int // in the heap; -1 once released or removed
}

// Wait blocks until the local instant at or ctx's end, whichever comes
// first, and returns ctx.Err() (nil when at came first and ctx is live). An
// instant already past returns at once. A waiter whose ctx ends is removed
// at once: nothing of it stays behind.
func (s *scheduler) Wait(ctx context.Context, at time.Time) error {
	if !time.Now().Before(at) {
		return ctx.Err()
	}
	w := &waiter{at: at, ch: make(chan struct{})}
	s.mu.Lock()
	heap.Push(&s.waiters, w)
	first := w.index == 0
	start := !s.running
	s.running = true
	s.mu.Unlock()
	switch {
	case start:
		go s.run()
	case first:
		s.wake()
	}
	select {
	case <-w.ch:
		return ctx.Err()
	case <-ctx.Done():
	}
	s.mu.Lock()
	if w.index >= 0 {
		first := w.index == 0
		heap.Remove(&s.waiters, w.index)
		if first {
			s.wake() // the goroutine's timer aims at a waiter that left
		}
	}
	s.mu.Unlock()
	return ctx.Err()
}

// wake nudges the goroutine to re-read the earliest instant.
func (s *scheduler) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// run is the goroutine: until no waiter is left, sleep until spin before
// the earliest instant (or a kick), then release what is due, spinning
// while the earliest instant is less than spin away.
func (s *scheduler) run() {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		s.mu.Lock()
		now := time.Now()
		for len(s.waiters) > 0 && !s.waiters[0].at.After(now) {
			w := heap.Pop(&s.waiters).(*waiter)
			close(w.ch)
		}
		if len(s.waiters) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		next := s.waiters[0].at
		s.mu.Unlock()
		d := next.Sub(now)
		if d > s.spin {
			timer.Reset(d - s.spin)
			select {
			case <-timer.C:
			case <-s.kick:
				timer.Stop()
			}
			continue
		}
		approach(d)
	}
}

// The last stretch before an instant: Go's timers wake up to a millisecond
// late (the runtime's poller waits in whole milliseconds), so within spin
// of an instant the goroutine blocks its thread in short precise sleeps
// (nanosleep: ~50 µs of slack on Linux) while more than preciseSlack is
// left, at most preciseChunk at a time (a waiter that arrives meanwhile with
// an earlier instant is seen within it), then yields in a loop for the
// rest. A busy spin over the whole of spin would cost a processor whenever
// instants are dense.
const (
	preciseSlack = 100 * time.Microsecond
	preciseChunk = 200 * time.Microsecond
)

// approach waits part of d, the time left to the earliest instant.
func approach(d time.Duration) {
	if d > preciseSlack {
		PreciseSleep(min(d-preciseSlack, preciseChunk))
		return
	}
	runtime.Gosched()
}

// waitHeap is a min-heap of waiters by instant (container/heap).
type waitHeap []*waiter

func (h waitHeap) Len() int           { return len(h) }
func (h waitHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h waitHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *waitHeap) Push(x any) {
	w := x.(*waiter)
	w.index = len(*h)
	*h = append(*h, w)
}
func (h *waitHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	w.index = -1
	*h = old[:len(old)-1]
	return w
}
