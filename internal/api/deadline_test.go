package api

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
)

// TestRedisBudgetStartsAtFirstUse: the budget's clock starts when someone
// first asks for the deadline (a Redis call), not when it is made (before
// the body is read).
func TestRedisBudgetStartsAtFirstUse(t *testing.T) {
	t.Parallel()
	b := newRedisBudget(context.Background(), time.Hour)
	defer b.stop()
	if b.run != nil {
		t.Fatal("the budget started before its first use")
	}
	before := time.Now()
	d, ok := b.Deadline()
	if !ok || d.Before(before.Add(time.Hour)) || d.After(time.Now().Add(time.Hour)) {
		t.Errorf("Deadline() = %v, %v; want an hour after the first use", d, ok)
	}
	if b.Err() != nil || spentBeforeUse(b) {
		t.Errorf("Err() = %v, spent %v: want a running budget", b.Err(), spentBeforeUse(b))
	}
	b.stop()
	if !errors.Is(b.Err(), context.Canceled) {
		t.Errorf("after stop, Err() = %v", b.Err())
	}

	spent := newRedisBudget(context.Background(), -time.Millisecond)
	defer spent.stop()
	if !errors.Is(spent.Err(), context.DeadlineExceeded) || !spentBeforeUse(context.WithValue(spent, budgetKey{}, spent)) {
		t.Errorf("a used-up budget: Err() = %v, spentBeforeUse %v", spent.Err(), spentBeforeUse(spent))
	}
}

// TestMayHaveRun classifies Redis failures of a write: only those after
// which the command may have reached Redis give "outcome unknown".
func TestMayHaveRun(t *testing.T) {
	t.Parallel()
	running := newRedisBudget(context.Background(), time.Hour)
	defer running.stop()
	spent := newRedisBudget(context.Background(), 0)
	defer spent.stop()
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	rdb, _ := redistest.New(t)
	reply := rdb.Do(context.Background(), "NOSUCHCOMMAND").Err() // an error reply from Redis
	var rerr redis.Error
	if !errors.As(reply, &rerr) {
		t.Fatalf("NOSUCHCOMMAND: %v (%T), want a redis.Error", reply, reply)
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"read timeout", running, fmt.Errorf("enqueue: %w", timeout), true},
		{"context deadline after sending", running, context.DeadlineExceeded, true},
		{"connection reset", running, &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}, true},
		{"budget spent before the call", spent, context.DeadlineExceeded, false},
		{"Redis error reply", running, fmt.Errorf("script enqueue: %w", reply), false},
		{"client closed", running, redis.ErrClosed, false},
		{"dial refused", running, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, false},
		{"pool timeout", running, redis.ErrPoolTimeout, false},
		{"budget ended while waiting for a shared enqueue call", running,
			fmt.Errorf("enqueue for tenant %q: %w: %w", "t", store.ErrNotSent, context.DeadlineExceeded), false},
	} {
		if got := mayHaveRun(tc.ctx, tc.err); got != tc.want {
			t.Errorf("%s: mayHaveRun = %v, want %v", tc.name, got, tc.want)
		}
	}
}
