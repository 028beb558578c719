package dispatch

import (
	"errors"
	"testing"
	"time"
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
	if left := e.rdb.HKeys(e.ctx, e.store.keys.workers()).Val(); len(left) != 1 || left[0] != "w1" {
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
		return n
	}
	if n := inFlight(); n != 4 {
		t.Fatalf("in flight %d, want 4 released", n)
	}
	c := e.claimAt(rel[0])
	if n := inFlight(); n != 4 {
		t.Fatalf("in flight %d after a claim, want 4 (running counts)", n)
	}
	e.finish(c.ID, c.Gen, AttemptOutcome{Kind: FinishSuccess, Status: 200}, FinishConfig{})
	if n := inFlight(); n != 3 {
		t.Fatalf("in flight %d after a finish, want 3", n)
	}
	e.requireConsistent()
}
