package main

import (
	"context"
	"fmt"
	"time"
)

// scaleRun is one tenant count's cost measurement.
type scaleRun struct {
	tenants, perTenant int
	jobs               int     // deliveries inside the window
	calls              float64 // Redis commands per delivery
	cpuUS              float64 // Redis CPU (sys + user) µs per delivery
	rate               float64 // deliveries/s inside the window
	cpu                cpuShares
	ctr                string
}

// scale is part 2: the Redis cost per dispatched job over a fixed window of
// deliveries (after a warm-up) with 10, 1 000 and 100 000 backlogged
// tenants, each with ≥ 2 jobs and a high rate; the first count is the base.
func scale(ctx context.Context, e *env, t *table) error {
	const part = "2 scale"
	t.row(part, fmt.Sprintf("backlogged tenants, rate 1000/s each, window: deliveries %d…%d, worker concurrency %d",
		e.o.scaleWarmup, e.o.scaleWarmup+e.o.scaleWindow, e.o.scaleConc), "Sluice", "", "÷ first row", "", "")
	var base scaleRun
	for i, n := range e.o.scaleTenants {
		r, err := scaleOne(ctx, e, n)
		if err != nil {
			t.note("scale: %d tenants: %v", n, err)
			continue
		}
		if i == 0 {
			base = r
		}
		name := fmt.Sprintf("%d tenants × %d jobs", r.tenants, r.perTenant)
		target, met, metCPU := "", "", ""
		if i > 0 && base.jobs > 0 {
			target = fmt.Sprintf("≤ 1.2 × %d tenants", base.tenants)
			met, metCPU = yes(r.calls <= 1.2*base.calls), yes(r.cpuUS <= 1.2*base.cpuUS)
		}
		t.row(part, name+": Redis commands / job", fmt.Sprintf("%.1f", r.calls), "", div(r.calls, base.calls), target, met)
		t.row(part, name+": Redis CPU µs / job", fmt.Sprintf("%.1f", r.cpuUS), "", div(r.cpuUS, base.cpuUS), target, metCPU)
		t.row(part, name+": deliveries/s in the window", fmt.Sprintf("%.0f", r.rate), "", div(r.rate, base.rate), "", "")
		t.row(part, name+": CPU, % of one core", r.cpu.format(cpuNames...), "", "", "", "")
		t.row(part, name+": dispatcher and worker counters", r.ctr, "", "", "", "")
	}
	t.gap()
	return nil
}

// scaleOne is the scale part's run with n backlogged tenants: the backlog
// stored, the worker started, then Redis's commands and CPU over the window
// of deliveries after the warm-up.
func scaleOne(ctx context.Context, e *env, n int) (scaleRun, error) {
	sl, err := e.startSluice(ctx, setup{name: fmt.Sprintf("scale-%d", n), defaultRate: "1000/s",
		defaultConc: 100000, workerConc: e.o.scaleConc})
	if err != nil {
		return scaleRun{}, err
	}
	defer sl.stop()
	run := fmt.Sprintf("scale-%d", n)
	rec := e.rcv.start(run)
	per, err := scaleBacklog(ctx, e, sl, run, n)
	if err != nil {
		return scaleRun{}, err
	}
	start := time.Now()
	if err := sl.startWorker(ctx); err != nil {
		return scaleRun{}, err
	}
	m := scaleMarker{e: e, sl: sl, rec: rec, deadline: start.Add(boundFor(e.o.scaleWarmup + e.o.scaleWindow))}
	r, prof, err := m.window(ctx, n)
	if err != nil {
		return scaleRun{}, err
	}
	r.perTenant = per
	if prof != nil {
		if err := prof.stop(ctx, e); err != nil {
			return scaleRun{}, err
		}
		e.logf("scale: where Redis's time went with %d tenants (SLOWLOG of every command, a slower run than the table's): %s",
			n, prof.report(r.jobs, 12))
	}
	if extra := sl.problems(5); extra != "" {
		e.logf("scale: log lines of the %d-tenant run:\n%s", n, extra)
	}
	return r, nil
}

// scaleBacklog stores n tenants' backlog (enough jobs each for the warm-up
// and the window, and a fifth more) with the throttler stopped, restarts
// it and waits for its first read of the tenant series; returns the jobs
// per tenant.
func scaleBacklog(ctx context.Context, e *env, sl *sluice, run string, n int) (int, error) {
	need := (e.o.scaleWarmup + e.o.scaleWindow) * 6 / 5
	per := max(2, (need+n-1)/n)
	items, err := e.storeItems(run, per)
	if err != nil {
		return 0, err
	}
	// The throttler seeded the policies; it is stopped while the backlog is
	// stored, so that the dispatcher's passes do not compete with the load.
	sl.throttler.stop(10 * time.Second)
	t0 := time.Now()
	if err := e.enqueueStore(ctx, tenantNames("s", n), items, 16); err != nil {
		return 0, fmt.Errorf("enqueue %d × %d jobs: %w", n, per, err)
	}
	e.logf("scale: %d tenants × %d jobs enqueued in %s", n, per, time.Since(t0).Round(time.Millisecond))
	if err := sl.startThrottler(ctx); err != nil {
		return 0, err
	}
	// The throttler's first read of its /metrics tenant series (a walk of
	// every tenant: seconds at 100 000 tenants) ends before the worker
	// starts: the window measures dispatch, and the scrapes at its edges
	// find that read fresh (it serves them for 20 times its duration,
	// dispatch.StateCostFactor) — a scrape's cost, not a job's.
	return per, sl.awaitTenantSeries(ctx, 2*time.Minute)
}

// scaleMarker reads the edges of the scale part's window.
type scaleMarker struct {
	e        *env
	sl       *sluice
	rec      *recording
	deadline time.Time
}

// mark waits for k deliveries, runs before (outside the window) and reads
// the window's edge: deliveries, Redis's counters, the time.
func (m scaleMarker) mark(ctx context.Context, k int, before func()) (int, redisStats, time.Time, error) {
	if !m.rec.waitDistinct(ctx, k, m.deadline) {
		_, got := m.rec.count()
		return 0, redisStats{}, time.Time{}, fmt.Errorf("%d of %d deliveries before the deadline (%w); diagnosis:\n%s",
			got, k, errTimeout, m.sl.diagnose(ctx, tenantNames("s", 1), nil))
	}
	before()
	_, c0 := m.rec.count()
	at := time.Now()
	st, err := m.e.redisStats(ctx)
	_, c1 := m.rec.count()
	return (c0 + c1) / 2, st, at, err
}

// window measures the window of n tenants' deliveries after the warm-up,
// with a script profile when -script-profile (the caller stops it).
func (m scaleMarker) window(ctx context.Context, n int) (scaleRun, *scriptProfile, error) {
	e, sl := m.e, m.sl
	// The counters are scraped outside the window: a scrape of the
	// throttler's /metrics may start a read of its state collector, which
	// walks every tenant (a few commands each: at 100 000 tenants more than
	// the window's dispatch) — a cost per scrape, not per job; the first
	// read has ended before the worker started (above).
	var (
		ctr0 counters
		prof *scriptProfile
		err  error
	)
	c0, s0, at0, err := m.mark(ctx, max(e.o.scaleWarmup, 1), func() {
		ctr0 = sl.counters(ctx)
		if e.o.scriptProfile {
			if prof, err = e.startProfile(ctx); err != nil {
				e.logf("scale: script profile: %v", err)
			}
		}
	})
	if err != nil {
		return scaleRun{}, nil, err
	}
	meter := e.cpuMeter(ctx, sl)
	e.logf("scale: the %d-tenant window opens", n) // a cue for an outside profiler
	c1, s1, at1, err := m.mark(ctx, e.o.scaleWarmup+e.o.scaleWindow, func() {})
	if err != nil {
		return scaleRun{}, prof, err
	}
	cpu, ctr := meter.stop(), sl.counters(ctx).since(ctr0)
	d, jobs := s1.sub(s0), c1-c0
	e.logf("scale: Redis commands of the %d-tenant window:%s", n, d.top(16, jobs))
	return scaleRun{tenants: n, jobs: jobs, calls: float64(d.calls) / float64(jobs),
		cpuUS: d.cpu * 1e6 / float64(jobs), rate: float64(jobs) / at1.Sub(at0).Seconds(), cpu: cpu, ctr: ctr}, prof, nil
}
