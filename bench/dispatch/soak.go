package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// soakSample is one reading of the soak's processes and Redis.
type soakSample struct {
	at       time.Duration // since the producers started
	label    string        // "" during the load, else what the reading follows
	thG      float64       // throttler go_goroutines
	thHeap   float64       // throttler go_memstats_heap_alloc_bytes
	thLive   float64       // throttler go_gc_heap_live_bytes (the heap the last GC found live)
	wkG      float64       // worker go_goroutines
	wkHeap   float64       // worker go_memstats_heap_alloc_bytes
	wkLive   float64       // worker go_gc_heap_live_bytes
	wkGC     float64       // worker heap right after a forced GC (heapAfterGC), 0 when not served
	thConns  float64       // throttler's Redis connections (sluice_redis_pool_connections, every client and state)
	wkConns  float64       // worker's Redis connections (its two clients)
	redis    int64         // used_memory, bytes
	keys     int64         // DBSIZE
	accepted int64
	arrived  int
	stale    float64 // the worker's stale claims so far (a release swept before its claim)
	lapsed   float64 // the worker's releases dropped unclaimed so far (fetched after send time + grace)
	swept    float64 // the dispatcher's swept leases so far
	load     string
}

// staleClaims is the worker's series of claims refused as stale;
// lapsedClaims its releases dropped unclaimed, fetched after their send
// time + grace.
const (
	// liveHeap is the heap the last GC found live (httpserver.RegisterProcessMetrics):
	// go_memstats_heap_alloc_bytes counts uncollected garbage too, so two
	// single readings of it differ by up to the live heap itself.
	liveHeap     = "go_gc_heap_live_bytes"
	staleClaims  = `sluice_worker_claims_total{outcome="stale"}`
	poolConns    = "sluice_redis_pool_connections"
	lapsedClaims = `sluice_worker_claims_total{outcome="lapsed"}`
)

// soakCounts are the producers' outcomes.
type soakCounts struct {
	sent, accepted, canceled, dead, refused, errs atomic.Int64
	mu                                            sync.Mutex
	codes                                         map[string]int // "POST 503 unavailable" → refusals, "DELETE …", errors
}

// failed counts one refusal or error under what.
func (n *soakCounts) failed(what string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.codes == nil {
		n.codes = map[string]int{}
	}
	n.codes[what]++
}

// errorCode is the code of a Sluice JSON error body, else "?".
func errorCode(body []byte) string {
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || e.Error.Code == "" {
		return "?"
	}
	return e.Error.Code
}

// soak is part 6 (scripts/soak): a steady rate of webhook jobs through POST
// /v1/tenants/{t}/jobs over many tenants for a bounded duration, with short
// retentions; every -soak-every it reads the throttler's and the worker's
// goroutines and heap and Redis's used_memory. At the end it waits for the
// backlog to drain and the retention to pass, then scans the keyspace for
// keys without a TTL and tenants left behind.
func soak(ctx context.Context, e *env, t *table) error {
	o := e.o
	ret := o.soakRetention.String()
	sl, err := e.startSluice(ctx, setup{name: "soak", defaultRate: "10/s", defaultConc: 10, workerConc: o.soakConc, startWorker: true,
		extra: fmt.Sprintf("retention: {succeeded: %s, canceled: %s, dead: %s, idempotency: %s}\n", ret, ret, ret, ret)})
	if err != nil {
		return err
	}
	defer sl.stop()
	r := &soakRun{e: e, sl: sl, rec: e.rcv.startCounting("soak")}
	collapsed := r.load(ctx)
	if ctx.Err() != nil {
		printSoakSamples(os.Stdout, r.samples)
		return ctx.Err()
	}
	loadTime := time.Since(r.start)
	end, err := r.drainAndExpire(ctx)
	if err != nil {
		return err
	}
	printSoakSamples(os.Stdout, r.samples)
	soakRows(t, o, &r.c, r.samples, loadTime)
	r.endRows(ctx, t, collapsed, end)
	if extra := sl.problems(5); extra != "" {
		e.logf("soak: log lines:\n%s", extra)
	}
	t.gap()
	return nil
}

// soakRun is one soak: its Sluice, what the receiver counts, the
// producers' outcomes and the readings so far.
type soakRun struct {
	e       *env
	sl      *sluice
	rec     *recording
	c       soakCounts
	start   time.Time // when the producers started
	samples []soakSample
}

// load runs the producers for -soak-duration with a reading every
// -soak-every, and returns when the deliveries fell too far behind, else 0.
func (r *soakRun) load(ctx context.Context) (collapsed time.Duration) {
	o := r.e.o
	tenants := make([]string, o.soakTenants)
	for i := range tenants {
		tenants[i] = fmt.Sprintf("soak-%04d", i)
	}
	client := loadClient(2 * o.soakProducers)
	defer client.CloseIdleConnections()
	r.start = time.Now()
	pctx, stopLoad := context.WithTimeout(ctx, o.soakDuration)
	defer stopLoad()
	work := make(chan int, 1024)
	go emit(pctx, float64(o.soakRate), work)
	done := make(chan struct{})
	go func() {
		consume(o.soakProducers, work, func(i int) { r.sl.soakJob(ctx, client, tenants, i, &r.c) })
		close(done)
	}()
	r.samples = []soakSample{r.read(ctx, "")}
	tick := time.NewTicker(o.soakEvery)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return collapsed
		case <-tick.C:
			s := r.read(ctx, "")
			r.samples = append(r.samples, s)
			// Bounded: stop when the deliveries fall more than two
			// minutes of load behind (Redis would only fill up).
			if behind := s.accepted - r.c.canceled.Load() - int64(s.arrived); behind > 120*int64(o.soakRate) && collapsed == 0 {
				collapsed = s.at
				stopLoad()
			}
		}
	}
}

// read takes one reading, logs it and returns it.
func (r *soakRun) read(ctx context.Context, label string) soakSample {
	e, sl := r.e, r.sl
	th := sl.metricValues(ctx, sl.api+"/metrics", "go_goroutines", "go_memstats_heap_alloc_bytes", liveHeap, "sluice_dispatch_swept_total", poolConns)
	wk := sl.metricValues(ctx, sl.metrics+"/metrics", "go_goroutines", "go_memstats_heap_alloc_bytes", liveHeap, staleClaims, lapsedClaims, poolConns)
	keys, _ := e.rdb.DBSize(ctx).Result()
	_, n := r.rec.count()
	s := soakSample{at: time.Since(r.start), label: label, thG: th["go_goroutines"], thHeap: th["go_memstats_heap_alloc_bytes"],
		thLive: th[liveHeap], wkG: wk["go_goroutines"], wkHeap: wk["go_memstats_heap_alloc_bytes"], wkLive: wk[liveHeap], wkGC: sl.heapAfterGC(ctx),
		thConns: sumSeries(th, poolConns), wkConns: sumSeries(wk, poolConns),
		redis: e.usedMemory(ctx), keys: keys,
		accepted: r.c.accepted.Load(), arrived: n, stale: wk[staleClaims], lapsed: wk[lapsedClaims], swept: th["sluice_dispatch_swept_total"], load: loadAverage()}
	e.logf("soak %s %s: throttler %.0f goroutines %s heap (%s live), worker %.0f goroutines %s heap (%s live, %s after a forced GC), Redis connections %.0f / %.0f, redis %s, %d keys, accepted %d, arrived %d, "+
		"swept %.0f, stale claims %.0f, lapsed %.0f, load %s", s.at.Round(time.Second), label, s.thG, mb(s.thHeap), mb(s.thLive),
		s.wkG, mb(s.wkHeap), mb(s.wkLive), mb(s.wkGC), s.thConns, s.wkConns, mb(float64(s.redis)),
		s.keys, s.accepted, s.arrived, s.swept, s.stale, s.lapsed, s.load)
	return s
}

// soakEnd is what the soak found after the producers stopped.
type soakEnd struct {
	want       int           // jobs the receiver should see: accepted, not canceled
	drained    bool          // whether it saw them all in time
	drainTime  time.Duration // from the producers' end to the drain
	expiryTime time.Duration // from the drain to no key but the permanent ones
	keep       *regexp.Regexp
	ks         keyScan // the keyspace at the end
}

// drainAndExpire waits for every accepted job but the canceled ones to
// reach the receiver (the dead ones once, answered 400), then for no
// Sluice key but the permanent ones to be left, reading after each; then
// scans the keyspace.
func (r *soakRun) drainAndExpire(ctx context.Context) (soakEnd, error) {
	end := soakEnd{want: int(r.c.accepted.Load() - r.c.canceled.Load()), keep: permanentKeys(prefix)}
	stopped := time.Now()
	end.drained = r.rec.waitDistinct(ctx, end.want, stopped.Add(2*time.Minute))
	end.drainTime = time.Since(stopped)
	r.samples = append(r.samples, r.read(ctx, "drained"))
	deadline := time.Now().Add(3*r.e.o.soakRetention + 90*time.Second)
	for time.Now().Before(deadline) {
		left, err := r.e.scanKeys(ctx)
		if err != nil {
			return end, err
		}
		if left.sluiceLeft(end.keep) == 0 {
			break
		}
		if err := sleepCtx(ctx, 2*time.Second); err != nil {
			return end, err
		}
	}
	end.expiryTime = time.Since(stopped) - end.drainTime
	r.samples = append(r.samples, r.read(ctx, "expired"))
	var err error
	end.ks, err = r.e.scanKeys(ctx)
	return end, err
}

// endRows adds the rows of the load's end, the drain and the keys left.
func (r *soakRun) endRows(ctx context.Context, t *table, collapsed time.Duration, end soakEnd) {
	const part = "6 soak"
	o := r.e.o
	if collapsed > 0 {
		t.row(part, "load stopped early: deliveries more than 2 minutes of load behind", fmt.Sprintf("at %s", collapsed.Round(time.Second)), "", "",
			"never", "NO")
	}
	last := r.samples[len(r.samples)-1]
	t.row(part, "dispatcher leases swept / worker stale claims / releases dropped unclaimed, lapsed (releases that reached no worker within grace)",
		fmt.Sprintf("%.0f / %.0f / %.0f", last.swept, last.stale, last.lapsed), "", "", "", "")
	requests, arrived := r.rec.count()
	t.row(part, "drain after the producers stopped: jobs delivered (requests beyond one per job)", fmt.Sprintf("%d of %d in %.1f s (%d)",
		arrived, end.want, end.drainTime.Seconds(), requests-arrived), "", "", "all", yes(end.drained))
	orphans, expiring, tenantsLeft, detail := end.ks.verdict(end.keep)
	t.row(part, fmt.Sprintf("keys %.0f s after the drain (retention %s)", end.expiryTime.Seconds(), o.soakRetention),
		fmt.Sprintf("%d: %s", end.ks.total(), detail), "", "", "", "")
	t.row(part, "keys without a TTL, not permanent", fmt.Sprintf("%d", orphans), "", "", "0", yes(orphans == 0))
	for _, l := range r.e.describeOrphans(ctx, end.ks, end.keep, 8) {
		t.note("soak: left without a TTL: %s", l)
	}
	t.row(part, "tenants with a key left behind", fmt.Sprintf("%d of %d (%d keys still expiring)", tenantsLeft, o.soakTenants, expiring), "", "", "0", yes(tenantsLeft == 0))
}

// soakJob sends job i of the soak to tenant i mod len(tenants): every 100th
// (i ≡ 17) is delayed by an hour and canceled at once, every 100th (i ≡ 59)
// fails permanently at the receiver (a dead letter), every 10th (i ≡ 3)
// carries an Idempotency-Key.
func (sl *sluice) soakJob(ctx context.Context, c *http.Client, tenants []string, i int, n *soakCounts) {
	tenant := tenants[i%len(tenants)]
	url, extra, header := sl.e.rcv.url("soak"), "", map[string]string(nil)
	switch {
	case i%100 == 17:
		extra = `,"delay":"1h"`
	case i%100 == 59:
		url += "?status=400"
	case i%10 == 3:
		header = map[string]string{"Idempotency-Key": fmt.Sprintf("soak-%d", i)}
	}
	body := fmt.Appendf(nil, `{"type":"webhook","url":%q,"event":"soak","payload":{"i":%d}%s}`, url, i, extra)
	n.sent.Add(1)
	a, err := sl.request(ctx, c, http.MethodPost, "/v1/tenants/"+tenant+"/jobs", body, header)
	switch {
	case err != nil:
		n.errs.Add(1)
		n.failed("POST error: " + errClass(err))
		return
	case a.status != http.StatusAccepted:
		n.refused.Add(1)
		n.failed(fmt.Sprintf("POST %d %s", a.status, errorCode(a.body)))
		return
	}
	n.accepted.Add(1)
	switch i % 100 {
	case 59:
		n.dead.Add(1)
	case 17:
		var ref struct{ ID string }
		if json.Unmarshal(a.body, &ref) != nil {
			n.errs.Add(1)
			n.failed("POST reply without an id")
			return
		}
		d, err := sl.request(ctx, c, http.MethodDelete, "/v1/jobs/"+ref.ID, nil, nil)
		switch {
		case err != nil:
			n.errs.Add(1)
			n.failed("DELETE error: " + errClass(err))
			return
		case d.status != http.StatusOK:
			n.errs.Add(1)
			n.failed(fmt.Sprintf("DELETE %d %s", d.status, errorCode(d.body)))
			return
		}
		n.canceled.Add(1)
	}
}

func printSoakSamples(w *os.File, samples []soakSample) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "t\tthrottler goroutines\tthrottler heap (live)\tworker goroutines\tworker heap (live; after a forced GC)\tRedis connections (throttler / worker)\tredis used_memory\tkeys\taccepted\tarrived\tswept\tstale claims\tlapsed\tload average\t")
	for _, s := range samples {
		at := s.at.Round(time.Second).String()
		if s.label != "" {
			at += " (" + s.label + ")"
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%s (%s)\t%.0f\t%s (%s; %s)\t%.0f / %.0f\t%s\t%d\t%d\t%d\t%.0f\t%.0f\t%.0f\t%s\t\n", at, s.thG, mb(s.thHeap), mb(s.thLive),
			s.wkG, mb(s.wkHeap), mb(s.wkLive), mb(s.wkGC), s.thConns, s.wkConns,
			mb(float64(s.redis)), s.keys, s.accepted, s.arrived, s.swept, s.stale, s.lapsed, s.load)
	}
	tw.Flush()
	fmt.Fprintln(w)
}

// soakRows adds the load and the growth after warm-up: the mean of the
// first three readings at or after the warm-up against the mean of the last
// three under load.
func soakRows(t *table, o options, c *soakCounts, samples []soakSample, loadTime time.Duration) {
	const part = "6 soak"
	t.row(part, fmt.Sprintf("%d jobs/s over %d tenants for %s, %d producers (1 %% canceled, 1 %% dead, 10 %% with Idempotency-Key), "+
		"retention %s, worker concurrency %d; a reading every %s, warm-up %s", o.soakRate, o.soakTenants, o.soakDuration, o.soakProducers,
		o.soakRetention, o.soakConc, o.soakEvery, o.soakWarmup), "", "", "", "", "")
	c.mu.Lock()
	codes := formatCounts(c.codes, "")
	c.mu.Unlock()
	t.row(part, "enqueued: accepted / refused / errors (achieved rate); what failed", fmt.Sprintf("%d / %d / %d (%.0f/s); %s", c.accepted.Load(), c.refused.Load(),
		c.errs.Load(), float64(c.sent.Load())/loadTime.Seconds(), codes), "", "", fmt.Sprintf("%d/s, none refused", o.soakRate),
		yes(c.refused.Load() == 0 && c.errs.Load() == 0 && float64(c.sent.Load())/loadTime.Seconds() >= 0.98*float64(o.soakRate)))
	var post []soakSample
	for _, s := range samples {
		if s.label == "" && s.at >= o.soakWarmup {
			post = append(post, s)
		}
	}
	if len(post) < 2 {
		t.row(part, "growth after warm-up", fmt.Sprintf("too few readings after the warm-up (%d)", len(post)), "", "", "", "")
		return
	}
	k := min(3, len(post)/2)
	for _, m := range []struct {
		name string
		v    func(soakSample) float64
		show func(float64) string
	}{
		{"throttler goroutines", func(s soakSample) float64 { return s.thG }, func(v float64) string { return fmt.Sprintf("%.0f", v) }},
		{"throttler heap", func(s soakSample) float64 { return s.thHeap }, mb},
		{"throttler live heap (after GC)", func(s soakSample) float64 { return s.thLive }, mb},
		{"worker goroutines", func(s soakSample) float64 { return s.wkG }, func(v float64) string { return fmt.Sprintf("%.0f", v) }},
		{"worker heap", func(s soakSample) float64 { return s.wkHeap }, mb},
		{"worker live heap (after GC)", func(s soakSample) float64 { return s.wkLive }, mb},
		{"worker heap after a forced GC (-tags pprof)", func(s soakSample) float64 { return s.wkGC }, mb},
		{"throttler Redis connections", func(s soakSample) float64 { return s.thConns }, func(v float64) string { return fmt.Sprintf("%.1f", v) }},
		{"worker Redis connections", func(s soakSample) float64 { return s.wkConns }, func(v float64) string { return fmt.Sprintf("%.1f", v) }},
		{"redis used_memory", func(s soakSample) float64 { return float64(s.redis) }, mb},
	} {
		mean := func(ss []soakSample) float64 {
			var sum float64
			for _, s := range ss {
				sum += m.v(s)
			}
			return sum / float64(len(ss))
		}
		a, b := mean(post[:k]), mean(post[len(post)-k:])
		if a == 0 {
			continue // not read in this run (the worker without pprof)
		}
		g := 100 * (b - a) / a
		t.row(part, fmt.Sprintf("%s, %s → %s (means of %d readings)", m.name, post[0].at.Round(time.Second), post[len(post)-1].at.Round(time.Second), k),
			fmt.Sprintf("%s → %s", m.show(a), m.show(b)), "", fmt.Sprintf("%+.1f %%", g), "≤ 2 % growth", yes(g <= 2))
	}
}

// errClass shortens a request error to its kind.
func errClass(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "Timeout"):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "other"
}

// heapAfterGC is the worker's heap right after a forced GC (# HeapAlloc of
// net/http/pprof's heap page with gc=1) when the worker serves pprof —
// built with -tags pprof, $SLUICE_PPROF_LISTEN set —, else 0. Unlike the
// metrics' figures it holds no uncollected garbage and nothing allocated
// during a GC's mark, so two readings compare.
func (sl *sluice) heapAfterGC(ctx context.Context) float64 {
	addr := os.Getenv("SLUICE_PPROF_LISTEN")
	if addr == "" {
		return 0
	}
	const field = "# HeapAlloc = "
	for _, l := range sl.scrape(ctx, "http://"+addr+"/debug/pprof/heap?gc=1&debug=1", []string{field}) {
		if v, err := strconv.ParseFloat(strings.TrimPrefix(l, field), 64); err == nil {
			return v
		}
	}
	return 0
}

// sumSeries is the sum of every series of metric name in m (all its label
// sets).
func sumSeries(m map[string]float64, name string) float64 {
	var sum float64
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			sum += v
		}
	}
	return sum
}
