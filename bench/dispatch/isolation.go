package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/store"
)

// isoRun is the quiet tenant's measurement in one isolation run.
type isoRun struct {
	lat        []time.Duration // receiver arrival − slot, sorted
	slip       time.Duration   // last arrival − (earliest slot + (N − 1)·T): slots lost on the way
	p          pacing          // the quiet tenant's pacing
	noisyRate  float64         // noisy deliveries/s while the quiet tenant ran
	noisyCount int
	cpu        cpuShares
	ctr        string
}

// isolation is part 4: the quiet tenant's dispatch latency (receiver
// arrival − the job's slot, read from its record) alone, then next to a
// noisy tenant with a large backlog at a high rate.
func isolation(ctx context.Context, e *env, t *table) error {
	alone, err := isolationRun(ctx, e, false)
	if err != nil {
		t.note("isolation: %v", err)
	}
	noisy, err := isolationRun(ctx, e, true)
	if err != nil {
		t.note("isolation: %v", err)
	}
	const part = "4 isolation"
	t.row(part, fmt.Sprintf("quiet tenant %d/s, %d jobs; noisy %d/s, %d jobs backlog; worker concurrency %d",
		e.o.isoQuietRate, e.o.isoQuiet, e.o.isoNoisyRate, e.o.isoNoisy, e.o.isoConc),
		"quiet next to noisy", "quiet alone", "difference", "", "")
	movedRows(t, part, "quiet", noisy.lat, alone.lat, len(noisy.lat) == e.o.isoQuiet && len(alone.lat) == e.o.isoQuiet)
	T := time.Second / time.Duration(e.o.isoQuietRate)
	t.row(part, fmt.Sprintf("quiet: |gap − %s| p99", T), msf(noisy.p.gapP99), msf(alone.p.gapP99), "", "", "")
	t.row(part, fmt.Sprintf("quiet: schedule slip, last arrival − (first slot + (N−1)·%s)", T), msf(noisy.slip), msf(alone.slip),
		fmt.Sprintf("%+.3f ms", float64(noisy.slip-alone.slip)/float64(time.Millisecond)), "", "")
	t.row(part, "quiet: delivered", fmt.Sprintf("%d/%d", noisy.p.distinct, e.o.isoQuiet),
		fmt.Sprintf("%d/%d", alone.p.distinct, e.o.isoQuiet), "", "all", yes(noisy.p.distinct == e.o.isoQuiet && alone.p.distinct == e.o.isoQuiet))
	t.row(part, "noisy: deliveries/s while the quiet tenant ran", fmt.Sprintf("%.0f (%d)", noisy.noisyRate, noisy.noisyCount), "-", "",
		fmt.Sprintf("≈ %d (capacity suffices)", e.o.isoNoisyRate), yes(noisy.noisyRate >= 0.95*float64(e.o.isoNoisyRate)))
	t.row(part, "CPU, % of one core", noisy.cpu.format(cpuNames...), alone.cpu.format(cpuNames...), "", "", "")
	t.row(part, "dispatcher and worker counters", noisy.ctr, alone.ctr, "", "", "")
	t.gap()
	return nil
}

func isolationRun(ctx context.Context, e *env, withNoisy bool) (isoRun, error) {
	name := "isolation-alone"
	if withNoisy {
		name = "isolation-noisy"
	}
	sl, err := e.startSluice(ctx, setup{name: name, defaultRate: "10/s", defaultConc: 10, workerConc: e.o.isoConc, startWorker: true,
		tenants: map[string]string{
			"quiet": fmt.Sprintf("{rate: %d/s, burst: 1, concurrency: 100}", e.o.isoQuietRate),
			"noisy": fmt.Sprintf("{rate: %d/s, burst: 1, concurrency: 100000}", e.o.isoNoisyRate),
		}})
	if err != nil {
		return isoRun{}, err
	}
	defer sl.stop()
	quietRun, noisyRun := name+"-quiet", name+"-noisy"
	rec := e.rcv.start(quietRun)
	noisyRec := e.rcv.start(noisyRun)
	if withNoisy {
		if err := isolationBacklog(ctx, e, noisyRun); err != nil {
			return isoRun{}, err
		}
	}
	jobs := e.webhookJobs(quietRun, e.o.isoQuiet)
	meter, c0 := e.cpuMeter(ctx, sl), sl.counters(ctx)
	start := time.Now()
	n0, _ := noisyRec.count()
	ids, err := sl.enqueueHTTP(ctx, "quiet", jobs)
	if err != nil {
		return isoRun{}, err
	}
	limit := time.Duration(e.o.isoQuiet)*time.Second/time.Duration(e.o.isoQuietRate) + 30*time.Second
	done := rec.waitDistinct(ctx, e.o.isoQuiet, start.Add(limit))
	n1, _ := noisyRec.count()
	elapsed := time.Since(start)
	cpu := meter.stop()
	arr := rec.snapshot()
	res := isoRun{p: pace(arr, float64(e.o.isoQuietRate)), noisyCount: n1 - n0, noisyRate: float64(n1-n0) / elapsed.Seconds(),
		cpu: cpu, ctr: sl.counters(ctx).since(c0)}
	var first time.Time
	res.lat, first, err = slotLatencies(ctx, e, arr)
	if err != nil {
		return res, err
	}
	if n := len(res.p.sortedTime); n > 0 && !first.IsZero() {
		T := time.Second / time.Duration(e.o.isoQuietRate)
		res.slip = res.p.sortedTime[n-1].Sub(first.Add(time.Duration(n-1) * T))
	}
	if !done {
		missing := missingIDs(rec, ids)
		return res, fmt.Errorf("%s: quiet tenant delivered %d of %d within %s (latencies above: of those delivered); diagnosis:\n%s", name,
			e.o.isoQuiet-len(missing), e.o.isoQuiet, limit, sl.diagnose(ctx, []string{"quiet", "noisy"}, missing))
	}
	if extra := sl.problems(5); extra != "" {
		e.logf("isolation: log lines of %s:\n%s", name, extra)
	}
	return res, nil
}

// isolationBacklog stores the noisy tenant's backlog and gives it a second
// to reach its pace.
func isolationBacklog(ctx context.Context, e *env, run string) error {
	items, err := e.storeItems(run, e.o.isoNoisy)
	if err != nil {
		return err
	}
	if _, err := e.enqueueTenant(ctx, "noisy", items); err != nil {
		return fmt.Errorf("enqueue the noisy backlog: %w", err)
	}
	return sleepCtx(ctx, time.Second)
}

// slotLatencies is, per arrival, its time minus the slot recorded in its
// job's record (Redis time; Redis runs on this host, so both are this
// clock), sorted, and the earliest of the slots. The first arrival of each
// job counts. A job re-slotted by a late claim, or returned and released
// again, has the slot of its last release.
func slotLatencies(ctx context.Context, e *env, arr []arrival) ([]time.Duration, time.Time, error) {
	var first time.Time
	var lat []time.Duration
	err := firstArrivals(ctx, e, arr, func(a arrival, j store.Job) {
		lat = append(lat, a.at.Sub(j.Slot))
		if first.IsZero() || j.Slot.Before(first) {
			first = j.Slot
		}
	})
	if err != nil {
		return nil, time.Time{}, err
	}
	slices.Sort(lat)
	return lat, first, nil
}

// firstArrivals calls f with the first arrival of each job and the job's
// record, which must carry a slot.
func firstArrivals(ctx context.Context, e *env, arr []arrival, f func(arrival, store.Job)) error {
	seen := map[string]bool{}
	for _, a := range arr {
		if seen[a.id] {
			continue
		}
		seen[a.id] = true
		j, err := e.st.GetJob(ctx, a.id)
		if err != nil {
			return err
		}
		if j.Slot.IsZero() {
			return fmt.Errorf("job %s (state %s) has no slot in its record", a.id, j.State)
		}
		f(a, j)
	}
	return nil
}

// movedRows adds the rows of who's slot → arrival p50, p99 and max beside
// (lat) and alone (base), and their difference; the p99's target is to
// move by at most 10 ms, met only when complete (every job arrived in
// both runs).
func movedRows(t *table, part, who string, lat, base []time.Duration, complete bool) {
	for _, x := range []struct {
		name string
		q    float64
	}{{"p50", 0.5}, {"p99", 0.99}, {"max", 1}} {
		v, b := quantile(lat, x.q), quantile(base, x.q)
		target, met := "", ""
		if x.name == "p99" {
			target, met = "moved by ≤ 10 ms", yes(complete && v-b <= 10*time.Millisecond)
		}
		t.row(part, who+": slot → receiver arrival "+x.name, msf(v), msf(b),
			fmt.Sprintf("%+.3f ms", float64(v-b)/float64(time.Millisecond)), target, met)
	}
}
