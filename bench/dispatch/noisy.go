package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// noisyRun is one run of the noisy part: the measured quiet tenants, the
// quiet producers' outcomes, and (next to the noisy tenant) its outcomes.
type noisyRun struct {
	lat         []time.Duration // measured quiet jobs: receiver arrival − slot, sorted
	worstP99    time.Duration   // the largest p99 of one measured tenant
	worstTenant string
	delivered   int
	expected    int
	quiet       *quietCounts
	enqLat      []time.Duration // quiet POST round trips, sorted
	noisy       *hammerCounts   // nil without the noisy tenant
	probes      []string
	probesOK    int
	memMax      int64
	memEnd      int64
	cpu         cpuShares
	elapsed     time.Duration
	load        string
	ctr         string
}

// quietCounts are the quiet producers' outcomes.
type quietCounts struct {
	sent, accepted, refused, errs, sampleAccepted atomic.Int64
	mu                                            sync.Mutex
	lat                                           []time.Duration
	tenants                                       map[string]bool
	codes                                         map[string]int // refusals and errors: "503 unavailable" → count
}

// hammerCounts are the noisy tenant's outcomes: each 429 is checked
// against its admission bucket (code rate_limited, Retry-After a whole
// number of seconds in 1 … ⌈cost / admit rate⌉, equal to the "admit"
// limit's t in RateLimit).
type hammerCounts struct {
	sent, accepted, limited, goodRetry, other, errs atomic.Int64
	mu                                              sync.Mutex
	bad                                             []string // the first wrong 429s
	retryAfter                                      map[string]int
}

// noisy is part 5: many tenants enqueueing at a modest rate through the
// HTTP API (a sample of them measured: slot → receiver arrival), alone and
// next to one noisy tenant hammering POST …/jobs at a multiple of its admit
// rate; the noisy tenant's 429s and their Retry-After are checked, and a
// retry after Retry-After must be admitted.
func noisy(ctx context.Context, e *env, t *table) error {
	alone, err := noisyPartRun(ctx, e, false)
	if err != nil {
		t.note("noisy: %v", err)
	}
	next, err := noisyPartRun(ctx, e, true)
	if err != nil {
		t.note("noisy: %v", err)
	}
	o := e.o
	const part = "5 noisy"
	rest := o.noisyTenants - 1 - o.noisySample
	t.row(part, fmt.Sprintf("%d tenants (each first enqueues one job): %d measured at %g/s each, %d more at %g/s together, %d producers over HTTP; noisy: admit %g/s burst %d, "+
		"hammering POST …/jobs at %g/s (%.0f×) for %s; worker concurrency %d", o.noisyTenants, o.noisySample, o.noisySampleRate, rest, o.noisyRestRate,
		o.noisyProducers, o.noisyAdmit, noisyBurst(o), o.noisyAdmit*o.noisyFactor, o.noisyFactor, o.noisyDuration, o.noisyConc),
		"quiet next to noisy", "quiet alone", "difference", "", "")
	noisyLatencyRows(t, next, alone)
	noisyEnqueueRows(t, next, alone)
	if next.noisy != nil {
		noisyHammerRows(t, o, next)
	}
	t.row(part, "Redis used_memory, most / at the end", fmt.Sprintf("%s / %s", mb(float64(next.memMax)), mb(float64(next.memEnd))),
		fmt.Sprintf("%s / %s", mb(float64(alone.memMax)), mb(float64(alone.memEnd))), "", "", "")
	t.row(part, "CPU, % of one core", next.cpu.format(cpuNames...), alone.cpu.format(cpuNames...), "", "", "")
	t.row(part, "dispatcher and worker counters", next.ctr, alone.ctr, "", "", "")
	t.row(part, "load average at the end of the run", next.load, alone.load, "", "", "")
	t.gap()
	return nil
}

// noisyHammers is the number of goroutines sending the noisy tenant's
// requests: enough to keep 400/s going at a 100 ms round trip.
const noisyHammers = 48

func noisyBurst(o options) int { return max(1, int(math.Ceil(2*o.noisyAdmit))) }

// formatCounts lists m as "<key><unit> ×<count>", sorted; "-" when empty.
func formatCounts(m map[string]int, unit string) string {
	var parts []string
	for k, n := range m {
		parts = append(parts, fmt.Sprintf("%s%s ×%d", k, unit, n))
	}
	slices.Sort(parts)
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// noisyPartRun is one run of the noisy part: the quiet tenants' load for
// -noisy-duration, with the noisy tenant's when withNoisy; then every
// measured job's latency, and with the noisy tenant a retry after its
// Retry-After.
func noisyPartRun(ctx context.Context, e *env, withNoisy bool) (noisyRun, error) {
	o := e.o
	name := "noisy-alone"
	if withNoisy {
		name = "noisy-next"
	}
	res := noisyRun{quiet: &quietCounts{tenants: map[string]bool{}, codes: map[string]int{}}, elapsed: time.Nanosecond}
	admit := strconv.FormatFloat(o.noisyAdmit, 'f', -1, 64)
	sl, err := e.startSluice(ctx, setup{name: name, defaultRate: "10/s", defaultConc: 10, workerConc: o.noisyConc, startWorker: true,
		tenants: map[string]string{"noisy": fmt.Sprintf("{rate: 10/s, burst: %d, admit: {rate: %s/s, burst: %d}}", noisyBurst(o), admit, noisyBurst(o))}})
	if err != nil {
		return res, err
	}
	defer sl.stop()
	quiet := make([]string, o.noisyTenants-1)
	for i := range quiet {
		quiet[i] = fmt.Sprintf("q%05d", i)
	}
	n := &noisyLoad{e: e, sl: sl, name: name, sample: quiet[:o.noisySample], rest: quiet[o.noisySample:], res: &res,
		client: loadClient(2 * (o.noisyProducers + noisyHammers))}
	defer n.client.CloseIdleConnections()
	if err := sl.seedTenants(ctx, n.client, name, quiet); err != nil {
		return res, err
	}
	recs := make([]*recording, len(n.sample))
	for i := range n.sample {
		recs[i] = e.rcv.start(name + "-" + n.sample[i])
	}
	e.rcv.startCounting(name + "-rest")
	e.rcv.startCounting(name + "-noisy")
	meter, c0 := e.cpuMeter(ctx, sl), sl.counters(ctx)
	memStop := make(chan struct{})
	memDone := make(chan int64)
	go func() { memDone <- e.watchMemory(ctx, memStop) }()
	n.produce(ctx, withNoisy)
	res.cpu = meter.stop()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if err := n.measure(ctx, recs, c0); err != nil {
		return res, err
	}
	if withNoisy {
		res.probes, res.probesOK = sl.probeRetryAfter(ctx, n.client, e.rcv.url(name+"-noisy"))
	}
	close(memStop)
	res.memMax = <-memDone
	res.memEnd = e.usedMemory(ctx)
	res.load = loadAverage()
	if extra := sl.problems(5); extra != "" {
		e.logf("noisy: log lines of %s:\n%s", name, extra)
	}
	return res, nil
}

// noisyLoad is what one run of the noisy part sends with and to.
type noisyLoad struct {
	e            *env
	sl           *sluice
	client       *http.Client
	name         string   // the run: noisy-alone or noisy-next
	sample, rest []string // the measured quiet tenants, the others
	res          *noisyRun
}

// produce sends the quiet tenants' jobs (the measured ones at
// -noisy-sample-rate each, the rest at -noisy-rest-rate together) and, when
// withNoisy, the noisy tenant's for -noisy-duration; sets res.elapsed.
func (n *noisyLoad) produce(ctx context.Context, withNoisy bool) {
	o, e, sl, res := n.e.o, n.e, n.sl, n.res
	start := time.Now()
	lctx, stopLoad := context.WithTimeout(ctx, o.noisyDuration)
	defer stopLoad()
	var wg sync.WaitGroup
	produce := func(rate float64, workers int, f func(i int)) {
		ch := make(chan int, 256)
		go emit(lctx, rate, ch)
		wg.Go(func() { consume(workers, ch, f) })
	}
	half := max(1, o.noisyProducers/2)
	produce(o.noisySampleRate*float64(len(n.sample)), half, func(i int) {
		tenant := n.sample[i%len(n.sample)]
		if ok, _ := sl.quietJob(ctx, n.client, tenant, e.rcv.url(n.name+"-"+tenant), i, res.quiet); ok {
			res.quiet.sampleAccepted.Add(1)
		}
	})
	if len(n.rest) > 0 && o.noisyRestRate > 0 {
		produce(o.noisyRestRate, max(1, o.noisyProducers-half), func(i int) {
			sl.quietJob(ctx, n.client, n.rest[i%len(n.rest)], e.rcv.url(n.name+"-rest"), i, res.quiet)
		})
	}
	if withNoisy {
		res.noisy = &hammerCounts{retryAfter: map[string]int{}}
		produce(o.noisyAdmit*o.noisyFactor, noisyHammers, func(i int) { sl.hammer(ctx, n.client, e.rcv.url(n.name+"-noisy"), i, res.noisy) })
	}
	wg.Wait()
	res.elapsed = time.Since(start)
}

// measure waits for every measured job (up to 60 s), then reads the
// counters since c0, the measured jobs' latencies (pooled and the worst
// tenant's p99) and the quiet POSTs' round trips.
func (n *noisyLoad) measure(ctx context.Context, recs []*recording, c0 counters) error {
	e, res := n.e, n.res
	res.expected = int(res.quiet.sampleAccepted.Load())
	if !waitUntil(ctx, time.Now().Add(60*time.Second), func() bool { return distinctAll(recs) >= res.expected }) {
		e.logf("%s: %d of %d measured jobs delivered within 60 s", n.name, distinctAll(recs), res.expected)
	}
	res.ctr = n.sl.counters(ctx).since(c0)
	var arr []arrival
	for i, rec := range recs {
		a := rec.snapshot()
		arr = append(arr, a...)
		lat, _, err := slotLatencies(ctx, e, a)
		if err != nil {
			return err
		}
		if p := quantile(lat, 0.99); p > res.worstP99 {
			res.worstP99, res.worstTenant = p, n.sample[i]
		}
	}
	res.delivered = distinctAll(recs)
	var err error
	res.lat, _, err = slotLatencies(ctx, e, arr)
	if err != nil {
		return err
	}
	res.quiet.mu.Lock()
	res.enqLat = slices.Clone(res.quiet.lat)
	res.quiet.mu.Unlock()
	slices.Sort(res.enqLat)
	return nil
}

// watchMemory reads used_memory every 500 ms until stop is closed and
// returns the most it saw.
func (e *env) watchMemory(ctx context.Context, stop <-chan struct{}) int64 {
	most := e.usedMemory(ctx)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return max(most, e.usedMemory(ctx))
		case <-ctx.Done():
			return most
		case <-tick.C:
			most = max(most, e.usedMemory(ctx))
		}
	}
}

func distinctAll(recs []*recording) int {
	n := 0
	for _, r := range recs {
		_, d := r.count()
		n += d
	}
	return n
}

// waitUntil polls cond every 50 ms until it holds, ctx ends or the deadline
// passes; it reports whether it held.
func waitUntil(ctx context.Context, deadline time.Time, cond func() bool) bool {
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || sleepCtx(ctx, 50*time.Millisecond) != nil {
			return false
		}
	}
}

// noisyDiff is a − b in ms, signed.
func noisyDiff(a, b time.Duration) string {
	return fmt.Sprintf("%+.3f ms", float64(a-b)/float64(time.Millisecond))
}

// noisyLatencyRows adds the measured quiet tenants' slot → arrival
// latencies next to the noisy tenant and alone.
func noisyLatencyRows(t *table, next, alone noisyRun) {
	const part = "5 noisy"
	for _, x := range []struct {
		name string
		q    float64
	}{{"p50", 0.5}, {"p99", 0.99}, {"max", 1}} {
		a, b := quantile(next.lat, x.q), quantile(alone.lat, x.q)
		target, met := "", ""
		if x.name == "p99" {
			target, met = "moved by ≤ 10 ms", yes(len(next.lat) > 0 && len(alone.lat) > 0 && a-b <= 10*time.Millisecond)
		}
		t.row(part, fmt.Sprintf("quiet: slot → receiver arrival %s (measured jobs pooled)", x.name), msf(a), msf(b), noisyDiff(a, b), target, met)
	}
	t.row(part, "quiet: the worst measured tenant's p99", fmt.Sprintf("%s (%s)", msf(next.worstP99), next.worstTenant),
		fmt.Sprintf("%s (%s)", msf(alone.worstP99), alone.worstTenant), noisyDiff(next.worstP99, alone.worstP99), "moved by ≤ 10 ms",
		yes(next.worstP99 > 0 && next.worstP99-alone.worstP99 <= 10*time.Millisecond))
}

// noisyEnqueueRows adds the quiet tenants' deliveries, enqueue outcomes
// and round trips next to the noisy tenant and alone.
func noisyEnqueueRows(t *table, next, alone noisyRun) {
	const part = "5 noisy"
	// A POST answered 503 "outcome unknown" may still have stored its job:
	// delivered can exceed the accepted.
	t.row(part, "quiet: measured jobs delivered / accepted", fmt.Sprintf("%d/%d", next.delivered, next.expected), fmt.Sprintf("%d/%d", alone.delivered, alone.expected),
		"", "all", yes(next.expected > 0 && next.delivered >= next.expected && alone.delivered >= alone.expected))
	qc := func(r noisyRun) string {
		r.quiet.mu.Lock()
		defer r.quiet.mu.Unlock()
		return fmt.Sprintf("%d / %d / %d (%.0f/s), %d tenants; %s", r.quiet.accepted.Load(), r.quiet.refused.Load(), r.quiet.errs.Load(),
			float64(r.quiet.sent.Load())/r.elapsed.Seconds(), len(r.quiet.tenants), formatCounts(r.quiet.codes, ""))
	}
	t.row(part, "quiet: enqueued accepted / refused / errors (rate), tenants that enqueued; refusals", qc(next), qc(alone), "", "none refused",
		yes(next.quiet.refused.Load()+next.quiet.errs.Load()+alone.quiet.refused.Load()+alone.quiet.errs.Load() == 0))
	t.row(part, "quiet: POST …/jobs round trip p50 / p99", fmt.Sprintf("%s / %s", msf(quantile(next.enqLat, .5)), msf(quantile(next.enqLat, .99))),
		fmt.Sprintf("%s / %s", msf(quantile(alone.enqLat, .5)), msf(quantile(alone.enqLat, .99))), "", "", "")
}

// noisyHammerRows adds the noisy tenant's outcomes: its rate, what was
// admitted, its 429s and a retry after Retry-After.
func noisyHammerRows(t *table, o options, next noisyRun) {
	const part = "5 noisy"
	h := next.noisy
	sent := h.sent.Load()
	t.row(part, "noisy: requests sent (rate) → 202 / 429 / other / errors", fmt.Sprintf("%d (%.0f/s) → %d / %d / %d / %d", sent, float64(sent)/next.elapsed.Seconds(),
		h.accepted.Load(), h.limited.Load(), h.other.Load(), h.errs.Load()), "-", "", fmt.Sprintf("≈ %g/s", o.noisyAdmit*o.noisyFactor),
		yes(float64(sent)/next.elapsed.Seconds() >= 0.9*o.noisyAdmit*o.noisyFactor))
	bound := float64(noisyBurst(o)) + o.noisyAdmit*next.elapsed.Seconds()
	t.row(part, "noisy: admitted while hammering", fmt.Sprintf("%d", h.accepted.Load()), "-", "", fmt.Sprintf("≤ burst + rate·t = %.0f", bound),
		yes(float64(h.accepted.Load()) <= bound+1))
	t.row(part, fmt.Sprintf("noisy: 429s with a correct Retry-After (rate_limited, 1 … ⌈1/%g⌉ s, = the admit t)", o.noisyAdmit),
		fmt.Sprintf("%d/%d (Retry-After %s)", h.goodRetry.Load(), h.limited.Load(), formatCounts(h.retryAfter, " s")), "-", "", "all",
		yes(h.limited.Load() > 0 && h.goodRetry.Load() == h.limited.Load()))
	t.row(part, "noisy: a retry after Retry-After seconds is admitted (after the hammer)", fmt.Sprintf("%d/%d: %s", next.probesOK, len(next.probes),
		strings.Join(next.probes, "; ")), "-", "", "all", yes(len(next.probes) > 0 && next.probesOK == len(next.probes)))
	for _, b := range h.bad {
		t.note("noisy: wrong 429: %s", b)
	}
}
