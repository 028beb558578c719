package store

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

// A tenant with a backlog whose jobs alternate between a destination whose
// circuit is open and a healthy one: the first job to the open destination
// is deferred at its claim; from then on the pass holds the others
// (record field dst, pass.lua X.hold) without a slot, so the healthy jobs
// go at the tenant's whole rate, one interval apart, as if the others were
// not there (docs/design.md §4.5); the held jobs wait for the circuit and
// come back when it closes.
func TestCircuitHeldByPass(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Concurrency = 100_000, 1, 10 })) // 10/s
	items := make([]Item, 40)
	for i := range items {
		if i%2 == 0 {
			items[i] = item(fmt.Sprintf(`{"bad":%d}`, i))
			items[i].Destination = dest
		} else {
			items[i] = item(fmt.Sprintf(`{"good":%d}`, i))
			items[i].Destination = "https://ok.example.com:443"
		}
	}
	rs := e.enqueue("acme", items...)
	bad := map[string]bool{}
	for i, r := range rs {
		bad[r.ID] = i%2 == 0
	}
	s := newSim(e, "acme", prodPass)
	s.waitEarly = true
	s.hold = func() time.Duration { return time.Millisecond }
	const wait = time.Minute
	s.outcomeOf = func(j ClaimedJob) wire.AttemptOutcome {
		if bytes.Contains(j.Body, []byte(`"bad"`)) {
			return wire.AttemptOutcome{Kind: wire.FinishDeferred, Pause: wait, Error: dest}
		}
		return wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200}
	}
	s.check = func(string) { e.requireConsistent() }
	start := e.clock.Now()
	for s.succeeded < 20 && e.clock.Now().Before(start.Add(5*time.Second)) {
		s.passAt(e.clock.Now().Add(10 * ms))
	}
	var badSlots int
	var good []time.Time
	for _, r := range s.released {
		if bad[r.ID] {
			badSlots++
		} else {
			good = append(good, r.Slot)
		}
	}
	if badSlots != 1 || s.succeeded != 20 {
		t.Fatalf("released %d jobs to the open destination (want 1: the first, deferred at its claim), %d healthy succeeded (want 20)", badSlots, s.succeeded)
	}
	// The healthy jobs go one interval apart: the held ones took no slot
	// (the first two share the deferred job's refunded slot).
	for i := 2; i < len(good); i++ {
		if d := good[i].Sub(good[i-1]); d != 100*ms {
			t.Fatalf("healthy job %d %s after the one before, want 100ms: %v", i, d, good)
		}
	}
	st := e.state("acme")
	tc, err := e.store.TenantCircuits(e.ctx, "acme", e.clock.Now())
	if err != nil || len(tc) != 1 || tc[0].Destination != dest || st.Running != 0 || st.Released != 0 {
		t.Fatalf("after the run: circuits %+v %v, running %d, released %d", tc, err, st.Running, st.Released)
	}
	// The circuit closes: every held job comes back now, and goes.
	if n, err := e.store.WakeDeferred(e.ctx, "acme", dest); err != nil || n != 20 {
		t.Fatalf("wake: %d %v, want the 20 held jobs", n, err)
	}
	s.outcomeOf = nil
	for s.succeeded < 40 && e.clock.Now().Before(start.Add(time.Minute)) {
		s.passAt(e.clock.Now().Add(10 * ms))
	}
	if s.succeeded != 40 {
		t.Fatalf("after the closing: %d succeeded, want 40", s.succeeded)
	}
	if tc, _ := e.store.TenantCircuits(e.ctx, "acme", e.clock.Now()); len(tc) != 0 {
		t.Fatalf("closed, yet listed: %+v", tc)
	}
	e.requireConsistent()
}

// The gate's own deferrals are not held by the pass: the scout, back at the
// backoff's end, goes to the gate (to probe) although the tenant's later
// deferral holds its new jobs to the destination longer.
func TestCircuitScoutNotHeld(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Concurrency = 100_000, 1, 10 }))
	to := func(body string) Item {
		it := item(body)
		it.Destination = dest
		return it
	}
	defer_ := func(id string, pause time.Duration) {
		t.Helper()
		c := e.attempt(id)
		if st := e.finish(c.ID, c.Gen, wire.AttemptOutcome{Kind: wire.FinishDeferred, Pause: pause, Error: dest}, FinishConfig{}); st != StateRetrying {
			t.Fatalf("deferral of %s: %s", id, st)
		}
	}
	scout := e.enqueueOne("acme", to(`1`))
	defer_(scout.ID, 5*time.Second)         // the scout: until the backoff's end
	long := e.enqueueOne("acme", item(`2`)) // no destination known: the pass cannot hold it
	defer_(long.ID, time.Minute)            // held long: the tenant's due is now a minute away
	longDue := e.job(long.ID).Due
	held := e.enqueueOne("acme", to(`3`))
	if rel := e.passTenant("acme", 100*ms, 50*ms); len(rel) != 0 {
		t.Fatalf("released %+v, want the new job held", rel)
	}
	if j := e.job(held.ID); j.State != StateRetrying || !j.Due.Equal(longDue) || j.Attempt != 0 {
		t.Fatalf("held job: %s due %s attempt %d, want retrying until %s, no attempt", j.State, j.Due, j.Attempt, longDue)
	}
	e.clock.Set(e.job(scout.ID).Due)
	rel := e.passTenant("acme", 100*ms, 50*ms)
	if len(rel) != 1 || rel[0].ID != scout.ID {
		t.Fatalf("at the backoff's end: released %+v, want the scout %s", rel, scout.ID)
	}
	e.requireConsistent()
}

// A deferral the gate decided before the circuit closed, finished after its
// tenant was woken for the destination, is due now and leaves nothing that
// would hold the tenant's next jobs (the wake-up is not lost).
func TestCircuitDeferralAfterWake(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Concurrency = 100_000, 1, 10 }))
	it := item(`1`)
	it.Destination = dest
	first := e.enqueueOne("acme", it)
	c := e.attempt(first.ID) // claimed; the gate says wait…
	e.clock.Advance(ms)
	if _, err := e.store.WakeDeferred(e.ctx, "acme", dest); err != nil { // …the probe closes the circuit…
		t.Fatal(err)
	}
	e.clock.Advance(ms)
	o := wire.AttemptOutcome{Kind: wire.FinishDeferred, Pause: time.Minute, Error: dest}
	if st := e.finish(c.ID, c.Gen, o, FinishConfig{}); st != StateRetrying { // …and the deferral comes
		t.Fatalf("deferral: %s", st)
	}
	if j := e.job(first.ID); !j.Due.Equal(e.clock.Now()) || j.Attempt != 0 {
		t.Fatalf("late deferral: due in %s, attempt %d; want now, 0", j.Due.Sub(e.clock.Now()), j.Attempt)
	}
	if tc, _ := e.store.TenantCircuits(e.ctx, "acme", e.clock.Now()); len(tc) != 0 {
		t.Fatalf("late deferral recorded: %+v", tc)
	}
	next := e.enqueueOne("acme", it)
	rel := e.passTenant("acme", 100*ms, 50*ms)
	if len(rel) != 2 || rel[0].ID != first.ID || rel[1].ID != next.ID {
		t.Fatalf("released %+v, want %s again, then the next job %s (not held)", rel, first.ID, next.ID)
	}
	e.claimAt(rel[0])
	// A deferral of a job claimed after the wake is recorded as usual.
	c = e.claimAt(rel[1])
	if st := e.finish(c.ID, c.Gen, o, FinishConfig{}); st != StateRetrying {
		t.Fatalf("deferral: %s", st)
	}
	if tc, _ := e.store.TenantCircuits(e.ctx, "acme", e.clock.Now()); len(tc) != 1 {
		t.Fatalf("a deferral after the wake: circuits %+v, want the destination", tc)
	}
	e.requireConsistent()
}

// A destination with a space, or longer than 1024 bytes, is refused before
// anything is stored.
func TestEnqueueDestinationChecked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(*Params) {}))
	for _, d := range []string{"https://a b:443", "https://" + strings.Repeat("a", 1020) + ":443"} {
		it := item(`1`)
		it.Destination = d
		if _, err := e.store.Enqueue(e.ctx, "acme", []Item{it}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("destination %.20q…: %v, want ErrInvalid", d, err)
		}
	}
	if st := e.state("acme"); st.Backlog != 0 {
		t.Fatalf("stored %d jobs, want none", st.Backlog)
	}
}
