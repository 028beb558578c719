package worker_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/webhook"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/internal/worker"
)

// Modes of a flaky destination.
const (
	destDrop int32 = iota // close the connection unanswered: a connection failure
	destHang              // answer after the attempt's timeout
	destOK                // 204
)

// flaky is a real destination on loopback whose behaviour the test sets;
// it counts the requests it gets and, for each, reads the circuit's state
// at that moment (hits while open must be none).
type flaky struct {
	srv       *httptest.Server
	mode      atomic.Int32
	hits      atomic.Int64
	hitsOpen  atomic.Int64
	hitsProbe atomic.Int64
	st        *store.Store
	dest      string
	stop      chan struct{} // ends the hanging requests
}

func newFlaky(t *testing.T, st *store.Store) *flaky {
	f := &flaky{st: st, stop: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(func() {
		close(f.stop)
		f.srv.Close()
	})
	f.dest, _ = webhook.Destination(f.srv.URL)
	return f
}

func (f *flaky) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body) // then a client's hang-up ends r's context
	f.hits.Add(1)
	if cs, _, err := f.st.Circuits(context.Background()); err == nil {
		for _, c := range cs {
			switch {
			case c.Destination == f.dest && c.State == store.CircuitOpen:
				f.hitsOpen.Add(1)
			case c.Destination == f.dest && c.State == store.CircuitHalfOpen:
				f.hitsProbe.Add(1)
			}
		}
	}
	switch f.mode.Load() {
	case destDrop:
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	case destHang:
		select {
		case <-r.Context().Done():
		case <-f.stop:
		}
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// circuitOf is dest's circuit as stored (State "" when it has none).
func (h *harness) circuitOf(dest string) store.Circuit {
	h.t.Helper()
	cs, _, err := h.st.Circuits(h.ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, c := range cs {
		if c.Destination == dest {
			return c
		}
	}
	return store.Circuit{}
}

// startCircuitWorker starts a worker whose webhook executor has circuits
// with settings set (grace 3 s, the harness's).
func (h *harness) startCircuitWorker(set wire.Settings) {
	h.t.Helper()
	set.Grace = 3 * time.Second
	circuits, err := worker.NewCircuits(worker.CircuitsConfig{Store: h.st, Settings: func() wire.Settings { return set.Over(store.DefaultSettings()) },
		Refresh: 20 * time.Millisecond, Registerer: h.reg, Logger: testLogger(h.t)})
	if err != nil {
		h.t.Fatal(err)
	}
	exec := &worker.WebhookExecutor{Client: loopbackClient(h.t), Circuits: circuits}
	h.startWorker(20, exec, func(c *worker.Config) { c.Settings = set })
}

// A destination that drops every connection: its circuit opens after
// circuit_failures of them; the jobs sent to it meanwhile wait without an
// attempt (none reaches it while open, none dead), while the same tenant's
// jobs to another destination are delivered; when the backoff ends one
// probe goes, and once the destination answers it closes the circuit and
// every deferred job is delivered, each on its first attempt.
func TestCircuitDefersAndRecovers(t *testing.T) {
	h := newHarness(t, 1)
	bad := newFlaky(t, h.st)
	h.policy("acme", store.Overrides{RateUS: ptr(50_000), Burst: ptr(1), Concurrency: ptr(20),
		MaxAttempts: ptr(3), MinBackoffUS: ptr(100_000), MaxBackoffUS: ptr(100_000), TimeoutUS: ptr(500_000)})
	h.startDispatcher(nil)
	h.startCircuitWorker(wire.Settings{CircuitFailures: 3, CircuitBackoff: 3 * time.Second, CircuitMaxBackoff: time.Minute})

	first := h.enqueueTo("acme", bad.srv.URL+"/hook", 3)
	redistest.Poll(t, 15*time.Second, "the circuit opens", func() bool { return h.circuitOf(bad.dest).State == store.CircuitOpen })
	if n := bad.hits.Load(); n != 3 {
		t.Fatalf("%d requests before the opening, want 3", n)
	}
	opened := h.circuitOf(bad.dest)

	// While open: jobs to bad wait, jobs to the receiver go.
	later := h.enqueueTo("acme", bad.srv.URL+"/hook", 6)
	good := h.enqueue("acme", 6)
	got := h.recv.waitFor(t, "acme", len(good), 10*time.Second)
	exactlyOnce(t, got, good)
	if c := h.circuitOf(bad.dest); c.State != store.CircuitOpen || !c.Until.Equal(opened.Until) {
		t.Fatalf("the other destination's jobs were held back until the circuit's end: %+v", c)
	}
	redistest.Poll(t, 10*time.Second, "every later job deferred", func() bool {
		for _, id := range later {
			if j := h.jobOf(id); j.State != store.StateRetrying || j.Attempt != 0 {
				return false
			}
		}
		return true
	})
	// The gate defers the first job after the opening; the pass holds the
	// tenant's next ones to the destination without a claim (store
	// TestCircuitHeldByPass), so the counter may stay below the jobs held.
	if n := h.counter("sluice_circuit_deferred_total"); n < 1 {
		t.Fatalf("deferred counter %v, want ≥ 1", n)
	}

	// The backoff ends: the probe fails too (the destination still drops).
	redistest.Poll(t, 15*time.Second, "a failed probe", func() bool { return h.circuitOf(bad.dest).Backoff == 6*time.Second })
	bad.mode.Store(destOK)
	redistest.Poll(t, 30*time.Second, "every job to the destination delivered", func() bool {
		for _, id := range append(later, first...) {
			if h.jobOf(id).State != store.StateSucceeded {
				return false
			}
		}
		return true
	})
	if c := h.circuitOf(bad.dest); c.State != "" {
		t.Fatalf("circuit after the probe's answer: %+v, want none (closed)", c)
	}
	for _, id := range later {
		if j := h.jobOf(id); j.Attempt != 1 {
			t.Fatalf("job %s sent while open: %d attempts, want 1", id, j.Attempt)
		}
	}
	if n := bad.hitsOpen.Load(); n != 0 {
		t.Fatalf("%d requests reached the destination while its circuit was open", n)
	}
	if n := bad.hitsProbe.Load(); n != 2 {
		t.Fatalf("%d requests while half-open, want 2 probes (the failed one, the answered one)", n)
	}
	if n := h.counter("sluice_circuit_openings_total"); n != 2 {
		t.Fatalf("openings %v, want 2 (the opening and the failed probe)", n)
	}
	for _, id := range append(later, first...) {
		if h.jobOf(id).State == store.StateDead {
			t.Fatalf("job %s dead", id)
		}
	}
	h.noFailedCalls(t)
}

// Timeouts count as connection failures do; an HTTP answer, even a 5xx,
// breaks the run; with circuit_disabled every job is sent.
func TestCircuitTimeoutsAndAnswers(t *testing.T) {
	h := newHarness(t, 1)
	bad := newFlaky(t, h.st)
	bad.mode.Store(destHang)
	h.policy("acme", store.Overrides{RateUS: ptr(20_000), Burst: ptr(1), Concurrency: ptr(20),
		MaxAttempts: ptr(1), TimeoutUS: ptr(200_000)})
	h.startDispatcher(nil)
	h.startCircuitWorker(wire.Settings{CircuitFailures: 2, CircuitBackoff: time.Hour, CircuitMaxBackoff: time.Hour})

	h.enqueueTo("acme", bad.srv.URL+"/hook", 1)
	redistest.Poll(t, 10*time.Second, "one timeout counted", func() bool { return h.circuitOf(bad.dest).Failures == 1 })
	// A 5xx answer is not a connection failure: the run starts again.
	fails := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) }))
	t.Cleanup(fails.Close)
	dest5xx, _ := webhook.Destination(fails.URL)
	ids := h.enqueueTo("acme", fails.URL, 3)
	redistest.Poll(t, 10*time.Second, "the 5xx jobs dead", func() bool {
		for _, id := range ids {
			if h.jobOf(id).State != store.StateDead {
				return false
			}
		}
		return true
	})
	if c := h.circuitOf(dest5xx); c.State != "" {
		t.Fatalf("5xx answers made a circuit: %+v", c)
	}
	h.enqueueTo("acme", bad.srv.URL+"/hook", 1)
	redistest.Poll(t, 10*time.Second, "two timeouts open it", func() bool { return h.circuitOf(bad.dest).State == store.CircuitOpen })
	before := bad.hits.Load()
	deferred := h.enqueueTo("acme", bad.srv.URL+"/hook", 2)
	redistest.Poll(t, 10*time.Second, "deferred", func() bool {
		return h.jobOf(deferred[0]).State == store.StateRetrying && h.jobOf(deferred[1]).State == store.StateRetrying
	})
	if bad.hits.Load() != before {
		t.Fatalf("sent while open")
	}
	tc, err := h.st.TenantCircuits(h.ctx, "acme", time.Now())
	if err != nil || len(tc) != 1 || tc[0].Destination != bad.dest {
		t.Fatalf("tenant circuits %+v %v", tc, err)
	}
}
