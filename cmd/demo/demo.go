package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// share is one tenant's part of the burst.
type share struct {
	Tenant string
	Jobs   int
}

// options configure one demo run.
type options struct {
	API    string // the throttler's base URL, "http://127.0.0.1:8080"
	APIKey string // a key allowed to enqueue for and read the tenants
	// Listen is the receiver's address; with ListenFallback a busy address
	// is replaced by a free port on the same host.
	Listen         string
	ListenFallback bool
	Shares         []share // the burst, in display order
	Out            string  // the SVG chart's path; its directory is created
	// Secrets returns the verifiers of a tenant's webhook signatures.
	Secrets *secrets
	// ReadyWithin bounds the wait for the throttler's /readyz; Timeout
	// bounds the deliveries after the burst.
	ReadyWithin, Timeout time.Duration
	Live                 bool // redraw the table in place (a terminal)
	// WorkerMetrics is the worker's /metrics URL, read before and after the
	// run for the claims that forfeited their slot; "" skips it.
	WorkerMetrics string
	// Stay keeps the receiver running after the chart, printing each
	// delivery, until ctx ends.
	Stay bool
}

// report is the outcome of a run.
type report struct {
	Receiver string        // the receiver's base URL
	Enqueued time.Duration // how long the burst's requests took
	Tenants  []tenantReport
	Chart    string   // absolute path of the SVG
	Unsigned []string // tenants without webhook secrets: not verified
	// Forfeited is how many claims gave their job back unsent during the
	// run (all tenants: claims answered "returned"), from the worker's
	// metrics; -1 when unknown.
	Forfeited int64
}

// tenantReport is one tenant's outcome.
type tenantReport struct {
	share
	State    tenantState     // at the end
	Arrivals []time.Duration // first arrival of each job since the burst, sorted
	Dups     int             // repeated deliveries
	Other    int             // deliveries of other runs
	BadSig   int
	Measured float64 // measuredRate
	Excess   float64 // windowExcess with windowSlack
}

// windowSlack is the jitter between a slot and an arrival the summary's
// window check allows.
const windowSlack = 20 * time.Millisecond

// eventType is the event of the demo's webhooks.
const eventType = "demo.ping"

// runDemo runs the demo: receiver up, burst enqueued, live table until every
// job arrived, chart written, summary printed; with Stay it then keeps
// receiving until ctx ends. out receives everything shown.
func runDemo(ctx context.Context, o options, out io.Writer) (*report, error) {
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	defer hc.CloseIdleConnections()
	api := &apiClient{base: o.API, key: o.APIKey, hc: hc}
	if err := api.waitReady(ctx, o.ReadyWithin); err != nil {
		return nil, err
	}
	rc := newReceiver(newRunID(), o.Secrets.verifiers)
	base, stop, err := serveReceiver(o, rc, out)
	if err != nil {
		return nil, err
	}
	defer stop()
	states, err := initialStates(ctx, api, o.Shares, out)
	if err != nil {
		return nil, err
	}
	total, unsigned := introduce(out, base, o, states)
	forfeited := forfeitCounter(ctx, hc, o.WorkerMetrics, out)
	done := rc.expect(o.Shares)
	origin := time.Now()
	if err := burst(ctx, api, rc.run, base, o.Shares); err != nil {
		return nil, err
	}
	rep := &report{Receiver: base, Enqueued: time.Since(origin), Unsigned: unsigned}
	if err := watch(ctx, api, rc, o, origin, states, done, out); err != nil {
		return nil, err
	}
	settle(ctx, api, o.Shares, states, 2*time.Second)
	rep.Forfeited = forfeited()
	rep.Tenants = finalReports(rc, o.Shares, states, origin)
	if rep.Chart, err = saveChart(o.Out, rep, total); err != nil {
		return nil, err
	}
	printSummary(out, rep, total)
	if o.Stay {
		stay(ctx, out, rc, base, o.API, keyHint(o.APIKey), o.Shares)
	}
	return rep, nil
}

// forfeitCounter reads the worker's forfeited claims now and returns a func
// giving how many more there are when called; with no URL, or when the
// metrics cannot be read, that func returns -1.
func forfeitCounter(ctx context.Context, hc *http.Client, url string, out io.Writer) func() int64 {
	if url == "" {
		return func() int64 { return -1 }
	}
	before, err := forfeitedSlots(ctx, hc, url)
	if err != nil {
		fmt.Fprintf(out, "Note: %v; late claims are not counted.\n", err)
		return func() int64 { return -1 }
	}
	return func() int64 {
		after, err := forfeitedSlots(ctx, hc, url)
		if err != nil {
			return -1
		}
		return after - before
	}
}

// introduce prints what is about to happen; it returns the number of jobs
// and the tenants whose deliveries are unsigned.
func introduce(out io.Writer, base string, o options, states map[string]tenantState) (total int, unsigned []string) {
	fmt.Fprintf(out, "Receiver %s verifies every delivery's signature (Standard Webhooks).\n", base)
	for _, s := range o.Shares {
		total += s.Jobs
		if len(o.Secrets.verifiers(s.Tenant)) == 0 {
			unsigned = append(unsigned, s.Tenant)
			fmt.Fprintf(out, "Note: tenant %s has no webhook_secrets: its webhook jobs are refused (no_webhook_secret) unless its policy says unsigned: true, and then not checked.\n", s.Tenant)
		}
	}
	fmt.Fprintf(out, "Enqueuing %d webhooks at once: %s.\n\n", total, describeShares(o.Shares, states))
	return total, unsigned
}

// newRunID returns a random id that marks this run's jobs.
func newRunID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// serveReceiver starts the receiver; stop shuts it down.
func serveReceiver(o options, rc *receiver, out io.Writer) (base string, stop func(), err error) {
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil && o.ListenFallback {
		host, _, _ := net.SplitHostPort(o.Listen)
		fmt.Fprintf(out, "Receiver address %s is busy (%v): using a free port.\n", o.Listen, err)
		ln, err = net.Listen("tcp", net.JoinHostPort(host, "0"))
	}
	if err != nil {
		return "", nil, fmt.Errorf("receiver: listen on %s: %w", o.Listen, err)
	}
	hs := &http.Server{Handler: rc.Handler(), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hs.Serve(ln) // returns http.ErrServerClosed after Shutdown
	}()
	return "http://" + ln.Addr().String(), func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
		<-done
	}, nil
}

// initialStates reads each tenant's policy and backlog before the burst and
// warns about jobs left over from earlier runs.
func initialStates(ctx context.Context, api *apiClient, shares []share, out io.Writer) (map[string]tenantState, error) {
	states := make(map[string]tenantState, len(shares))
	for _, s := range shares {
		st, err := api.tenant(ctx, s.Tenant)
		if err != nil {
			return nil, err
		}
		if st.Policy.Rate.PerSecond <= 0 {
			return nil, fmt.Errorf("tenant %q: rate %q is not positive", s.Tenant, st.Policy.Rate.Text)
		}
		if st.Backlog > 0 {
			fmt.Fprintf(out, "Note: tenant %s still has %d jobs queued from before; they go first.\n", s.Tenant, st.Backlog)
		}
		states[s.Tenant] = st
	}
	return states, nil
}

func describeShares(shares []share, states map[string]tenantState) string {
	var b []byte
	for i, s := range shares {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = fmt.Appendf(b, "%d to %s (%s)", s.Jobs, s.Tenant, limitText(states[s.Tenant]))
	}
	return string(b)
}

// limitText is "50/s burst 5 conc 10".
func limitText(st tenantState) string {
	return fmt.Sprintf("%s burst %d conc %d", st.Policy.Rate.Text, st.Policy.Burst, st.Policy.Concurrency)
}

// burst enqueues every tenant's jobs at once, one batch request per tenant
// (per 1000 jobs), in parallel.
func burst(ctx context.Context, api *apiClient, run, base string, shares []share) error {
	errs := make([]error, len(shares))
	var wg sync.WaitGroup
	for i, s := range shares {
		jobs := make([]webhookJob, s.Jobs)
		for n := range jobs {
			jobs[n] = webhookJob{Type: "webhook", URL: base + "/hooks/" + s.Tenant, Event: eventType,
				Payload: payload{Run: run, N: n + 1}}
		}
		wg.Go(func() { errs[i] = api.enqueue(ctx, s.Tenant, jobs) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// watch redraws the table once a second until every job of the run has
// arrived (done), o.Timeout passes or ctx ends.
func watch(ctx context.Context, api *apiClient, rc *receiver, o options, origin time.Time,
	states map[string]tenantState, done <-chan struct{}, out io.Writer) error {
	deadline := time.NewTimer(o.Timeout)
	defer deadline.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	tb := &table{w: out, inPlace: o.Live}
	draw := func() {
		tb.draw(time.Since(origin), currentRows(ctx, api, rc, o.Shares, origin, states))
	}
	draw()
	for {
		select {
		case <-done:
			draw()
			return nil
		case <-tick.C:
			draw()
		case <-deadline.C:
			draw()
			return fmt.Errorf("not every webhook arrived within %s (see the worker's log)", o.Timeout)
		case <-ctx.Done():
			return fmt.Errorf("demo interrupted: %w", ctx.Err())
		}
	}
}

// currentRows reads the receiver's tallies and each tenant's state; a
// tenant whose state cannot be read keeps its last one in states.
func currentRows(ctx context.Context, api *apiClient, rc *receiver, shares []share, origin time.Time,
	states map[string]tenantState) []row {
	now := time.Since(origin)
	snap := rc.snapshot(tenantNames(shares), origin)
	rows := make([]row, len(shares))
	for i, s := range shares {
		r := row{Tenant: s.Tenant, Jobs: s.Jobs, Delivered: len(snap[s.Tenant].Arrivals),
			PerSecond: inLast(snap[s.Tenant].Arrivals, now, time.Second),
			Other:     snap[s.Tenant].Other, BadSig: snap[s.Tenant].BadSig}
		rctx, cancel := context.WithTimeout(ctx, 800*time.Millisecond)
		st, err := api.tenant(rctx, s.Tenant)
		cancel()
		if err == nil {
			states[s.Tenant] = st
			r.State = &st
		}
		r.Limit = limitText(states[s.Tenant])
		rows[i] = r
	}
	return rows
}

func tenantNames(shares []share) []string {
	names := make([]string, len(shares))
	for i, s := range shares {
		names[i] = s.Tenant
	}
	return names
}

// settle waits up to within for every tenant's backlog and running count to
// reach 0 (the worker finishes a job just after its delivery), polling
// every 100 ms; states gets the last states read.
func settle(ctx context.Context, api *apiClient, shares []share, states map[string]tenantState, within time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		busy := false
		for _, s := range shares {
			st, err := api.tenant(ctx, s.Tenant)
			if err != nil {
				return
			}
			states[s.Tenant] = st
			busy = busy || st.Backlog > 0 || st.Running > 0
		}
		if !busy {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// finalReports measures each tenant's arrivals.
func finalReports(rc *receiver, shares []share, states map[string]tenantState, origin time.Time) []tenantReport {
	snap := rc.snapshot(tenantNames(shares), origin)
	reps := make([]tenantReport, len(shares))
	for i, s := range shares {
		sn, st := snap[s.Tenant], states[s.Tenant]
		reps[i] = tenantReport{share: s, State: st, Arrivals: sn.Arrivals, Dups: sn.Dups, Other: sn.Other, BadSig: sn.BadSig,
			Measured: measuredRate(sn.Arrivals, st.limit().Burst),
			Excess:   windowExcess(sn.Arrivals, st.limit(), windowSlack)}
	}
	return reps
}
