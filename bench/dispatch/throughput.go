package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// The targets of the throughput part, per delivered job, against bare
// asynq at the same worker concurrency in the same run: issue 33's for
// jobs/s (at concurrency 100 and 400 alike), Redis commands and Redis CPU;
// issue 13's for the whole machine (issue 33 sets none).
const (
	tputTarget      = 1.0 // jobs/s ÷ bare asynq's, 1 000 tenants, the same concurrency
	tputFloor       = 0.9 // … below this the change is not acceptable
	cmdsTarget      = 15  // Redis commands per job, asynq's own included
	redisCPUTarget  = 1.0 // Redis CPU per job ÷ bare asynq's
	systemCPUTarget = 200 // CPU µs per job of Redis, throttler, worker and bench together
)

// systemNames are the processes whose CPU counts in the whole-machine
// figure: everything the run consists of, not the rest of the machine
// ("other").
var systemNames = []string{"redis", "throttler", "worker", "bench"}

// tputRun is one system's throughput run.
type tputRun struct {
	arr    []arrival
	redis  redisStats // the change over the run
	cpu    cpuShares
	ctr    string // dispatcher and worker counters (Sluice only)
	spread spread // of the handed-off jobs over hash slots
}

// rate is the jobs/s from the first arrival to the last.
func (r tputRun) rate() float64 { return throughputOf(r.arr) }

// perJob is x per delivered job (0 without deliveries).
func (r tputRun) perJob(x float64) float64 {
	if len(r.arr) == 0 {
		return 0
	}
	return x / float64(len(r.arr))
}

func (r tputRun) commands() float64   { return r.perJob(float64(r.redis.calls)) }
func (r tputRun) redisCPU() float64   { return r.perJob(r.redis.cpu * 1e6) }
func (r tputRun) inCommands() float64 { return r.perJob(r.redis.inCommands() * 1e6) }
func (r tputRun) redisSys() float64   { return r.perJob(r.redis.sys * 1e6) }

// systemCPU is the CPU µs per job of systemNames together.
func (r tputRun) systemCPU() float64 {
	var cores float64
	for _, n := range systemNames {
		cores += r.cpu.cores[n]
	}
	return r.perJob(cores * r.cpu.seconds * 1e6)
}

// throughput is part 3: jobs/s end to end, receiver first arrival to last,
// of the same number of jobs through Sluice (spread over many tenants with
// high rates) and through bare asynq with the same worker concurrency, run
// just before it; both backlogs are in Redis before the consumers start.
// Every row is a setting of the targets.
func throughput(ctx context.Context, e *env, t *table) error {
	n := e.o.tputJobs
	const part = "3 throughput"
	t.row(part, fmt.Sprintf("%d jobs, no-op receiver, TaskCheckInterval %s", n, e.o.tci), "Sluice",
		"bare asynq (tasks enqueued directly, handler POSTs), same worker concurrency", "", "", "")
	concs := []int{e.o.concurrency}
	if e.o.tputExtra > 0 && e.o.tputExtra != e.o.concurrency {
		concs = append(concs, e.o.tputExtra)
	}
	for _, wc := range concs {
		bare, err := bareAsynq(ctx, e, fmt.Sprintf("tput-asynq-c%d", wc), n, wc)
		if err != nil {
			return err
		}
		e.logf("throughput: Redis commands of bare asynq at concurrency %d:%s", wc, bare.redis.top(14, n))
		measure := fmt.Sprintf("jobs/s, %d tenants, worker concurrency %d (asynq: %d)", e.o.tputTenants, wc, wc)
		s, err := sluiceThroughput(ctx, e, wc)
		if err != nil {
			t.row(part, measure, "FAILED (below)", fmt.Sprintf("%.0f", bare.rate()), "", tputTargetText, "NO")
			t.note("throughput: Sluice at worker concurrency %d: %v", wc, err)
			break // the further row would fail the same way
		}
		t.row(part, measure, fmt.Sprintf("%.0f", s.rate()), fmt.Sprintf("%.0f", bare.rate()), div(s.rate(), bare.rate()),
			tputTargetText, tputMet(s.rate()/bare.rate()))
		tputCostRows(t, part, wc, s, bare)
	}
	t.gap()
	return nil
}

const tputTargetText = "≥ 1.0 × asynq (floor 0.9)"

// tputMet judges a throughput ratio against the target and the floor.
func tputMet(ratio float64) string {
	switch {
	case ratio >= tputTarget:
		return "yes"
	case ratio >= tputFloor:
		return "NO (floor met)"
	default:
		return "NO (below floor)"
	}
}

// tputCostRows are the per-job costs of the Sluice run s at worker
// concurrency wc beside bare asynq's, with their targets.
func tputCostRows(t *table, part string, wc int, s, bare tputRun) {
	at := fmt.Sprintf(" (worker concurrency %d)", wc)
	t.row(part, "Redis commands / job"+at, fmt.Sprintf("%.1f", s.commands()), fmt.Sprintf("%.1f", bare.commands()),
		div(s.commands(), bare.commands()), fmt.Sprintf("≤ %d", cmdsTarget), yes(s.commands() <= cmdsTarget))
	t.row(part, "Redis CPU µs / job"+at, fmt.Sprintf("%.0f", s.redisCPU()), fmt.Sprintf("%.0f", bare.redisCPU()),
		div(s.redisCPU(), bare.redisCPU()), fmt.Sprintf("≤ %.1f × asynq", redisCPUTarget),
		yes(bare.redisCPU() > 0 && s.redisCPU() <= redisCPUTarget*bare.redisCPU()))
	t.row(part, "of which inside the commands (not scripts' Lua, protocol, event loop)"+at,
		fmt.Sprintf("%.0f", s.inCommands()), fmt.Sprintf("%.0f", bare.inCommands()), div(s.inCommands(), bare.inCommands()), "", "")
	t.row(part, "of which in the kernel (system calls: the network, mostly)"+at,
		fmt.Sprintf("%.0f", s.redisSys()), fmt.Sprintf("%.0f", bare.redisSys()), div(s.redisSys(), bare.redisSys()), "", "")
	t.row(part, "whole-machine CPU µs / job, "+strings.Join(systemNames, " + ")+at,
		fmt.Sprintf("%.0f", s.systemCPU()), fmt.Sprintf("%.0f", bare.systemCPU()), div(s.systemCPU(), bare.systemCPU()),
		fmt.Sprintf("≤ %d", systemCPUTarget), yes(len(s.cpu.cores) > 0 && s.systemCPU() <= systemCPUTarget))
	t.row(part, "CPU, % of one core"+at, s.cpu.format(cpuNames...), bare.cpu.format(cpuNames...), "", "", "")
	t.row(part, "CPU µs / job"+at, s.cpu.perJob(len(s.arr), cpuNames...), bare.cpu.perJob(len(bare.arr), cpuNames...), "", "", "")
	t.row(part, "hand-off spread over Redis Cluster hash slots"+at, s.spread.String(), bare.spread.String(), "",
		"< 100 % (no one slot carries all)", yes(s.spread.jobs > 0 && s.spread.share() < 1))
	t.row(part, "dispatcher and worker counters"+at, s.ctr, "-", "", "", "")
	if s.spread.jobs > 0 {
		t.note("throughput: hand-off spread at worker concurrency %d from %s", wc, s.spread.source)
	}
}

// sluiceThroughput enqueues e.o.tputJobs jobs over e.o.tputTenants tenants
// (rate 100000/s each, per-tenant concurrency 100000) through the batch
// API with no worker running, then starts a worker of concurrency wc and
// waits for every job at the receiver.
func sluiceThroughput(ctx context.Context, e *env, wc int) (tputRun, error) {
	n, nt := e.o.tputJobs, e.o.tputTenants
	sl, err := e.startSluice(ctx, setup{name: fmt.Sprintf("throughput-c%d", wc), defaultRate: "100000/s",
		defaultConc: 100000, workerConc: wc})
	if err != nil {
		return tputRun{}, err
	}
	defer sl.stop()
	run := fmt.Sprintf("tput-sluice-c%d", wc)
	rec := e.rcv.start(run)
	tenants := tenantNames("t", nt)
	ids, err := enqueueSpread(ctx, e, sl, run, tenants, n)
	if err != nil {
		return tputRun{}, err
	}
	// The counters are scraped outside the Redis window: a scrape of the
	// throttler's /metrics runs its state collector, which walks every
	// tenant (a few commands each) — a cost per scrape, not per job.
	c0 := sl.counters(ctx)
	rs0, err := e.redisStats(ctx)
	if err != nil {
		return tputRun{}, err
	}
	prof, err := e.startProfiles(ctx, run, true)
	defer prof.end()
	if err != nil {
		return tputRun{}, err
	}
	start := time.Now()
	if err := sl.startWorker(ctx); err != nil {
		return tputRun{}, err
	}
	meter := e.cpuMeter(ctx, sl)
	done := rec.waitDistinct(ctx, n, start.Add(boundFor(n)))
	cpu := meter.stop()
	rs1, err := e.redisStats(ctx)
	if err != nil {
		return tputRun{}, err
	}
	c1 := sl.counters(ctx)
	if err := prof.stop(ctx, e, wc, n); err != nil {
		return tputRun{}, err
	}
	if !done {
		missing := missingIDs(rec, ids)
		return tputRun{}, fmt.Errorf("delivered %d of %d (%w); diagnosis:\n%s", n-len(missing), n, errTimeout,
			sl.diagnose(ctx, tenants[:1], missing))
	}
	e.logf("throughput: Redis commands at concurrency %d:%s", wc, rs1.sub(rs0).top(14, n))
	if extra := sl.problems(5); extra != "" {
		e.logf("throughput: log lines of the Sluice run at concurrency %d:\n%s", wc, extra)
	}
	return tputRun{arr: rec.snapshot(), redis: rs1.sub(rs0), cpu: cpu, ctr: c1.since(c0), spread: handoffSpread(c1, c0)}, nil
}

// enqueueSpread enqueues n webhook jobs to the receiver's run, spread evenly
// over tenants, through the batch API (8 tenants at once), and returns
// their ids.
func enqueueSpread(ctx context.Context, e *env, sl *sluice, run string, tenants []string, n int) ([]string, error) {
	var (
		mu  sync.Mutex
		ids []string
	)
	nt := len(tenants)
	err := parallel(ctx, nt, 8, func(i int) error {
		k := n/nt + boolInt(i < n%nt)
		got, err := sl.enqueueHTTP(ctx, tenants[i], e.webhookJobs(run, k))
		mu.Lock()
		ids = append(ids, got...)
		mu.Unlock()
		return err
	})
	return ids, err
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
