package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/deliverytest"
)

// faultScale sizes the fault matrix: quick (the default, in every go test
// run) or full (SLUICE_FAULTS=full: the sizes).
type faultScale struct {
	name    string
	jobs    int           // webhooks per scenario, over faultTenants tenants
	spread  time.Duration // the producers enqueue them evenly over this
	hole    time.Duration // how long Redis is black-holed
	slow    time.Duration // how long Redis answers 50ms late
	cuts    int           // times every connection is cut
	moments int           // kill -9 moments
	settle  time.Duration // how long accepted jobs may take to arrive after the producers end
}

var (
	quickFaults = faultScale{name: "quick", jobs: 200, spread: 8 * time.Second, hole: 3 * time.Second,
		slow: 3 * time.Second, cuts: 3, moments: 2, settle: 45 * time.Second}
	fullFaults = faultScale{name: "full", jobs: 1000, spread: 40 * time.Second, hole: 20 * time.Second,
		slow: 30 * time.Second, cuts: 10, moments: 5, settle: 90 * time.Second}
)

// faultTenants are the tenants of every scenario, each at faultRate with
// burst 1.
var faultTenants = []string{"f1", "f2", "f3", "f4", "f5"}

const faultRate = 10.0

// faultRow is one line of the matrix, as scripts/faults prints it.
type faultRow struct {
	Scenario   string  `json:"scenario"`
	Mode       string  `json:"mode"`
	Accepted   int     `json:"accepted"`
	Delivered  int     `json:"delivered"`
	Lost       int     `json:"lost"`
	LostBound  int     `json:"lost_bound"` // the most lost allowed
	Duplicates int     `json:"duplicates"`
	Refused    int     `json:"refused"`   // 503 and 507 answers, each followed by a retry
	Unreached  int     `json:"unreached"` // requests no throttler answered (killed, stopping)
	RateViol   int     `json:"rate_violations"`
	RecoveryS  float64 `json:"recovery_s"`  // until a 202 and an arrival after the fault
	CaughtUpS  float64 `json:"caught_up_s"` // until every job accepted before the fault's end arrived
	OK         bool    `json:"ok"`
	Note       string  `json:"note,omitempty"`
}

// faultRows collects the rows of one run; TestFaults writes them out.
var faultRows struct {
	sync.Mutex
	rows []faultRow
}

// writeFaultRows appends rows as JSON lines to the file SLUICE_FAULTS_OUT
// names, when set.
func writeFaultRows(t *testing.T) {
	faultRows.Lock()
	defer faultRows.Unlock()
	rows := slices.Clone(faultRows.rows)
	slices.SortFunc(rows, func(a, b faultRow) int { return cmpString(a.Scenario, b.Scenario) })
	for _, r := range rows {
		t.Logf("%-34s accepted %4d delivered %4d lost %d (≤ %d) dup %2d refused %3d unreached %3d rate-viol %d recovery %.2fs caught up %.2fs ok %v %s",
			r.Scenario, r.Accepted, r.Delivered, r.Lost, r.LostBound, r.Duplicates, r.Refused, r.Unreached, r.RateViol, r.RecoveryS, r.CaughtUpS, r.OK, r.Note)
	}
	path := os.Getenv("SLUICE_FAULTS_OUT")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("write the matrix: %v", err)
		return
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			t.Errorf("write the matrix: %v", err)
		}
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// faultRun is one scenario's load: producers that enqueue sc.jobs webhooks
// over the tenants, each under an Idempotency-Key and retried with the
// same key until a 202, against whichever throttler is up; it checks
// every answer (202, or 503/507 with Retry-After and the JSON error body).
type faultRun struct {
	t  *testing.T
	c  *cluster
	sc faultScale

	mu         sync.Mutex
	throttlers []*proc              // where producers send; changed by the scenario
	next       int                  // round robin over throttlers
	ids        map[string]string    // Idempotency-Key → job id, once accepted
	acceptedAt []time.Time          // when each 202 was answered
	idAt       map[string]time.Time // job id → when accepted
	firstFull  time.Time            // the first 507
	fulls      int                  // 507s
	refused    int
	unreached  int
	bad        []string // answers that break the contract
	done       chan struct{}
}

func newFaultRun(t *testing.T, c *cluster, sc faultScale, throttlers ...*proc) *faultRun {
	return &faultRun{t: t, c: c, sc: sc, throttlers: slices.Clone(throttlers), ids: map[string]string{}, idAt: map[string]time.Time{}, done: make(chan struct{})}
}

// setThrottlers replaces the throttlers producers send to.
func (r *faultRun) setThrottlers(ps ...*proc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.throttlers = slices.Clone(ps) // the caller may go on changing its slice
}

// accepted is the number of jobs accepted so far.
func (r *faultRun) accepted() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ids)
}

// waitAccepted blocks until at least n jobs are accepted (or the producers
// have ended).
func (r *faultRun) waitAccepted(n int) {
	r.t.Helper()
	poll(r.t, r.sc.spread+r.sc.settle, func() (bool, string) {
		select {
		case <-r.done:
			return true, ""
		default:
		}
		got := r.accepted()
		return got >= n, fmt.Sprintf("%d of %d jobs accepted", got, n)
	})
}

// start runs the producers: job i is due at spread·i/jobs; four producers
// take them in order. The returned channel closes when every job is
// accepted or the deadline (spread + settle) passed.
func (r *faultRun) start() {
	ctx, cancel := context.WithTimeout(context.Background(), r.sc.spread+r.sc.settle)
	r.t.Cleanup(cancel)
	jobs := make(chan int)
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}, Timeout: 15 * time.Second}
	r.t.Cleanup(client.CloseIdleConnections)
	for range 4 {
		wg.Go(func() {
			for i := range jobs {
				r.produce(ctx, client, i)
			}
		})
	}
	go func() {
		defer func() { close(jobs); wg.Wait(); close(r.done) }()
		begin := time.Now()
		for i := range r.sc.jobs {
			due := begin.Add(r.sc.spread * time.Duration(i) / time.Duration(r.sc.jobs))
			select {
			case <-time.After(time.Until(due)):
			case <-ctx.Done():
				return
			}
			select {
			case jobs <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
}

// wait blocks until the producers have ended.
func (r *faultRun) wait() {
	<-r.done
}

// produce enqueues job i until it is accepted or ctx ends.
func (r *faultRun) produce(ctx context.Context, client *http.Client, i int) {
	tenant := faultTenants[i%len(faultTenants)]
	key := fmt.Sprintf("fault-%d", i)
	body, _ := json.Marshal(r.c.webhookJob(tenant, i))
	for ctx.Err() == nil {
		r.mu.Lock()
		var p *proc
		if len(r.throttlers) > 0 {
			p = r.throttlers[r.next%len(r.throttlers)]
			r.next++
		}
		r.mu.Unlock()
		wait := 100 * time.Millisecond
		if p != nil {
			var ok bool
			if ok, wait = r.try(ctx, client, p, tenant, key, body); ok {
				return
			}
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
	}
}

// try sends one enqueue and checks its answer. It reports whether the job
// is accepted, else how long to wait before the next try.
func (r *faultRun) try(ctx context.Context, client *http.Client, p *proc, tenant, key string, body []byte) (bool, time.Duration) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.url()+"/v1/tenants/"+tenant+"/jobs", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+adminKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(req)
	if err != nil { // the throttler is down or stopping: outcome unknown, retry with the key
		r.mu.Lock()
		r.unreached++
		r.mu.Unlock()
		return false, 100 * time.Millisecond
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out struct {
		ID    string `json:"id"`
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	jsonErr := json.Unmarshal(raw, &out)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch resp.StatusCode {
	case http.StatusAccepted:
		if jsonErr != nil || out.ID == "" {
			r.bad = append(r.bad, fmt.Sprintf("%s: 202 without a job id: %s", key, raw))
			return true, 0
		}
		if prev, ok := r.ids[key]; ok {
			if prev != out.ID {
				r.bad = append(r.bad, fmt.Sprintf("%s: accepted twice as %s and %s", key, prev, out.ID))
			}
			return true, 0
		}
		r.ids[key] = out.ID
		r.idAt[out.ID] = time.Now()
		r.acceptedAt = append(r.acceptedAt, r.idAt[out.ID])
		return true, 0
	case http.StatusServiceUnavailable, http.StatusInsufficientStorage:
		want := map[int]string{http.StatusServiceUnavailable: "unavailable", http.StatusInsufficientStorage: "storage_full"}[resp.StatusCode]
		ra, raErr := strconv.Atoi(resp.Header.Get("Retry-After"))
		if jsonErr != nil || out.Error.Code != want || out.Error.Message == "" || raErr != nil || ra < 1 {
			r.bad = append(r.bad, fmt.Sprintf("%s: %d with Retry-After %q and body %s, want code %s, a message and Retry-After ≥ 1",
				key, resp.StatusCode, resp.Header.Get("Retry-After"), raw, want))
		}
		r.refused++
		if resp.StatusCode == http.StatusInsufficientStorage {
			r.fulls++
			if r.firstFull.IsZero() {
				r.firstFull = time.Now()
			}
		}
		return false, min(time.Duration(max(ra, 1))*time.Second, time.Second)
	default:
		r.bad = append(r.bad, fmt.Sprintf("%s: answered %d %s", key, resp.StatusCode, raw))
		return false, time.Second
	}
}

// faultCheck is what a scenario allows beyond "nothing lost".
type faultCheck struct {
	lostBound   int       // lost jobs allowed (AOF everysec); 0 elsewhere
	noDups      bool      // a graceful stop: every job exactly once
	faultEnd    time.Time // when the last fault ended
	maxDupsEach int       // duplicates allowed per fault event (attempts in flight)
	events      int       // fault events
	note        string
}

// finish waits for every accepted job to arrive (up to sc.settle after the
// producers end), then records the scenario's row and fails the test on a
// broken guarantee.
func (r *faultRun) finish(scenario string, fc faultCheck) {
	t := r.t
	t.Helper()
	r.wait()
	r.mu.Lock()
	ids := make([]string, 0, len(r.ids))
	for _, id := range r.ids {
		ids = append(ids, id)
	}
	acceptedAt := slices.Clone(r.acceptedAt)
	idAt := maps.Clone(r.idAt)
	refused, unreached, bad := r.refused, r.unreached, slices.Clone(r.bad)
	r.mu.Unlock()

	missing := func() []string {
		seen := count(r.c.recv.arrivals(""))
		var m []string
		for _, id := range ids {
			if seen[id] == 0 {
				m = append(m, id)
			}
		}
		return m
	}
	deadline := time.Now().Add(r.sc.settle)
	for len(missing()) > 0 && time.Now().Before(deadline) {
		r.c.recv.waitFor(200 * time.Millisecond)
	}
	lost := missing()
	got := r.c.recv.arrivals("")
	seen := count(got)
	accepted := map[string]bool{}
	for _, id := range ids {
		accepted[id] = true
	}
	first := map[string]time.Time{}
	for _, a := range got {
		if _, ok := first[a.id]; !ok {
			first[a.id] = a.at
		}
	}
	dups := 0
	for id, n := range seen {
		if !accepted[id] {
			t.Errorf("job %s arrived %d times but was never accepted", id, n)
			continue
		}
		if n > 1 {
			dups += n - 1
			if fc.noDups {
				t.Errorf("job %s arrived %d times after a graceful stop, want once", id, n)
			} else if first[id].After(fc.faultEnd) {
				t.Errorf("job %s arrived %d times, its first attempt (%s) after the fault ended: not an attempt in flight",
					id, n, first[id].Format(time.StampMilli))
			}
		}
	}
	if !fc.noDups && fc.maxDupsEach > 0 && dups > fc.maxDupsEach*max(fc.events, 1) {
		t.Errorf("%d duplicates, more than %d attempts in flight × %d fault events", dups, fc.maxDupsEach, fc.events)
	}
	if len(lost) > fc.lostBound {
		t.Errorf("%d accepted jobs never arrived (allowed %d), e.g. %v", len(lost), fc.lostBound, lost[:min(len(lost), 5)])
	}
	for _, b := range bad {
		t.Errorf("enqueue answer breaks the contract: %s", b)
	}
	if len(ids) < r.sc.jobs {
		t.Errorf("%d of %d jobs accepted before the producers' deadline", len(ids), r.sc.jobs)
	}
	viol := 0
	for _, tn := range faultTenants {
		viol += rateViolations(t, r.c.recv.arrivals(tn), faultRate, 1)
	}
	if viol > 0 {
		t.Errorf("%d arrivals broke the rate bound b + r·(Δ + 2ε_r) + 1", viol)
	}
	rec := recovery(fc.faultEnd, acceptedAt, got)
	var caughtUp time.Duration
	if !fc.faultEnd.IsZero() {
		for id, at := range first {
			if idAt[id].Before(fc.faultEnd) {
				caughtUp = max(caughtUp, at.Sub(fc.faultEnd))
			}
		}
	}
	row := faultRow{Scenario: scenario, Mode: r.sc.name, Accepted: len(ids), Delivered: len(ids) - len(lost), Lost: len(lost),
		LostBound: fc.lostBound, Duplicates: dups, Refused: refused, Unreached: unreached, RateViol: viol,
		RecoveryS: rec.Seconds(), CaughtUpS: caughtUp.Seconds(), Note: fc.note}
	row.OK = !t.Failed()
	faultRows.Lock()
	faultRows.rows = append(faultRows.rows, row)
	faultRows.Unlock()
	t.Logf("%+v", row)
}

// recovery is the time from end until both an enqueue was accepted and a
// webhook arrived after it (the arrival alone when nothing was enqueued
// after end); 0 when end is zero.
func recovery(end time.Time, acceptedAt []time.Time, got []arrival) time.Duration {
	if end.IsZero() {
		return 0
	}
	var rec time.Duration
	for _, at := range acceptedAt {
		if !at.Before(end) {
			rec = at.Sub(end)
			break
		}
	}
	for _, a := range got {
		if !a.at.Before(end) {
			rec = max(rec, a.at.Sub(end))
			break
		}
	}
	return rec
}

// rateViolations counts the arrivals that end a window holding more than
// b + r·(Δ + 2ε_r) + 1 of them (the bound checkRate asserts).
func rateViolations(t *testing.T, got []arrival, rate float64, burst int) int {
	if len(got) < 2 {
		return 0
	}
	allow := rate * 2 * sendError(got).Seconds()
	n := 0
	for j := range got {
		for i := range j {
			span := got[j].at.Sub(got[i].at).Seconds()
			if float64(j-i+1)-(float64(burst)+rate*span+1) > allow {
				n++
				break
			}
		}
	}
	if n > 0 {
		at := make([]time.Time, len(got))
		for i, a := range got {
			at[i] = a.at
		}
		worst, from, _ := deliverytest.WorstWindow(at, rate, burst)
		t.Logf("tenant %s: worst window %+.3f over b + r·Δ + 1 from %s, allowance 2·r·ε_r = %.3f",
			got[0].tenant, worst, got[from].at.Format(time.StampMicro), allow)
	}
	return n
}

// waitFor blocks until the receiver sees a request or d passes.
func (r *receiver) waitFor(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.notify:
	case <-t.C:
	}
}
