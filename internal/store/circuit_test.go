package store

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

const dest = "https://api.example.com:443"

// gate asks for job of tenant acme, with max backoff 1m.
func (e *env) gate(job string, life time.Duration) Gate {
	e.t.Helper()
	g, err := e.store.CircuitGate(e.ctx, dest, job, "acme", life, CircuitConfig{Backoff: time.Second, MaxBackoff: time.Minute})
	if err != nil {
		e.t.Fatal(err)
	}
	return g
}

func (e *env) report(job string, failed bool, cfg CircuitConfig) CircuitReport {
	e.t.Helper()
	r, err := e.store.CircuitRecord(e.ctx, dest, job, failed, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *env) circuits() []Circuit {
	e.t.Helper()
	cs, now, err := e.store.Circuits(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	if !now.Equal(e.clock.Now()) {
		e.t.Fatalf("circuits' now %s, want the clock's %s", now, e.clock.Now())
	}
	return cs
}

// A circuit on a fake clock: an answer forgets the failures before it; the
// Nth consecutive failure opens it; jobs wait until the backoff's end; then
// one probe (the others wait for its deadline); a failed probe opens it
// again for twice the backoff, up to the cap; outcomes of other jobs
// change nothing while it is open; a probe lost with its worker is
// replaced after its deadline; the probe's answer closes it.
func TestCircuitLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := CircuitConfig{Failures: 3, Backoff: 10 * time.Second, MaxBackoff: 35 * time.Second}
	life := 5 * time.Second

	for _, job := range []string{"a:1", "b:1"} {
		if r := e.report(job, true, cfg); r.What != "counted" || r.State != CircuitClosed {
			t.Fatalf("failure below the threshold: %+v", r)
		}
	}
	if cs := e.circuits(); len(cs) != 1 || cs[0].State != CircuitClosed || cs[0].Failures != 2 {
		t.Fatalf("two failures: %+v", cs)
	}
	if r := e.report("c:1", false, cfg); r.What != "clean" {
		t.Fatalf("an answer while closed: %+v", r)
	}
	if cs := e.circuits(); len(cs) != 0 {
		t.Fatalf("an answer leaves %+v, want no circuit (not consecutive)", cs)
	}

	for i, job := range []string{"d:1", "e:1", "f:1"} {
		r := e.report(job, true, cfg)
		if i < 2 && r.What != "counted" || i == 2 && (r.What != "opened" || !r.Until.Equal(e.clock.Now().Add(10*time.Second))) {
			t.Fatalf("failure %d: %+v", i+1, r)
		}
	}
	if g := e.gate("g:1", life); g.Decision != GateWait || g.Wait != 10*time.Second {
		t.Fatalf("open: %+v, want wait 10s (the scout)", g)
	}
	if r := e.report("h:1", true, cfg); r.What != "ignored" || r.State != CircuitOpen {
		t.Fatalf("a failure sent before the opening: %+v", r)
	}
	if r := e.report("h:2", false, cfg); r.What != "ignored" {
		t.Fatalf("an answer to a job sent before the opening: %+v", r)
	}

	// The backoff doubles with each failed probe, up to the cap.
	for i, want := range []time.Duration{20 * time.Second, 35 * time.Second, 35 * time.Second} {
		e.clock.Advance(time.Second)
		if g := e.gate("w:1", life); g.Decision != GateWait {
			t.Fatalf("round %d: before the backoff's end: %+v", i, g)
		}
		cs := e.circuits()
		e.clock.Set(cs[0].Until)
		probe := "p:" + string(rune('1'+i))
		if g := e.gate(probe, life); g.Decision != GateProbe {
			t.Fatalf("round %d: at the backoff's end: %+v, want the probe", i, g)
		}
		if g := e.gate("x:1", life); g.Decision != GateWait || g.Wait < life {
			t.Fatalf("round %d: a second job while the probe is out: %+v, want wait ≥ %s", i, g, life)
		}
		if r := e.report("x:1", true, cfg); r.What != "ignored" || r.State != CircuitHalfOpen {
			t.Fatalf("round %d: another job's failure while half-open: %+v", i, r)
		}
		r := e.report(probe, true, cfg)
		if r.What != "reopened" || !r.Until.Equal(e.clock.Now().Add(want)) {
			t.Fatalf("round %d: failed probe: %+v, want open for %s", i, r, want)
		}
		if cs := e.circuits(); cs[0].Backoff != want || cs[0].State != CircuitOpen {
			t.Fatalf("round %d: %+v", i, cs)
		}
	}

	// A probe that never reports is replaced after its deadline.
	e.clock.Set(e.circuits()[0].Until)
	if g := e.gate("lost:1", life); g.Decision != GateProbe {
		t.Fatalf("probe: %+v", g)
	}
	e.clock.Advance(life)
	if g := e.gate("next:1", life); g.Decision != GateProbe {
		t.Fatalf("after the lost probe's deadline: %+v, want a new probe", g)
	}
	if r := e.report("lost:1", false, cfg); r.What != "ignored" {
		t.Fatalf("the replaced probe's answer: %+v", r)
	}
	if r := e.report("next:1", false, cfg); r.What != "closed" || r.State != CircuitClosed {
		t.Fatalf("the probe's answer: %+v", r)
	}
	if cs := e.circuits(); len(cs) != 0 {
		t.Fatalf("closed, yet %+v", cs)
	}
	if g := e.gate("y:1", life); g.Decision != GateSend {
		t.Fatalf("closed: %+v", g)
	}
}

// While open, one held job — the scout — comes back at the backoff's end;
// every other is held until then + the probe life + the max backoff, its
// tenant recorded; the probe's answer (or a close by hand) hands back those
// tenants, and the record is gone.
func TestCircuitScout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := CircuitConfig{Failures: 1, Backoff: 10 * time.Second, MaxBackoff: time.Minute}
	life := 5 * time.Second
	e.report("a:1", true, cfg)
	gate := func(job, tenant string) Gate {
		g, err := e.store.CircuitGate(e.ctx, dest, job, tenant, life, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	if g := gate("s:1", "acme"); g.Wait != 10*time.Second {
		t.Fatalf("the first held job: %+v, want the scout's 10s", g)
	}
	e.clock.Advance(time.Second)
	if g := gate("s:1", "acme"); g.Wait != 9*time.Second {
		t.Fatalf("the scout again: %+v, want 9s", g)
	}
	long := 9*time.Second + life + time.Minute
	for _, tn := range []string{"acme", "bravo"} {
		if g := gate("h:"+tn, tn); g.Decision != GateWait || g.Wait != long {
			t.Fatalf("another job of %s: %+v, want held %s", tn, g, long)
		}
	}
	waiters := e.rdb.SMembers(e.ctx, e.store.keys.circuitWaiters(dest)).Val()
	if len(waiters) != 2 {
		t.Fatalf("waiters %v, want acme and bravo", waiters)
	}
	e.clock.Advance(9 * time.Second)
	if g := gate("s:1", "acme"); g.Decision != GateProbe {
		t.Fatalf("the scout at the backoff's end: %+v, want the probe", g)
	}
	if r := e.report("s:1", false, cfg); r.What != "closed" || r.Woken != 0 {
		t.Fatalf("the probe's answer: %+v", r)
	}
	if n := e.rdb.Exists(e.ctx, e.store.keys.circuitWaiters(dest)).Val(); n != 0 {
		t.Fatal("the waiters outlived the close")
	}
	// The scout is replaced once its deadline passed (it never came back).
	e.report("a:2", true, cfg)
	if g := gate("gone:1", "acme"); g.Wait != 10*time.Second {
		t.Fatalf("scout: %+v", g)
	}
	e.clock.Advance(10*time.Second + life)
	e.report("p:1", true, cfg) // a closed-state failure is not counted: the circuit is open, so ignored
	if g := gate("p:2", "acme"); g.Decision != GateProbe {
		t.Fatalf("%+v", g)
	}
	if r := e.report("p:2", true, cfg); r.What != "reopened" {
		t.Fatalf("%+v", r)
	}
	if g := gate("next:1", "acme"); g.Wait != 20*time.Second {
		t.Fatalf("after the lost scout's deadline a new scout: %+v, want 20s", g)
	}
	if _, err := e.store.CircuitGate(e.ctx, dest, "x:1", "", life, cfg); !errors.Is(err, ErrInvalid) {
		t.Fatalf("no tenant: %v", err)
	}
}

// CloseCircuit closes by hand; a closed circuit not heard of for an hour
// leaves the listing; bad arguments change nothing.
func TestCircuitCloseAndForget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := CircuitConfig{Failures: 1, Backoff: time.Minute}
	if r := e.report("a:1", true, cfg); r.What != "opened" {
		t.Fatalf("%+v", r)
	}
	if ok, err := e.store.CloseCircuit(e.ctx, dest); err != nil || !ok {
		t.Fatalf("close: %v %v", ok, err)
	}
	if ok, err := e.store.CloseCircuit(e.ctx, dest); err != nil || ok {
		t.Fatalf("close again: %v %v, want false", ok, err)
	}
	if g := e.gate("b:1", time.Second); g.Decision != GateSend {
		t.Fatalf("closed by hand: %+v", g)
	}
	if r := e.report("c:1", true, CircuitConfig{Failures: 2, Backoff: time.Minute}); r.What != "counted" {
		t.Fatalf("%+v", r)
	}
	e.clock.Advance(time.Hour + time.Second)
	if cs := e.circuits(); len(cs) != 0 {
		t.Fatalf("a failure an hour old is still listed: %+v", cs)
	}
	for _, err := range []error{
		func() error {
			_, err := e.store.CircuitGate(e.ctx, "", "a:1", "acme", time.Second, CircuitConfig{})
			return err
		}(),
		func() error {
			_, err := e.store.CircuitGate(e.ctx, dest, "a 1", "acme", time.Second, CircuitConfig{})
			return err
		}(),
		func() error {
			_, err := e.store.CircuitGate(e.ctx, dest, "a:1", "acme", 0, CircuitConfig{})
			return err
		}(),
		func() error {
			_, err := e.store.CircuitRecord(e.ctx, dest, "a:1", true, CircuitConfig{Backoff: time.Minute, MaxBackoff: time.Second})
			return err
		}(),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("bad argument: %v, want ErrInvalid", err)
		}
	}
	if cs := e.circuits(); len(cs) != 0 {
		t.Fatalf("bad arguments wrote %+v", cs)
	}
}

// A deferred job (its destination's circuit is open) uses no attempt, waits
// in the delayed set until the deferral's end, is never dead, gives its
// slot back to its tenant (the next job goes at once), and shows in the
// tenant's open destinations; then it is released again like a retry.
func TestFinishDeferred(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.MaxAttempts = 1e6, 1, 1 }))
	rs := e.enqueue("acme", item(`1`), item(`2`))
	first := e.attempt(rs[0].ID)
	if first.Attempt != 1 {
		t.Fatalf("claim: attempt %d", first.Attempt)
	}
	tatBefore := e.state("acme").TAT
	o := wire.AttemptOutcome{Kind: wire.FinishDeferred, Pause: 30 * time.Second, Error: dest}
	if st := e.finish(first.ID, first.Gen, o, FinishConfig{}); st != StateRetrying {
		t.Fatalf("deferred: %s, want retrying", st)
	}
	j := e.job(first.ID)
	if j.Attempt != 0 || !j.Due.Equal(e.clock.Now().Add(30*time.Second)) || len(j.Attempts) != 0 {
		t.Fatalf("deferred record: attempt %d, due in %s, log %+v; want 0, 30s, none", j.Attempt, j.Due.Sub(e.clock.Now()), j.Attempts)
	}
	st := e.state("acme")
	if !st.TAT.Before(tatBefore) || st.PausedUntil.After(e.clock.Now()) || st.Running != 0 {
		t.Fatalf("tenant after the deferral: TAT %s (was %s), paused until %s, running %d", st.TAT, tatBefore, st.PausedUntil, st.Running)
	}
	// The other job goes now: the deferred job's slot was refunded.
	r, ok := e.pop("acme", time.Microsecond)
	if !ok || r.ID != rs[1].ID || r.Slot.After(e.clock.Now()) {
		t.Fatalf("next job: %+v %v, want %s at once", r, ok, rs[1].ID)
	}
	second := e.claimAt(r)
	if st := e.finish(second.ID, second.Gen, wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200}, FinishConfig{}); st != StateSucceeded {
		t.Fatalf("the other job: %s", st)
	}
	tc, err := e.store.TenantCircuits(e.ctx, "acme", e.clock.Now())
	if err != nil || len(tc) != 1 || tc[0].Destination != dest || !tc[0].Until.Equal(j.Due) {
		t.Fatalf("tenant circuits %+v %v", tc, err)
	}
	// The circuit closes: WakeDeferred brings the job back now.
	e.clock.Advance(time.Second)
	if n, err := e.store.WakeDeferred(e.ctx, "acme", dest); err != nil || n != 1 {
		t.Fatalf("wake: %d %v, want 1", n, err)
	}
	if j := e.job(first.ID); j.State != StateRetrying || !j.Due.Equal(e.clock.Now()) {
		t.Fatalf("woken: %s due in %s, want now", j.State, j.Due.Sub(e.clock.Now()))
	}
	if tc, _ := e.store.TenantCircuits(e.ctx, "acme", e.clock.Now()); len(tc) != 0 {
		t.Fatalf("woken, yet listed: %+v", tc)
	}
	if n, err := e.store.WakeDeferred(e.ctx, "acme", dest); err != nil || n != 0 {
		t.Fatalf("a second wake: %d %v, want 0", n, err)
	}
	// Deferred again and again (max_attempts 1): never dead.
	for range 3 {
		c := e.attempt(first.ID)
		if c.Attempt != 1 {
			t.Fatalf("re-claim: attempt %d, want 1", c.Attempt)
		}
		if st := e.finish(c.ID, c.Gen, o, FinishConfig{}); st != StateRetrying {
			t.Fatalf("deferred again: %s", st)
		}
	}
	c := e.attempt(first.ID)
	if st := e.finish(c.ID, c.Gen, wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200}, FinishConfig{}); st != StateSucceeded {
		t.Fatalf("sent at last: %s", st)
	}
	if tc, _ := e.store.TenantCircuits(e.ctx, "acme", e.clock.Now().Add(time.Second)); len(tc) != 0 {
		t.Fatalf("past the deferral: %+v", tc)
	}
	e.requireConsistent()
	bad := []wire.AttemptOutcome{{Kind: wire.FinishDeferred, Error: dest}, {Kind: wire.FinishDeferred, Pause: time.Second}}
	for _, o := range bad {
		if _, err := e.store.Finish(e.ctx, rs[1].ID, r.Gen, o, FinishConfig{}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("deferral %+v: %v, want ErrInvalid", o, err)
		}
	}
}
