package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/deliverytest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/worker"
)

// arrival is one webhook request the receiver saw.
type arrival struct {
	id     string    // webhook-id: the job id, the same on every attempt
	tenant string    // the URL's last path segment
	at     time.Time // local, monotonic: when the request arrived
	redis  time.Time // the same instant on the estimate of Redis's clock
	// slot is the slot this attempt was sent for (Redis time), read from the
	// job's record while the attempt runs; zero when it could not be read.
	slot time.Time
	// aborted is set when the sender went away (its connection closed)
	// while the receiver was holding the request.
	aborted bool
	// answered is when the receiver answered (zero while held, and when
	// aborted).
	answered time.Time
	// header and body are the request's, for signature checks.
	header http.Header
	body   []byte
}

// receiver is a webhook endpoint on loopback that records every request.
// It answers 204 (or the status set for the tenant by setStatus, or the
// status in the URL's query: "?status=400"), after
// holding each request for hold when that is set; a request whose sender
// goes away while held is marked aborted.
//
// Before it answers, it reads the job's slot from its record: the attempt
// is still running, so that is the slot it was sent for, even when a later
// attempt (after a kill) moves the record's slot on.
type receiver struct {
	srv   *httptest.Server
	clock *worker.Clock
	jobs  jobReader
	hold  atomic.Int64 // time.Duration

	mu       sync.Mutex
	statuses map[string]int // tenant → the status to answer (setStatus)
	got      []*arrival
	inFlight int
	notify   chan struct{}
}

// jobReader is what the receiver needs of *store.Store.
type jobReader interface {
	GetJob(ctx context.Context, id string) (store.Job, error)
}

var _ jobReader = (*store.Store)(nil)

func newReceiver(t *testing.T, clock *worker.Clock, jobs jobReader) *receiver {
	r := &receiver{clock: clock, jobs: jobs, notify: make(chan struct{}, 1)}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

// url is where tenant's webhooks go.
func (r *receiver) url(tenant string) string { return r.srv.URL + "/hooks/" + tenant }

// setStatus makes the tenant's requests from now on answer status; 0
// restores the default.
func (r *receiver) setStatus(tenant string, status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.statuses == nil {
		r.statuses = map[string]int{}
	}
	r.statuses[tenant] = status
}

// setHold makes every request from now on wait d before its answer.
func (r *receiver) setHold(d time.Duration) { r.hold.Store(int64(d)) }

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	a := &arrival{at: time.Now(), redis: r.clock.Now(), id: req.Header.Get("webhook-id"), header: req.Header.Clone()}
	a.tenant = req.URL.Path[strings.LastIndexByte(req.URL.Path, '/')+1:]
	a.body, _ = io.ReadAll(req.Body)
	if j, err := r.jobs.GetJob(req.Context(), a.id); err == nil {
		a.slot = j.Slot
	}
	r.mu.Lock()
	r.got = append(r.got, a)
	r.inFlight++
	r.mu.Unlock()
	r.signal()
	if d := time.Duration(r.hold.Load()); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-req.Context().Done(): // the sender's connection closed
			t.Stop()
		}
	}
	r.mu.Lock()
	a.aborted = req.Context().Err() != nil
	r.inFlight--
	r.mu.Unlock()
	r.signal()
	status := http.StatusNoContent
	if s, err := strconv.Atoi(req.URL.Query().Get("status")); err == nil {
		status = s
	}
	r.mu.Lock()
	if s := r.statuses[a.tenant]; s != 0 {
		status = s
	}
	r.mu.Unlock()
	w.WriteHeader(status)
	if !a.aborted {
		r.mu.Lock()
		a.answered = time.Now()
		r.mu.Unlock()
	}
}

func (r *receiver) signal() {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// arrivals returns copies of tenant's arrivals ("" = all) in arrival order.
func (r *receiver) arrivals(tenant string) []arrival {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []arrival
	for _, a := range r.got {
		if tenant == "" || a.tenant == tenant {
			out = append(out, *a)
		}
	}
	slices.SortStableFunc(out, func(a, b arrival) int { return a.at.Compare(b.at) })
	return out
}

// held is the number of requests being held right now.
func (r *receiver) held() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inFlight
}

// waitUntil blocks until cond holds of the receiver's state, checking on
// every request and at least every pollInterval, and fails the test with
// msg when within passes first.
func (r *receiver) waitUntil(t *testing.T, within time.Duration, cond func() bool, msg func() string) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for !cond() {
		select {
		case <-r.notify:
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("after %s: %s", within, msg())
		}
	}
}

// waitDistinct blocks until ids have all arrived at least once.
func (r *receiver) waitDistinct(t *testing.T, ids []string, within time.Duration) {
	t.Helper()
	missing := func() []string {
		seen := map[string]bool{}
		for _, a := range r.arrivals("") {
			seen[a.id] = true
		}
		var out []string
		for _, id := range ids {
			if !seen[id] {
				out = append(out, id)
			}
		}
		return out
	}
	r.waitUntil(t, within, func() bool { return len(missing()) == 0 }, func() string {
		m := missing()
		return fmt.Sprintf("%d of %d jobs never arrived, e.g. %v", len(m), len(ids), m[:min(len(m), 5)])
	})
}

// count returns how many times each id arrived.
func count(got []arrival) map[string]int {
	n := map[string]int{}
	for _, a := range got {
		n[a.id]++
	}
	return n
}

// exactlyOnce fails unless each of ids arrived exactly once and nothing else
// arrived.
func exactlyOnce(t *testing.T, got []arrival, ids []string) {
	t.Helper()
	arrived := make([]string, len(got))
	for i, a := range got {
		arrived[i] = a.id
	}
	deliverytest.ExactlyOnce(t, arrived, ids)
}
