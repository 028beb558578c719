package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/webhook"
)

// circuitRun is one run of the circuit part: what each destination saw.
type circuitRun struct {
	jobs       int // enqueued, half to each destination
	healthy    int // healthy jobs delivered within the window
	late       int // … in its second half
	window     time.Duration
	badHits    int64 // requests that reached the timing-out destination
	badOpen    int64 // … while its circuit was open
	badProbe   int64 // … while half-open (the probes)
	openings   float64
	deferred   float64
	healthyP99 time.Duration // enqueue → arrival of the healthy jobs, p99
}

// hanger is a destination that accepts every request and never answers:
// each request ends with the client's timeout. It counts the requests and,
// at each, reads the destination's circuit from Redis.
type hanger struct {
	srv                *http.Server
	url, dest          string
	st                 *store.Store
	hits, open, probes atomic.Int64
	stop               chan struct{}
}

func newHanger(st *store.Store) (*hanger, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("hanging destination: %w", err)
	}
	h := &hanger{url: "http://" + ln.Addr().String() + "/slow", st: st, stop: make(chan struct{})}
	h.dest, _ = webhook.Destination(h.url)
	h.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = h.srv.Serve(ln) }()
	return h, nil
}

func (h *hanger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body) // then the client's hang-up ends r's context
	h.hits.Add(1)
	if cs, _, err := h.st.Circuits(r.Context()); err == nil {
		for _, c := range cs {
			switch {
			case c.Destination == h.dest && c.State == store.CircuitOpen:
				h.open.Add(1)
			case c.Destination == h.dest && c.State == store.CircuitHalfOpen:
				h.probes.Add(1)
			}
		}
	}
	select {
	case <-r.Context().Done():
	case <-h.stop:
	}
}

func (h *hanger) close() {
	close(h.stop)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = h.srv.Shutdown(ctx)
}

// circuit is the part "circuit" (only when named in -parts): one tenant at
// -circuit-rate/s (burst 1, concurrency 10, timeout -circuit-timeout)
// whose jobs alternate between a destination that never answers and a
// healthy receiver, enqueued one at a time at the tenant's rate for
// -circuit-duration. Run with the circuits off (circuit.disabled) and on,
// in one run: the healthy destination's delivered rate against the half
// of the tenant's rate it is sent, the requests the dead destination got
// (while open: target 0) and the probes.
func circuit(ctx context.Context, e *env, t *table) error {
	off, err := circuitStream(ctx, e, "circuit-off", true)
	if err != nil {
		return err
	}
	on, err := circuitStream(ctx, e, "circuit-on", false)
	if err != nil {
		return err
	}
	circuitRows(e, t, on, off)
	return nil
}

func circuitStream(ctx context.Context, e *env, run string, disabled bool) (circuitRun, error) {
	o := e.o
	bad, err := newHanger(e.st)
	if err != nil {
		return circuitRun{}, err
	}
	defer bad.close()
	s := setup{name: run, defaultRate: "10/s", defaultConc: 10, workerConc: e.o.concurrency, startWorker: true,
		tenants: map[string]string{"cb": fmt.Sprintf("{rate: %d/s, burst: 1, concurrency: 10, timeout: %s}", o.cbRate, o.cbTimeout)},
		extra: fmt.Sprintf("circuit: {failures: %d, backoff: %s, max_backoff: %s, disabled: %t}\n",
			o.cbFailures, o.cbBackoff, o.cbMaxBackoff, disabled)}
	sl, err := e.startSluice(ctx, s)
	if err != nil {
		return circuitRun{}, err
	}
	defer sl.stop()
	rec := e.rcv.start(run)
	start := time.Now()
	n, sent, err := circuitEnqueue(ctx, e, sl, run, bad.url)
	if err != nil {
		return circuitRun{}, err
	}
	window := time.Since(start)
	res := circuitRun{jobs: n, window: window}
	var lat []time.Duration
	for _, a := range rec.snapshot() {
		if at, ok := sent[a.id]; ok && a.at.Before(start.Add(window)) {
			res.healthy++
			if a.at.After(start.Add(window / 2)) {
				res.late++
			}
			lat = append(lat, a.at.Sub(at))
		}
	}
	slices.Sort(lat)
	res.healthyP99 = quantile(lat, 0.99)
	res.badHits, res.badOpen, res.badProbe = bad.hits.Load(), bad.open.Load(), bad.probes.Load()
	for _, l := range sl.scrape(ctx, sl.metrics+"/metrics", []string{"sluice_circuit_openings_total", "sluice_circuit_deferred_total"}) {
		var v float64
		if name, val, ok := strings.Cut(l, " "); ok {
			if _, err := fmt.Sscan(val, &v); err != nil {
				continue
			}
			switch name {
			case "sluice_circuit_openings_total":
				res.openings = v
			case "sluice_circuit_deferred_total":
				res.deferred = v
			}
		}
	}
	return res, nil
}

// circuitEnqueue enqueues the tenant's jobs one at a time at its rate for
// -circuit-duration, even ones to badURL, odd ones to the receiver's run;
// it returns their number and the healthy ones' enqueue times by id.
func circuitEnqueue(ctx context.Context, e *env, sl *sluice, run, badURL string) (int, map[string]time.Time, error) {
	period := time.Second / time.Duration(e.o.cbRate)
	n := int(e.o.cbDuration / period)
	start := time.Now()
	sent := map[string]time.Time{}
	for i := range n {
		if err := sleepCtx(ctx, time.Until(start.Add(time.Duration(i)*period))); err != nil {
			return 0, nil, err
		}
		url := badURL
		if i%2 == 1 {
			url = e.rcv.url(run)
		}
		job := fmt.Appendf(nil, `{"type":"webhook","url":"%s","event":"bench.%s","payload":{"i":%d}}`, url, run, i)
		ids, err := sl.enqueueHTTP(ctx, "cb", [][]byte{job})
		if err != nil {
			return 0, nil, err
		}
		if i%2 == 1 {
			sent[ids[0]] = time.Now()
		}
	}
	return n, sent, nil
}

func circuitRows(e *env, t *table, on, off circuitRun) {
	const part = "circuit"
	o := e.o
	want := float64(o.cbRate) / 2
	t.row(part, fmt.Sprintf("one tenant at %d/s (concurrency 10, timeout %s), jobs alternating: a destination that never answers, a healthy one; %s",
		o.cbRate, o.cbTimeout, o.cbDuration), "circuits on", "circuits off (circuit.disabled)", "on ÷ off", "", "")
	t.row(part, fmt.Sprintf("circuit: failures %d, backoff %s doubling to %s", o.cbFailures, o.cbBackoff, o.cbMaxBackoff), "", "", "", "", "")
	rate := func(x circuitRun) float64 { return float64(x.healthy) / x.window.Seconds() }
	t.row(part, "healthy destination: delivered within the window", fmt.Sprintf("%d of %d (%.2f/s)", on.healthy, on.jobs/2, rate(on)),
		fmt.Sprintf("%d of %d (%.2f/s)", off.healthy, off.jobs/2, rate(off)), div(rate(on), rate(off)),
		fmt.Sprintf("≥ 0.95 × %.1f/s", want), yes(rate(on) >= 0.95*want))
	late := func(x circuitRun) float64 { return float64(x.late) / (x.window.Seconds() / 2) }
	t.row(part, "healthy destination: delivered/s in the window's second half", fmt.Sprintf("%.2f/s", late(on)), fmt.Sprintf("%.2f/s", late(off)),
		div(late(on), late(off)), fmt.Sprintf("≥ 0.99 × %.1f/s", want), yes(late(on) >= 0.99*want))
	backlog := func(x circuitRun) int { return x.jobs/2 - x.healthy }
	t.row(part, "healthy destination: backlog at the window's end (sent, not delivered; ≤ 2 in flight)", fmt.Sprint(backlog(on)),
		fmt.Sprint(backlog(off)), "", "≤ 2", yes(backlog(on) <= 2))
	t.row(part, "healthy destination: enqueue → arrival p99", msf(on.healthyP99), msf(off.healthyP99), "", "", "")
	t.row(part, "requests to the dead destination", fmt.Sprint(on.badHits), fmt.Sprint(off.badHits), "", "", "")
	t.row(part, "… while its circuit was open (attempts spent while open)", fmt.Sprint(on.badOpen), "-", "", "0", yes(on.badOpen == 0))
	t.row(part, "… probes (half-open)", fmt.Sprint(on.badProbe), "-", "", "", "")
	t.row(part, "circuit openings (incl. failed probes); jobs deferred", fmt.Sprintf("%.0f; %.0f", on.openings, on.deferred), "-", "", "", "")
	t.gap()
}
