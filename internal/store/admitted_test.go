package store

import (
	"testing"
	"time"
)

// AdmittedSince counts the tokens admitted between two reads of a tenant,
// across a minute boundary, and only the last two minutes after a gap.
func TestAdmittedSince(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.AdmitBurst = 1000 }))
	e.clock.Set(epoch.Add(30 * time.Second))
	for range 5 {
		e.enqueueOne("acme", item(`{}`))
	}
	a := e.state("acme")
	for range 7 {
		e.enqueueOne("acme", item(`{}`))
	}
	b := e.state("acme")
	if got := b.AdmittedSince(a); got != 7 {
		t.Fatalf("same minute: %d admitted, want 7", got)
	}
	e.clock.Set(epoch.Add(70 * time.Second)) // the next minute
	for range 4 {
		e.enqueueOne("acme", item(`{}`))
	}
	c := e.state("acme")
	if got := c.AdmittedSince(a); got != 11 {
		t.Fatalf("across the minute: %d admitted, want 7 + 4", got)
	}
	if got := a.AdmittedSince(c); got != 0 {
		t.Fatalf("backwards: %d, want 0", got)
	}
	e.clock.Set(epoch.Add(200 * time.Second)) // two minutes on
	e.enqueueOne("acme", item(`{}`))
	if got := e.state("acme").AdmittedSince(a); got != 1 {
		t.Fatalf("after a gap: %d, want the last two minutes' 1", got)
	}
}

// Workers counts the live workers and adds their concurrency.
func TestWorkersCountsLiveHeartbeats(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for id, conc := range map[string]int{"w1": 3, "w2": 5} {
		if err := e.store.Heartbeat(e.ctx, id, conc, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.store.Heartbeat(e.ctx, "w3", 7, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	e.clock.Set(e.clock.Now().Add(time.Second)) // w3's heartbeat expired
	live, capacity, err := e.store.Workers(e.ctx)
	if err != nil || live != 2 || capacity != 8 {
		t.Fatalf("workers: %d live, capacity %d, %v; want 2, 8", live, capacity, err)
	}
}
