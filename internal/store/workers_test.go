package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

func TestWorkerCapacityAndInFlight(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if n, err := e.store.Capacity(e.ctx); err != nil || n != 0 {
		t.Fatalf("no workers: %d, %v", n, err)
	}
	for _, w := range []struct {
		id   string
		conc int
		ttl  time.Duration
	}{{"w1", 10, 5 * time.Second}, {"w2", 5, time.Second}} {
		if err := e.store.Heartbeat(e.ctx, w.id, w.conc, w.ttl); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := e.store.Capacity(e.ctx); n != 15 {
		t.Fatalf("capacity %d, want 15", n)
	}
	e.clock.Advance(time.Second) // w2's heartbeat ends
	if n, _ := e.store.Capacity(e.ctx); n != 10 {
		t.Fatalf("capacity %d, want 10 after w2 expired", n)
	}
	if left := e.rdb.HKeys(e.ctx, e.store.WorkersKey()).Val(); len(left) != 1 || left[0] != "@1:w1" { // @1: runs pre-claimed jobs (fleet.Heartbeat)
		t.Fatalf("workers hash %v, want the expired entry deleted", left)
	}
	if err := e.store.Heartbeat(e.ctx, "", 1, time.Second); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty worker id: %v", err)
	}

	// In flight: released and running jobs, across shards.
	e.seed(params(func(p *Params) { p.Burst = 3 }))
	e.enqueue("acme", item(`1`), item(`2`), item(`3`))
	e.enqueue("globex", item(`1`))
	rel := e.passTenant("acme", time.Second, -1)
	e.passTenant("globex", time.Second, -1)
	inFlight := func() int {
		t.Helper()
		n, err := e.store.InFlight(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		// FreeCapacity reads both in one round trip.
		free, err := e.store.FreeCapacity(e.ctx)
		if want := max(e.store.capacityOrFail(t)-n, 0); err != nil || free != want {
			t.Fatalf("free capacity %d, %v; want %d", free, err, want)
		}
		return n
	}
	if n := inFlight(); n != 4 {
		t.Fatalf("in flight %d, want 4 released", n)
	}
	c := e.claimAt(rel[0])
	if n := inFlight(); n != 4 {
		t.Fatalf("in flight %d after a claim, want 4 (running counts)", n)
	}
	e.finish(c.ID, c.Gen, wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200}, FinishConfig{})
	if n := inFlight(); n != 3 {
		t.Fatalf("in flight %d after a finish, want 3", n)
	}
	e.requireConsistent()
}

func (s *Store) capacityOrFail(t *testing.T) int {
	t.Helper()
	n, err := s.Capacity(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFreeCapacityLoadsItsScript: after SCRIPT FLUSH (a restarted Redis),
// the pipelined reading comes back NOSCRIPT; FreeCapacity loads the script
// and reads again. Overcommitted capacity reads as 0.
func TestFreeCapacityLoadsItsScript(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := e.store.Heartbeat(e.ctx, "w1", 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	e.seed(params(func(p *Params) { p.Burst = 3 }))
	e.enqueue("acme", item(`1`), item(`2`), item(`3`))
	e.passTenant("acme", time.Second, -1)
	if err := e.rdb.ScriptFlush(e.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	free, err := e.store.FreeCapacity(e.ctx)
	if err != nil || free != 0 {
		t.Fatalf("free capacity %d, %v; want 0 (1 worker slot, 3 released)", free, err)
	}
	if err := e.store.Heartbeat(e.ctx, "w2", 10, time.Minute); err != nil {
		t.Fatal(err)
	}
	if free, err := e.store.FreeCapacity(e.ctx); err != nil || free != 8 {
		t.Fatalf("free capacity %d, %v; want 11 − 3", free, err)
	}
}
