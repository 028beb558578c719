package store

import (
	"context"
	"errors"
	"testing"
)

type weighed struct {
	batchState
	w int
}

// A call takes the waiting requests in arrival order up to max requests
// and budget of weight (a request heavier than the budget goes alone); a
// request whose caller gave up is answered ErrNotSent and left out.
func TestBatcherTakesInOrderWithinBounds(t *testing.T) {
	t.Parallel()
	b := newBatcher[int, *weighed](3, nil)
	b.budget, b.weight, b.dropEnded = 10, func(r *weighed) int { return r.w }, true
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	mk := func(ctx context.Context, w int) *weighed {
		return &weighed{batchState: batchState{ctx: ctx, done: make(chan struct{})}, w: w}
	}
	live := context.Background()
	a, dropped, c, d, heavy, f, g := mk(live, 4), mk(gone, 1), mk(live, 5), mk(live, 2), mk(live, 12), mk(live, 1), mk(live, 1)
	q := &batchQueue[*weighed]{waiting: []*weighed{a, dropped, c, d, heavy, f, g}}
	takes := [][]*weighed{{a, c}, {d}, {heavy}, {f, g}}
	for i, want := range takes {
		got := b.take(q)
		if len(got) != len(want) {
			t.Fatalf("call %d: %d requests, want %d", i, len(got), len(want))
		}
		for k := range want {
			if got[k] != want[k] {
				t.Fatalf("call %d: request %d is not the one expected", i, k)
			}
		}
	}
	if len(q.waiting) != 0 {
		t.Fatalf("%d left waiting", len(q.waiting))
	}
	select {
	case <-dropped.done:
		if !errors.Is(dropped.err, ErrNotSent) || !errors.Is(dropped.err, context.Canceled) {
			t.Fatalf("the dropped request: %v", dropped.err)
		}
	default:
		t.Fatal("the dropped request was not answered")
	}
}
