package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/deliverytest"
)

// fleetBurst is every tenant's burst in the many-tenant run.
const fleetBurst = 1

// fleetRun is what the many-tenant run on the Cluster measured.
type fleetRun struct {
	tenants, perTenant int
	arr                []arrival
	requests, distinct int
	bounds             boundCheck
	redis              redisStats
	cpu                cpuShares
	ctr                string
	spread             spread
}

// stopFleet stops every throttler of fl first (no more releases), then
// every process.
func stopFleet(fl []*sluice) {
	for _, m := range fl {
		m.throttler.stop(10 * time.Second)
	}
	for _, m := range fl {
		m.stop()
	}
}

// fleetOnCluster is the many-tenant run: -scaleout-tenants tenants of rate
// -scaleout-rate (burst 1), -scaleout-jobs jobs each stored with no
// throttler running, then -scaleout-throttlers throttlers and
// -scaleout-workers workers (each of -concurrency) on the Cluster until
// every job arrived; each tenant's arrivals are checked against its bound.
func fleetOnCluster(ctx context.Context, ce *env) (fleetRun, error) {
	o := ce.o
	n, per := o.soTenants, o.soJobs
	first, err := ce.startSluice(ctx, setup{name: "scaleout-fleet", defaultRate: fmt.Sprintf("%d/s", o.soRate),
		defaultConc: 100000, workerConc: o.concurrency})
	if err != nil {
		return fleetRun{}, err
	}
	fl := []*sluice{first}
	defer func() { stopFleet(fl) }()
	// The first throttler seeded meta and the policies; it is stopped while
	// the backlog is stored (as in the scale part).
	first.throttler.stop(10 * time.Second)
	const run = "scaleout-fleet"
	rec := ce.rcv.start(run)
	tenantOf, err := enqueueIndexed(ctx, ce, run, tenantNames("f", n), per)
	if err != nil {
		return fleetRun{}, err
	}
	if fl, err = startFleet(ctx, first, o.soThrottlers); err != nil {
		return fleetRun{}, err
	}
	rs0, err := ce.redisStats(ctx)
	if err != nil {
		return fleetRun{}, err
	}
	c0 := fleetCounters(ctx, fl)
	start := time.Now()
	if err := startFleetWorkers(ctx, first, &fl, o.soWorkers); err != nil {
		return fleetRun{}, err
	}
	meter := ce.cpuMeterOf(ctx, procsOf(fl, false), procsOf(fl, true))
	done := rec.waitDistinct(ctx, n*per, start.Add(boundFor(n*per)))
	cpu, c1 := meter.stop(), fleetCounters(ctx, fl)
	rs1, err := ce.redisStats(ctx)
	if err != nil {
		return fleetRun{}, err
	}
	requests, distinct := rec.count()
	if !done {
		return fleetRun{}, fmt.Errorf("delivered %d of %d (%w); diagnosis:\n%s", distinct, n*per, errTimeout,
			first.diagnose(ctx, tenantNames("f", 1), nil))
	}
	for _, m := range fl {
		if extra := m.problems(5); extra != "" {
			ce.logf("scale-out: log lines of the many-tenant run (%s):\n%s", m.tag, extra)
		}
	}
	arr := rec.snapshot()
	return fleetRun{tenants: n, perTenant: per, arr: arr, requests: requests, distinct: distinct,
		bounds: checkBounds(arr, tenantOf, float64(o.soRate), fleetBurst), redis: rs1.sub(rs0), cpu: cpu,
		ctr: c1.since(c0), spread: handoffSpread(c1, c0)}, nil
}

// enqueueIndexed stores per jobs to the receiver's run for each tenant
// (16 at once) and returns each job's tenant: job id → index in tenants.
func enqueueIndexed(ctx context.Context, e *env, run string, tenants []string, per int) (map[string]int, error) {
	items, err := e.storeItems(run, per)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	tenantOf := make(map[string]int, len(tenants)*per)
	t0 := time.Now()
	err = parallel(ctx, len(tenants), 16, func(i int) error {
		ids, err := e.enqueueTenant(ctx, tenants[i], items)
		mu.Lock()
		for _, id := range ids {
			tenantOf[id] = i
		}
		mu.Unlock()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("enqueue %d × %d jobs: %w", len(tenants), per, err)
	}
	e.logf("scale-out: %d tenants × %d jobs enqueued in %s", len(tenants), per, time.Since(t0).Round(time.Millisecond))
	return tenantOf, nil
}

// startFleet restarts first's throttler and starts throttlers − 1 more on
// its config, each with its own API port; it returns them all.
func startFleet(ctx context.Context, first *sluice, throttlers int) ([]*sluice, error) {
	fl := []*sluice{first}
	if err := first.startThrottler(ctx); err != nil {
		return fl, err
	}
	for i := 1; i < throttlers; i++ {
		m := first.sibling(fmt.Sprintf("-t%d", i))
		port, err := freePort()
		if err != nil {
			return fl, err
		}
		m.api = "http://" + port
		fl = append(fl, m)
		if err := m.startThrottler(ctx); err != nil {
			return fl, err
		}
	}
	return fl, nil
}

// startFleetWorkers starts workers workers on first's config, appended to
// *fl, each waiting until the capacity of all so far is announced.
func startFleetWorkers(ctx context.Context, first *sluice, fl *[]*sluice, workers int) error {
	for i := range workers {
		m := first.sibling(fmt.Sprintf("-w%d", i))
		m.capacity = (i + 1) * first.s.workerConc
		*fl = append(*fl, m)
		if err := m.startWorker(ctx); err != nil {
			return err
		}
	}
	return nil
}

// sibling is one more Sluice process on sl's config and Redis, its logs
// named with tag; it has no API address (set one before startThrottler).
func (sl *sluice) sibling(tag string) *sluice {
	return &sluice{e: sl.e, s: sl.s, config: sl.config, rs0: sl.rs0, started: sl.started, tag: tag}
}

// procsOf are the fleet's workers (or throttlers) that were started.
func procsOf(fl []*sluice, workers bool) []*proc {
	var out []*proc
	for _, m := range fl {
		p := m.throttler
		if workers {
			p = m.worker
		}
		if p != nil {
			out = append(out, p)
		}
	}
	return out
}

// fleetCounters sums the counters of every process of the fleet.
func fleetCounters(ctx context.Context, fl []*sluice) counters {
	sum := counters{at: time.Now(), v: map[string]float64{}}
	for _, m := range fl {
		for k, v := range m.counters(ctx).v {
			sum.v[k] += v
		}
	}
	return sum
}

// boundCheck is each tenant's arrivals against its rate bound.
type boundCheck struct {
	tenants    int     // tenants with arrivals
	violations int     // tenants with a window above b + r·Δ + 1
	unknown    int     // arrivals of no enqueued job
	worst      float64 // the largest excess over the bound of any window (≤ 0: none above it)
	worstAt    int     // its tenant's index
}

// checkBounds groups arrivals by tenant (tenantOf: job id → tenant index)
// and checks, for each tenant of rate r (per second) and burst b, that no
// window of its arrivals holds more than b + r·Δ + 1
// (deliverytest.WorstWindow; a tenant with fewer than 3 arrivals and b = 1
// cannot exceed it).
func checkBounds(arr []arrival, tenantOf map[string]int, r float64, b int) boundCheck {
	by := map[int][]time.Time{}
	c := boundCheck{worst: -1e9, worstAt: -1}
	for _, a := range arr {
		i, ok := tenantOf[a.id]
		if !ok {
			c.unknown++
			continue
		}
		by[i] = append(by[i], a.at)
	}
	c.tenants = len(by)
	for i, at := range by {
		slices.SortFunc(at, func(x, y time.Time) int { return x.Compare(y) })
		excess, _, _ := deliverytest.WorstWindow(at, r, b)
		if excess > 0 {
			c.violations++
		}
		if excess > c.worst || (excess == c.worst && i < c.worstAt) {
			c.worst, c.worstAt = excess, i
		}
	}
	return c
}

// fleetRows are the many-tenant run's rows.
func fleetRows(t *table, part string, o options, f fleetRun) {
	t.row(part, fmt.Sprintf("many-tenant run on the Cluster: %d tenants × %d jobs at %d/s (b %d), %d throttlers + %d workers (concurrency %d each)",
		f.tenants, f.perTenant, o.soRate, fleetBurst, o.soThrottlers, o.soWorkers, o.concurrency), "", "", "", "", "")
	t.row(part, "  tenants with a window above b + r·Δ + 1", fmt.Sprintf("%d of %d", f.bounds.violations, f.bounds.tenants),
		"-", "", "0", yes(f.bounds.tenants == f.tenants && f.bounds.violations == 0))
	t.row(part, "  the worst window's excess over b + r·Δ + 1 (≤ 0: within)", fmt.Sprintf("%+.2f", f.bounds.worst), "-", "", "", "")
	t.row(part, "  delivered: distinct / requests (duplicates), unknown", fmt.Sprintf("%d / %d (%d), %d",
		f.distinct, f.requests, f.requests-f.distinct, f.bounds.unknown), "-", "", fmt.Sprintf("%d distinct", f.tenants*f.perTenant),
		yes(f.distinct == f.tenants*f.perTenant && f.bounds.unknown == 0))
	t.row(part, "  jobs/s", fmt.Sprintf("%.0f", throughputOf(f.arr)), "-", "", "", "")
	jobs := len(f.arr)
	t.row(part, "  Redis commands / job, Redis CPU µs / job (sum of masters)", fmt.Sprintf("%.1f, %.0f",
		float64(f.redis.calls)/float64(max(1, jobs)), f.redis.cpu*1e6/float64(max(1, jobs))), "-", "", "", "")
	masterRows(t, part, "(many-tenant run)", f.redis.masters, f.cpu.seconds, jobs)
	t.row(part, "  CPU µs / job (throttlers and workers summed)", f.cpu.perJob(jobs, cpuNames...), "-", "", "", "")
	t.row(part, "  dispatcher and worker counters (summed)", f.ctr, "-", "", "", "")
}
