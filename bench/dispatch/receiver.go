package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// receiver is the webhook endpoint every run delivers to: an HTTP server on
// 127.0.0.1 that records, per run (the path /r/<run>), each request's
// arrival time, taken first thing in the handler, and its webhook-id header,
// and answers 204.
type receiver struct {
	srv  *http.Server
	base string

	mu   sync.Mutex
	runs map[string]*recording
}

// arrival is one request seen by the receiver.
type arrival struct {
	at time.Time // local wall clock (with monotonic reading)
	id string    // webhook-id header
}

// recording is one run's arrivals, in the order the handler saw them; a
// counting one (startCounting) keeps only the number of requests and the
// distinct webhook-ids.
type recording struct {
	mu       sync.Mutex
	counting bool
	n        int
	arrivals []arrival
	ids      map[string]int // webhook-id → deliveries
	change   chan struct{}  // closed and replaced on every arrival
}

func newReceiver() (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("receiver: %w", err)
	}
	r := &receiver{base: "http://" + ln.Addr().String(), runs: map[string]*recording{}}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *receiver) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = r.srv.Shutdown(ctx)
}

// url is the endpoint of run. A request to it with the query status=N is
// answered N (400: a permanent failure, the job is dead at once); with
// delay=D (a Go duration) it is answered after D, its arrival recorded
// first.
func (r *receiver) url(run string) string { return r.base + "/r/" + run }

// start (re)creates run's recording and returns it.
func (r *receiver) start(run string) *recording {
	rec := &recording{ids: map[string]int{}, change: make(chan struct{})}
	r.mu.Lock()
	r.runs[run] = rec
	r.mu.Unlock()
	return rec
}

// startCounting (re)creates run's recording keeping only the count of the
// requests and the webhook-ids (a long soak would otherwise keep every
// arrival) and returns it.
func (r *receiver) startCounting(run string) *recording {
	rec := r.start(run)
	rec.counting = true
	return rec
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	at := time.Now()
	_, _ = io.Copy(io.Discard, req.Body)
	run, ok := strings.CutPrefix(req.URL.Path, "/r/")
	r.mu.Lock()
	rec := r.runs[run]
	r.mu.Unlock()
	if !ok || rec == nil {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	rec.add(arrival{at: at, id: req.Header.Get("webhook-id")})
	if d, err := time.ParseDuration(req.URL.Query().Get("delay")); err == nil && d > 0 {
		timer := time.NewTimer(d) // a slow endpoint: answer after d
		select {
		case <-timer.C:
		case <-req.Context().Done():
			timer.Stop()
		}
	}
	if code, err := strconv.Atoi(req.URL.Query().Get("status")); err == nil && code >= 200 && code <= 599 {
		w.WriteHeader(code)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (rec *recording) add(a arrival) {
	rec.mu.Lock()
	rec.n++
	rec.ids[a.id]++
	if !rec.counting {
		rec.arrivals = append(rec.arrivals, a)
	}
	close(rec.change)
	rec.change = make(chan struct{})
	rec.mu.Unlock()
}

// count is the number of requests seen so far and of distinct webhook-ids.
func (rec *recording) count() (requests, distinct int) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.n, len(rec.ids)
}

// waitRequests waits until n requests arrived, ctx ended or the deadline
// passed; it reports whether n arrived.
func (rec *recording) waitRequests(ctx context.Context, n int, deadline time.Time) bool {
	return rec.waitUntil(ctx, deadline, func() bool { return rec.n >= n })
}

// waitUntil waits until reached (called with rec.mu held) holds, ctx ended
// or the deadline passed, waking on every arrival; it reports whether
// reached held.
func (rec *recording) waitUntil(ctx context.Context, deadline time.Time, reached func() bool) bool {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		rec.mu.Lock()
		done, change := reached(), rec.change
		rec.mu.Unlock()
		if done {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
			return false
		case <-change:
		}
	}
}

// snapshot returns a copy of the arrivals so far.
func (rec *recording) snapshot() []arrival {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]arrival(nil), rec.arrivals...)
}

// waitDistinct waits until n distinct webhook-ids arrived, ctx ended or
// the deadline passed; it reports whether n arrived.
func (rec *recording) waitDistinct(ctx context.Context, n int, deadline time.Time) bool {
	return rec.waitUntil(ctx, deadline, func() bool { return len(rec.ids) >= n })
}
