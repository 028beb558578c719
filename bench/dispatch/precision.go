package main

import (
	"context"
	"fmt"
	"time"
)

// precisionRun is one system's precision measurement.
type precisionRun struct {
	p        pacing
	want     int           // jobs enqueued
	elapsed  time.Duration // from the start of delivery to the end of the run
	bounded  bool          // stopped by the time bound
	calls    int64         // Redis commands over the run
	handlers int64         // handler calls (peer only)
	cpu      cpuShares
	ctr      string // dispatcher and worker counters (Sluice only)
	pacer    pacing // the bare pacer beside it (Sluice only; runPacer)
	pacerErr error
}

func (r precisionRun) perJob(n int64) string {
	if r.p.distinct == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(n)/float64(r.p.distinct))
}

// precision is part 1: one tenant at r/s, burst 1, a backlog of N jobs
// enqueued at once, measured at the receiver; the asynq wiki pattern beside it.
func precision(ctx context.Context, e *env, t *table) error {
	s, err := precisionSluice(ctx, e, t)
	if err != nil {
		return err
	}
	peer, err := precisionPeer(ctx, e)
	if err != nil {
		t.note("precision: the asynq wiki peer failed: %v", err)
	}
	precisionRows(e, t, s, peer)
	return nil
}

func precisionSluice(ctx context.Context, e *env, t *table) (precisionRun, error) {
	r, n := e.o.precRate, e.o.precJobs
	sl, err := e.startSluice(ctx, setup{
		name: "precision", defaultRate: "10/s", defaultConc: 10, workerConc: e.o.concurrency, startWorker: true,
		tenants: map[string]string{"bench": fmt.Sprintf("{rate: %d/s, burst: 1, concurrency: 100}", r)},
	})
	if err != nil {
		return precisionRun{}, err
	}
	defer sl.stop()
	const run = "precision-sluice"
	rec := e.rcv.start(run)
	jobs := e.webhookJobs(run, n)
	rs0, err := e.redisStats(ctx)
	if err != nil {
		return precisionRun{}, err
	}
	meter, c0 := e.cpuMeter(ctx, sl), sl.counters(ctx)
	start := time.Now()
	ids, err := sl.enqueueHTTP(ctx, "bench", jobs)
	if err != nil {
		return precisionRun{}, err
	}
	// The control: a bare pacer at the same rate over the same window.
	const pacerRun = "precision-pacer"
	pacerRec := e.rcv.start(pacerRun)
	pacerDone := make(chan error, 1)
	go func() { pacerDone <- runPacer(ctx, e.rcv.url(pacerRun), time.Second/time.Duration(r), n, time.Now()) }()
	limit := time.Duration(float64(n)/float64(r)*float64(time.Second)) + 30*time.Second
	done := rec.waitDistinct(ctx, n, start.Add(limit))
	pacerErr := <-pacerDone // it ends n·T after the enqueue, as Sluice should
	rs1, err := e.redisStats(ctx)
	if err != nil {
		return precisionRun{}, err
	}
	cpu := meter.stop()
	c1 := sl.counters(ctx)
	ctr := c1.since(c0)
	if late := c1.lateSends(c0); late != "" {
		ctr += "; " + late
	}
	res := precisionRun{p: pace(rec.snapshot(), float64(r)), want: n, elapsed: time.Since(start),
		bounded: !done, calls: rs1.sub(rs0).calls, cpu: cpu, ctr: ctr,
		pacer: pace(pacerRec.snapshot(), float64(r)), pacerErr: pacerErr}
	if !done {
		missing := missingIDs(rec, ids)
		t.note("precision: Sluice delivered %d of %d jobs within %s; %d missing. Diagnosis:\n%s",
			res.p.distinct, n, limit, len(missing), sl.diagnose(ctx, []string{"bench"}, missing))
	}
	return res, nil
}

// precisionRows adds the precision part's rows: Sluice beside the peer.
func precisionRows(e *env, t *table, s, peer precisionRun) {
	r := float64(e.o.precRate)
	T := time.Duration(float64(time.Second) / r)
	const part = "1 precision"
	peerName := fmt.Sprintf("asynq wiki pattern (Concurrency %d, forwarder %s, RetryIn %s)",
		e.o.peerConc, orDefault(e.o.peerForward, "5s"), e.o.peerRetry)
	t.row(part, fmt.Sprintf("one tenant, r = %d/s, b = 1, %d jobs at once", e.o.precRate, e.o.precJobs),
		"Sluice", peerName, "", "", "")
	t.row(part, "delivered (distinct webhook-ids)", precDelivered(s), precDelivered(peer), "", "all", yes(s.p.distinct == s.want))
	t.row(part, "duplicate deliveries", fmt.Sprint(s.p.delivered-s.p.distinct), fmt.Sprint(peer.p.delivered-peer.p.distinct), "", "0", yes(s.p.delivered == s.p.distinct))
	sRate, pRate := rateOver(s), rateOver(peer)
	t.row(part, "jobs/s delivered (all jobs ÷ run time)", fmt.Sprintf("%.2f", sRate), fmt.Sprintf("%.2f", pRate), div(sRate, pRate), "", "")
	t.row(part, fmt.Sprintf("|gap − %s| p50", T), precGap(s, s.p.gapP50), precGap(peer, peer.p.gapP50), "", "", "")
	t.row(part, fmt.Sprintf("|gap − %s| p99", T), precGap(s, s.p.gapP99), precGap(peer, peer.p.gapP99), "",
		"≤ 5 ms (goal 2 ms)", yes(s.p.distinct > 1 && s.p.gapP99 <= 5*time.Millisecond))
	t.row(part, fmt.Sprintf("|gap − %s| max", T), precGap(s, s.p.gapMax), precGap(peer, peer.p.gapMax), "", "", "")
	precisionControlRow(t, s, T)
	t.row(part, "long-run rate error, (N−1)/(t_last−t_first) vs r", precRateErr(s), precRateErr(peer), "",
		"≤ 0.5 % (goal 0.1 %)", yes(s.p.distinct > 1 && s.p.rateErr <= 0.005))
	bound := 1 + r*(1+2*s.p.gapP99.Seconds()) + 1
	t.row(part, "most deliveries in any 1 s", fmt.Sprint(s.p.maxIn1s), fmt.Sprint(peer.p.maxIn1s), "",
		fmt.Sprintf("≤ b + r(1 s + 2ε) + 1 = %.1f", bound), yes(float64(s.p.maxIn1s) <= bound))
	t.row(part, "Redis commands / delivered job", s.perJob(s.calls), peer.perJob(peer.calls), "", "", "")
	t.row(part, "handler calls / delivered job", "-", peer.perJob(peer.handlers), "", "", "")
	t.row(part, "CPU, % of one core", s.cpu.format(cpuNames...), peer.cpu.format(cpuNames...), "", "", "")
	t.row(part, "dispatcher and worker counters", s.ctr, "-", "", "", "")
	t.gap()
}

// precisionControlRow adds the control beside Sluice: what the machine
// allowed in that window.
func precisionControlRow(t *table, s precisionRun, T time.Duration) {
	control := "-"
	if s.pacerErr != nil {
		t.note("precision: the bare pacer failed: %v", s.pacerErr)
	} else if s.pacer.distinct > 1 {
		control = fmt.Sprintf("%s / %s / %s (%d requests)", msf(s.pacer.gapP50), msf(s.pacer.gapP99), msf(s.pacer.gapMax), s.pacer.distinct)
	}
	ratio := ""
	if s.pacerErr == nil && s.pacer.distinct > 1 && s.p.distinct > 1 {
		ratio = div(s.p.gapP99.Seconds(), s.pacer.gapP99.Seconds()) + " (p99s)"
	}
	t.row("1 precision", fmt.Sprintf("control: a bare pacer beside Sluice, |gap − %s| p50 / p99 / max", T), control, "", ratio,
		"(what the machine allowed: one thread POSTing at exact instants, no Redis)", "")
}

// precDelivered is x's distinct deliveries of its jobs and its run time.
func precDelivered(x precisionRun) string {
	if x.want == 0 {
		return "-"
	}
	s := fmt.Sprintf("%d/%d in %.1f s", x.p.distinct, x.want, x.elapsed.Seconds())
	if x.bounded {
		s += " (time bound)"
	}
	return s
}

// precGap is the gap error d of x in ms, "-" with fewer than two arrivals.
func precGap(x precisionRun, d time.Duration) string {
	if x.p.distinct < 2 {
		return "-"
	}
	return msf(d)
}

// precRateErr is x's long-run rate error, "-" with fewer than two arrivals.
func precRateErr(x precisionRun) string {
	if x.p.distinct < 2 {
		return "-"
	}
	return fmt.Sprintf("%.3f %% (%.3f/s)", 100*x.p.rateErr, x.p.rate)
}

// rateOver is the jobs delivered per second over the whole run.
func rateOver(x precisionRun) float64 {
	if x.elapsed <= 0 {
		return 0
	}
	return float64(x.p.distinct) / x.elapsed.Seconds()
}

func orDefault(d time.Duration, def string) string {
	if d == 0 {
		return def
	}
	return d.String()
}
