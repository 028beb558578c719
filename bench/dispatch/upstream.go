package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"
)

// upstreamRun is one stream measured at the receiver: its pacing, and for
// the shared stream each tenant's share of the first half of the deliveries.
type upstreamRun struct {
	p        pacing
	bound    pacing // over boundSpan: while the upstream was the bottleneck
	need     int    // tenants with jobs left that make the upstream the bottleneck
	want     int
	elapsed  time.Duration
	bounded  bool
	minShare float64 // the smallest and largest tenant share of the first half, ÷ the even share
	maxShare float64
}

// upstreamName is the shared upstream of the upstream part.
const upstreamName = "bench-up"

// upstream is the part "upstream" (only when named in -parts): the
// precision of a shared upstream's stream. Many tenants, each allowed ten
// times its even share of the upstream, send every job through one
// upstream at r/s (burst 1); beside it, one tenant at r/s alone, in the same
// run. Measured at the receiver while the upstream is the bottleneck
// (boundSpan; the whole stream in one more row): the gap error and the rate
// error of the combined stream against the upstream's rate, the most
// arrivals in any second against the bound; and how evenly the tenants
// shared it.
func upstream(ctx context.Context, e *env, t *table) error {
	r, n, tenants := e.o.upRate, e.o.upJobs, e.o.upTenants
	alone, err := upstreamStream(ctx, e, "upstream-alone", 1, r, n, false)
	if err != nil {
		return err
	}
	shared, err := upstreamStream(ctx, e, "upstream-shared", tenants, r, n, true)
	if err != nil {
		return err
	}
	upstreamRows(e, t, alone, shared)
	return nil
}

// upstreamStream runs n jobs over tenants tenants. With viaUpstream, every
// job names the upstream at r/s and each tenant's own rate is 10·r/tenants
// (the upstream is the bottleneck); without, the one tenant's rate is r/s.
func upstreamStream(ctx context.Context, e *env, run string, tenants, r, n int, viaUpstream bool) (upstreamRun, error) {
	policies := map[string]string{}
	names := make([]string, tenants)
	tenantRate := r
	if viaUpstream {
		tenantRate = max(10*r/tenants, 1)
	}
	for i := range names {
		names[i] = fmt.Sprintf("up%03d", i)
		policies[names[i]] = fmt.Sprintf("{rate: %d/s, burst: 1, concurrency: 100}", tenantRate)
	}
	s := setup{name: run, defaultRate: "10/s", defaultConc: 10, workerConc: e.o.concurrency, startWorker: true, tenants: policies}
	if viaUpstream {
		s.extra = fmt.Sprintf("upstreams:\n  %s: {rate: %d/s, burst: 1}\n", upstreamName, r)
	}
	sl, err := e.startSluice(ctx, s)
	if err != nil {
		return upstreamRun{}, err
	}
	defer sl.stop()
	rec := e.rcv.start(run)
	start := time.Now()
	owner, all, err := upstreamEnqueue(ctx, e, sl, run, names, n, viaUpstream)
	if err != nil {
		return upstreamRun{}, err
	}
	limit := time.Duration(float64(n)/float64(r)*float64(time.Second)) + 30*time.Second
	done := rec.waitDistinct(ctx, n, start.Add(limit))
	arr := rec.snapshot()
	res := upstreamRun{p: pace(arr, float64(r)), want: n, elapsed: time.Since(start), bounded: !done}
	res.minShare, res.maxShare = shares(arr, owner, tenants)
	res.need = (r + tenantRate - 1) / tenantRate
	res.bound = pace(boundSpan(arr, owner, tenants, res.need), float64(r))
	if !done {
		return res, fmt.Errorf("%s: delivered %d of %d jobs within %s; %d missing", run, res.p.distinct, n, limit, len(missingIDs(rec, all)))
	}
	return res, nil
}

// upstreamEnqueue enqueues jobs 0 … n−1 of run, job i for tenant i mod
// len(names), each naming the upstream when via — behind a pause of the
// upstream (upstreamHold) — and returns each job's tenant index and the ids.
func upstreamEnqueue(ctx context.Context, e *env, sl *sluice, run string, names []string, n int, via bool) (map[string]int, []string, error) {
	if via {
		if err := upstreamHold(ctx, sl, "pause"); err != nil {
			return nil, nil, err
		}
	}
	owner := map[string]int{} // job id → tenant index
	var all []string
	for ti, tn := range names {
		jobs := make([][]byte, 0, n/len(names)+1)
		for i := ti; i < n; i += len(names) {
			jobs = append(jobs, upstreamJob(e, run, i, via))
		}
		ids, err := sl.enqueueHTTP(ctx, tn, jobs)
		if err != nil {
			return nil, nil, err
		}
		for _, id := range ids {
			owner[id] = ti
		}
		all = append(all, ids...)
	}
	if via {
		if err := upstreamHold(ctx, sl, "resume"); err != nil {
			return nil, nil, err
		}
	}
	return owner, all, nil
}

// upstreamHold pauses ("pause", until resumed) or resumes the run's
// upstream. The shared stream's jobs are enqueued behind a pause: enqueued
// one tenant after another (~1 ms each), the first tenants' jobs would
// otherwise leave while the last ones are still being queued, and the
// stream's start would measure the enqueue loop, not the upstream.
func upstreamHold(ctx context.Context, sl *sluice, action string) error {
	code, body, err := sl.call(ctx, http.MethodPost, "/v1/upstreams/"+upstreamName+"/"+action, nil)
	if err == nil && code != 200 {
		err = fmt.Errorf("%d %s", code, body)
	}
	if err != nil {
		return fmt.Errorf("upstream %s: %w", action, err)
	}
	return nil
}

// boundSpan is the part of arr (any order) during which the upstream was
// the bottleneck: up to the arrival after which fewer than need tenants had
// jobs left (need = ⌈r / each tenant's rate⌉). Past it the tenants' own
// rates set the pace (the last jobs of a few tenants, each at its own
// interval), which says nothing of the upstream's.
func boundSpan(arr []arrival, owner map[string]int, tenants, need int) []arrival {
	sorted := byArrival(arr)
	left := make([]int, tenants)
	for _, ti := range owner {
		left[ti]++
	}
	busy := 0
	for _, n := range left {
		if n > 0 {
			busy++
		}
	}
	seen := map[string]bool{}
	for i, a := range sorted {
		ti, ok := owner[a.id]
		if !ok || seen[a.id] {
			continue // a duplicate delivery
		}
		seen[a.id] = true
		if left[ti]--; left[ti] == 0 {
			busy--
		}
		if busy < need {
			return sorted[:i+1]
		}
	}
	return sorted
}

// upstreamJob is job i of run, naming the upstream when via.
func upstreamJob(e *env, run string, i int, via bool) []byte {
	ups := ""
	if via {
		ups = fmt.Sprintf(`,"upstreams":[%q]`, upstreamName)
	}
	return fmt.Appendf(nil, `{"type":"webhook","url":"%s","event":"bench.%s","payload":{"i":%d}%s}`, e.rcv.url(run), run, i, ups)
}

// byArrival is a copy of arr in arrival order.
func byArrival(arr []arrival) []arrival {
	sorted := slices.Clone(arr)
	slices.SortFunc(sorted, func(a, b arrival) int { return a.at.Compare(b.at) })
	return sorted
}

// shares returns the smallest and the largest share of the first half of
// the deliveries (by arrival) that one tenant got, each ÷ the even share
// 1/tenants: 1.0 is a perfectly even split.
func shares(arr []arrival, owner map[string]int, tenants int) (lo, hi float64) {
	if tenants < 1 || len(arr) < 2 {
		return 0, 0
	}
	sorted := byArrival(arr)
	half := sorted[:len(sorted)/2]
	count := make([]int, tenants)
	for _, a := range half {
		if ti, ok := owner[a.id]; ok {
			count[ti]++
		}
	}
	even := float64(len(half)) / float64(tenants)
	return float64(slices.Min(count)) / even, float64(slices.Max(count)) / even
}

func upstreamRows(e *env, t *table, alone, shared upstreamRun) {
	const part = "upstream"
	r := float64(e.o.upRate)
	T := time.Duration(float64(time.Second) / r)
	t.row(part, fmt.Sprintf("%d jobs at r = %d/s, b = 1, delivered to one receiver", e.o.upJobs, e.o.upRate),
		fmt.Sprintf("%d tenants via one upstream at r", e.o.upTenants), "one tenant at r, no upstream", "", "", "")
	delivered := func(x upstreamRun) string {
		s := fmt.Sprintf("%d/%d in %.1f s", x.p.distinct, x.want, x.elapsed.Seconds())
		if x.bounded {
			s += " (time bound)"
		}
		return s
	}
	t.row(part, "delivered (distinct webhook-ids)", delivered(shared), delivered(alone), "", "all", yes(shared.p.distinct == shared.want))
	t.row(part, "duplicate deliveries", fmt.Sprint(shared.p.delivered-shared.p.distinct), fmt.Sprint(alone.p.delivered-alone.p.distinct), "", "0",
		yes(shared.p.delivered == shared.p.distinct))
	sb, ab := shared.bound, alone.bound
	t.row(part, fmt.Sprintf("deliveries while the upstream was the bottleneck (≥ %d tenants with jobs left)", shared.need),
		fmt.Sprintf("%d of %d", sb.delivered, shared.p.delivered), fmt.Sprintf("%d of %d", ab.delivered, alone.p.delivered), "", "", "")
	t.row(part, fmt.Sprintf("|gap − %s| p50", T), msf(sb.gapP50), msf(ab.gapP50), "", "", "")
	t.row(part, fmt.Sprintf("|gap − %s| p99", T), msf(sb.gapP99), msf(ab.gapP99),
		div(sb.gapP99.Seconds(), ab.gapP99.Seconds()), "≤ 5 ms (goal 2 ms)", yes(sb.gapP99 <= 5*time.Millisecond))
	t.row(part, fmt.Sprintf("|gap − %s| max", T), msf(sb.gapMax), msf(ab.gapMax), "", "", "")
	rerr := func(x pacing) string { return fmt.Sprintf("%.3f %% (%.3f/s)", 100*x.rateErr, x.rate) }
	t.row(part, "long-run rate error vs r", rerr(sb), rerr(ab), "",
		"≤ 0.5 % (goal 0.1 %)", yes(sb.rateErr <= 0.005))
	t.row(part, "the whole stream, the tenants' last jobs included: rate error; |gap| p99, max", fmt.Sprintf("%s; %s, %s", rerr(shared.p), msf(shared.p.gapP99), msf(shared.p.gapMax)),
		fmt.Sprintf("%s; %s, %s", rerr(alone.p), msf(alone.p.gapP99), msf(alone.p.gapMax)), "", "", "")
	bound := 1 + r*(1+2*sb.gapP99.Seconds()) + 1
	t.row(part, "most deliveries in any 1 s", fmt.Sprint(shared.p.maxIn1s), fmt.Sprint(alone.p.maxIn1s), "",
		fmt.Sprintf("≤ b + r(1 s + 2ε) + 1 = %.1f", bound), yes(float64(shared.p.maxIn1s) <= bound))
	even := float64(e.o.upJobs) / 2 / float64(e.o.upTenants)
	t.row(part, fmt.Sprintf("jobs per tenant in the first half, min–max (even share %.0f)", even),
		fmt.Sprintf("%.0f–%.0f", shared.minShare*even, shared.maxShare*even), "-", "", "", "")
	t.gap()
}
