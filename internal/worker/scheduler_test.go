package worker

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// idle reports whether s holds no waiter and its goroutine has ended.
func (s *scheduler) idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiters) == 0 && !s.running
}

// TestSchedulerReleasesEveryWaiterNeverEarly: 300 waiters at random
// instants up to 60 ms away, added in random order from their own
// goroutines, each return at or after its instant, and the scheduler ends
// its goroutine when the last one left.
func TestSchedulerReleasesEveryWaiterNeverEarly(t *testing.T) {
	t.Parallel()
	s := newScheduler(time.Millisecond)
	base := time.Now().Add(5 * time.Millisecond)
	const n = 300
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		early []time.Duration
		late  []time.Duration
	)
	for range n {
		at := base.Add(time.Duration(rand.N(60_000)) * time.Microsecond)
		wg.Go(func() {
			if err := s.Wait(context.Background(), at); err != nil {
				t.Errorf("Wait = %v", err)
			}
			off := time.Since(at)
			mu.Lock()
			defer mu.Unlock()
			if off < 0 {
				early = append(early, off)
			}
			late = append(late, off)
		})
	}
	wg.Wait()
	if len(early) > 0 {
		t.Fatalf("%d of %d waiters released before their instant, e.g. %s", len(early), n, early[0])
	}
	if len(late) != n {
		t.Fatalf("%d of %d waiters returned", len(late), n)
	}
	redistest.Poll(t, time.Second, "the scheduler's goroutine to end", s.idle)
}

// TestSchedulerReleasesInOrderOfInstant: waiters added latest first are
// released earliest first. The order is read from the scheduler's own heap
// (never a released waiter while an earlier one is still held), not from
// the waiters' goroutines, which a busy machine may run in any order; and
// the first release comes before the last waiter's instant, 700 ms after
// the first's (a scheduler that held everyone until the last would keep
// the order).
func TestSchedulerReleasesInOrderOfInstant(t *testing.T) {
	t.Parallel()
	s := newScheduler(time.Millisecond)
	base := time.Now().Add(200 * time.Millisecond)
	const n, spacing = 8, 100 * time.Millisecond
	var wg sync.WaitGroup
	for i := n - 1; i >= 0; i-- {
		at := base.Add(time.Duration(i) * spacing)
		wg.Go(func() { _ = s.Wait(context.Background(), at) })
	}
	held := func() []time.Time {
		s.mu.Lock()
		defer s.mu.Unlock()
		out := make([]time.Time, len(s.waiters))
		for k, w := range s.waiters {
			out[k] = w.at
		}
		return out
	}
	redistest.Poll(t, 5*time.Second, "every waiter registered", func() bool {
		return len(held()) == n || time.Now().After(base)
	})
	if got := len(held()); got != n {
		t.Fatalf("only %d of %d waiters registered before the first instant: the machine is too slow for this test's 200 ms", got, n)
	}
	for left := n; left > 0; {
		at := held()
		if len(at) == left {
			runtime.Gosched()
			continue
		}
		if left == n && len(at) == 0 {
			t.Fatalf("every waiter released at once, %s after the first instant", time.Since(base))
		}
		left = len(at)
		// The left waiters must be the latest: instants base+(n-left)·spacing on.
		first := base.Add(time.Duration(n-left) * spacing)
		for _, a := range at {
			if a.Before(first) {
				t.Fatalf("a waiter at base+%s is still held after a later one was released", a.Sub(base))
			}
		}
	}
	wg.Wait()
}

// TestSchedulerAnEarlierWaiterWakesTheTimer: the goroutine sleeps towards a
// waiter an hour away; a waiter 5 ms away is still released, and cancelling
// the far one removes it and ends the goroutine.
func TestSchedulerAnEarlierWaiterWakesTheTimer(t *testing.T) {
	t.Parallel()
	s := newScheduler(time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	far := make(chan error, 1)
	go func() { far <- s.Wait(ctx, time.Now().Add(time.Hour)) }()
	redistest.Poll(t, time.Second, "the far waiter to be held", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.waiters) == 1
	})
	near := time.Now().Add(5 * time.Millisecond)
	if err := s.Wait(context.Background(), near); err != nil || time.Now().Before(near) {
		t.Fatalf("near Wait = %v at %s before its instant", err, time.Until(near))
	}
	cancel()
	if err := <-far; !errors.Is(err, context.Canceled) {
		t.Fatalf("far Wait = %v, want context.Canceled", err)
	}
	redistest.Poll(t, time.Second, "the scheduler to drop the far waiter and end", s.idle)
}

// TestSchedulerCancellationReleasesWaiters: cancelled waiters return
// ctx.Err() at once and leave nothing in the heap; the others are still
// released.
func TestSchedulerCancellationReleasesWaiters(t *testing.T) {
	t.Parallel()
	s := newScheduler(time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range 2 * n {
		wctx, at := ctx, time.Now().Add(time.Hour)
		if i%2 == 1 {
			wctx, at = context.Background(), time.Now().Add(30*time.Millisecond)
		}
		wg.Go(func() { errs <- s.Wait(wctx, at) })
	}
	redistest.Poll(t, time.Second, "every waiter to be held or released", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.waiters) >= n
	})
	cancel()
	wg.Wait()
	close(errs)
	var canceled, released int
	for err := range errs {
		switch {
		case errors.Is(err, context.Canceled):
			canceled++
		case err == nil:
			released++
		}
	}
	if canceled != n || released != n {
		t.Fatalf("%d canceled, %d released; want %d each", canceled, released, n)
	}
	redistest.Poll(t, time.Second, "the heap to empty and the goroutine to end", s.idle)
}

// TestSchedulerPastInstantReturnsAtOnce: no waiter is held for an instant
// already past, and a done ctx is reported.
func TestSchedulerPastInstantReturnsAtOnce(t *testing.T) {
	t.Parallel()
	s := newScheduler(time.Millisecond)
	if err := s.Wait(context.Background(), time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Wait(ctx, time.Now().Add(time.Hour)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a done ctx = %v", err)
	}
	redistest.Poll(t, time.Second, "the scheduler to drop the waiter and end", s.idle)
}
