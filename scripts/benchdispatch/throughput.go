package main

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// throughput is part 3: jobs/s end to end, receiver first arrival to last,
// of the same number of jobs through Sluice (spread over many tenants with
// high rates) and through bare asynq with the same worker concurrency; both
// backlogs are in Redis before the consumers start.
func throughput(ctx context.Context, e *env, t *table) error {
	n, c := e.o.tputJobs, e.o.concurrency
	bare, bareCalls, bareCPU, err := bareAsynq(ctx, e, "tput-asynq", n, c)
	if err != nil {
		return err
	}
	bareRate := throughputOf(bare)
	const part = "3 throughput"
	t.row(part, fmt.Sprintf("%d jobs, no-op receiver, TaskCheckInterval %s", n, e.o.tci), "Sluice",
		"bare asynq (tasks enqueued directly, handler POSTs)", "", "", "")
	concs := []int{c}
	if e.o.tputExtra > 0 && e.o.tputExtra != c {
		concs = append(concs, e.o.tputExtra)
	}
	for i, wc := range concs {
		arr, calls, cpu, ctr, err := sluiceThroughput(ctx, e, wc)
		if err != nil {
			t.row(part, fmt.Sprintf("jobs/s, %d tenants, worker concurrency %d (asynq: %d)", e.o.tputTenants, wc, c),
				"FAILED (below)", fmt.Sprintf("%.0f", bareRate), "", "≥ 0.70", "NO")
			t.note("throughput: Sluice at worker concurrency %d: %v", wc, err)
			break // the further row would fail the same way
		}
		rate := throughputOf(arr)
		measure := fmt.Sprintf("jobs/s, %d tenants, worker concurrency %d (asynq: %d)", e.o.tputTenants, wc, c)
		target, met := "≥ 0.70", yes(rate >= 0.7*bareRate)
		if i > 0 {
			target, met = "(not the target's setting)", ""
		}
		t.row(part, measure, fmt.Sprintf("%.0f", rate), fmt.Sprintf("%.0f", bareRate), div(rate, bareRate), target, met)
		t.row(part, fmt.Sprintf("Redis commands / job (worker concurrency %d)", wc),
			fmt.Sprintf("%.1f", float64(calls)/float64(len(arr))), fmt.Sprintf("%.1f", float64(bareCalls)/float64(len(bare))),
			div(float64(calls)/float64(len(arr)), float64(bareCalls)/float64(len(bare))), "", "")
		t.row(part, fmt.Sprintf("CPU, %% of one core (worker concurrency %d)", wc), cpu.format(cpuNames...), bareCPU.format(cpuNames...), "", "", "")
		t.row(part, fmt.Sprintf("CPU µs / job (worker concurrency %d)", wc), cpu.perJob(len(arr), cpuNames...), bareCPU.perJob(len(bare), cpuNames...), "", "", "")
		t.row(part, fmt.Sprintf("dispatcher and worker counters (worker concurrency %d)", wc), ctr, "-", "", "", "")
	}
	t.gap()
	return nil
}

// sluiceThroughput enqueues e.o.tputJobs jobs over e.o.tputTenants tenants
// (rate 100000/s each, per-tenant concurrency 100000) through the batch
// API with no worker running, then starts a worker of concurrency wc and
// waits for every job at the receiver.
func sluiceThroughput(ctx context.Context, e *env, wc int) ([]arrival, int64, cpuShares, string, error) {
	n, nt := e.o.tputJobs, e.o.tputTenants
	sl, err := e.startSluice(ctx, setup{name: fmt.Sprintf("throughput-c%d", wc), defaultRate: "100000/s",
		defaultConc: 100000, workerConc: wc})
	if err != nil {
		return nil, 0, cpuShares{}, "", err
	}
	defer sl.stop()
	run := fmt.Sprintf("tput-sluice-c%d", wc)
	rec := e.rcv.start(run)
	tenants := tenantNames("t", nt)
	var (
		mu  sync.Mutex
		ids []string
	)
	err = parallel(ctx, nt, 8, func(i int) error {
		k := n/nt + boolInt(i < n%nt)
		jobs := make([][]byte, k)
		for j := range jobs {
			jobs[j] = e.webhookJob(run, j)
		}
		got, err := sl.enqueueHTTP(ctx, tenants[i], jobs)
		mu.Lock()
		ids = append(ids, got...)
		mu.Unlock()
		return err
	})
	if err != nil {
		return nil, 0, cpuShares{}, "", err
	}
	rs0, err := e.redisStats(ctx)
	if err != nil {
		return nil, 0, cpuShares{}, "", err
	}
	start := time.Now()
	if err := sl.startWorker(ctx); err != nil {
		return nil, 0, cpuShares{}, "", err
	}
	meter, c0 := e.cpuMeter(ctx, sl), sl.counters(ctx)
	done := rec.waitDistinct(ctx, n, start.Add(boundFor(n)))
	cpu, ctr := meter.stop(), sl.counters(ctx).since(c0)
	rs1, err := e.redisStats(ctx)
	if err != nil {
		return nil, 0, cpuShares{}, "", err
	}
	if !done {
		missing := missingIDs(rec, ids)
		return nil, 0, cpuShares{}, "", fmt.Errorf("delivered %d of %d (%w); diagnosis:\n%s", n-len(missing), n, errTimeout,
			sl.diagnose(ctx, tenants[:1], missing))
	}
	e.logf("throughput: Redis commands at concurrency %d:%s", wc, rs1.sub(rs0).top(14, n))
	if extra := sl.problems(5); extra != "" {
		e.logf("throughput: log lines of the Sluice run at concurrency %d:\n%s", wc, extra)
	}
	return rec.snapshot(), rs1.sub(rs0).calls, cpu, ctr, nil
}

// minRate is the slowest delivery rate a throughput or scale run waits
// for: a run bounded by boundFor(n) that falls below it is reported as failed.
const minRate = 500

// boundFor is how long a run of n deliveries may take.
func boundFor(n int) time.Duration {
	return time.Duration(n)*time.Second/minRate + 10*time.Second
}

// tenantNames returns n tenant ids tag0000000, tag0000001, …
func tenantNames(tag string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%07d", tag, i)
	}
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
