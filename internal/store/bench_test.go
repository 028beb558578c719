package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/wire"
)

// BenchmarkPass measures the dispatcher's cost per released job with 10 and
// with 10 000 tenants, all backlogged, on one shard (docs/design.md §5 Scale: the
// cost per dispatched job must not grow with the number of tenants).
//
// Each tenant runs at 10/s (T = 100ms), burst 1, so every visit releases
// exactly one job; one op is one round: passes until the shard has nothing
// more due (K = 256 tenants per pass, D = 90ms), then — untimed, pipelined —
// workers claim every job at its send time and finish it, one new job per
// tenant keeps the backlogs at their depth, and the clock moves on to 10ms
// before the next slots (within L: the pass does not spread them by
// ClaimSpacing, as a dispatcher passing continuously finds them). Reported:
//
//	µs/job        pass wall time per released job (client round trips included)
//	redis-µs/job  Redis CPU time inside the pass scripts per released job
//	cmds/job      Redis commands per released job (INFO commandstats: the
//	              commands the scripts run, plus the EVALSHA itself)
//	passes/job    pass scripts (EVALSHA calls) per released job
//	claim-redis-µs/job, finish-redis-µs/job  for comparison, the Redis
//	              CPU time of the worker's claim and finish scripts per job
func BenchmarkPass(b *testing.B) {
	for _, tenants := range []int{10, 10_000} {
		b.Run(fmt.Sprintf("tenants=%d", tenants), func(b *testing.B) { benchmarkPass(b, tenants) })
	}
}

func benchmarkPass(b *testing.B, tenants int) {
	e := newEnvShards(b, 1)

	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Concurrency = 100_000, 1, 10 }))
	names := make([]string, tenants)
	for i := range names {
		names[i] = fmt.Sprintf("t%05d", i)
	}
	const depth = 3
	for range depth {
		e.benchEnqueue(names)
	}
	cfg := PassConfig{Lead: 90 * ms, MinLead: 50 * ms, Grace: time.Second, Capacity: -1}
	var passTime time.Duration
	var jobs, passes int
	var stats, claims, finishes commandStats
	b.ResetTimer()
	for range b.N {
		before := e.commandStats()
		start := time.Now()
		var released []wire.Release
		// Until the shard has nothing more due: More, or a pass that
		// released something (the dispatcher passes again at NextWake,
		// which is now while due tenants are left).
		for more := true; more; passes++ {
			res := e.pass(0, cfg)
			released = append(released, res.Released...)
			more = res.More || len(res.Released) > 0
		}
		passTime += time.Since(start)
		b.StopTimer()
		stats.add(e.commandStats().minus(before))
		if len(released) != tenants {
			b.Fatalf("round released %d jobs for %d tenants", len(released), tenants)
		}
		jobs += len(released)
		c, f := e.benchWork(released)
		claims.add(c)
		finishes.add(f)
		e.benchEnqueue(names)
		e.clock.Set(released[0].Slot.Add(90 * ms)) // the next slots are due within L: not spread by ClaimSpacing
		b.StartTimer()
	}
	b.ReportMetric(float64(passTime.Microseconds())/float64(jobs), "µs/job")
	b.ReportMetric(float64(stats.usec)/float64(jobs), "redis-µs/job")
	b.ReportMetric(float64(stats.calls)/float64(jobs), "cmds/job")
	b.ReportMetric(float64(passes)/float64(jobs), "passes/job")
	b.ReportMetric(float64(claims.usec)/float64(jobs), "claim-redis-µs/job")
	b.ReportMetric(float64(finishes.usec)/float64(jobs), "finish-redis-µs/job")
}

// benchEnqueue enqueues one job for every tenant, pipelined.
func (e *env) benchEnqueue(tenants []string) { e.benchEnqueueBody(tenants, `{"bench":1}`) }

// benchEnqueueBody enqueues one webhook job of the given body for every
// tenant, pipelined.
func (e *env) benchEnqueueBody(tenants []string, body string) {
	e.t.Helper()
	e.pipelined(scriptEnqueue, len(tenants), func(i int) (int, []any) {
		shard := e.store.keys.shardOf(tenants[i])
		args, err := e.store.enqueueArgs(tenants[i], shard, []Item{item(body)})
		if err != nil {
			e.t.Fatal(err)
		}
		return shard, enqueueArgv([]*enqueueReq{{args: args}})
	})
}

// benchWork claims every release at its send time and finishes it,
// pipelined; it returns the command totals of the claims and of the
// finishes.
func (e *env) benchWork(rel []wire.Release) (claims, finishes commandStats) {
	e.t.Helper()
	before := e.commandStats()
	e.pipelined(scriptClaim, len(rel), func(i int) (int, []any) {
		e.clock.Set(rel[i].SendAt)
		return 0, claimArgs([]ClaimRequest{{ID: rel[i].ID, Gen: rel[i].Gen}}, 2*ms)
	})
	claimed := e.commandStats()
	cfg := FinishConfig{}.WithDefaults()
	ok := wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200}
	e.pipelined(scriptFinish, len(rel), func(i int) (int, []any) {
		return 0, e.store.finishArgs([]FinishRequest{{ID: rel[i].ID, Gen: rel[i].Gen, Outcome: ok}}, cfg)
	})
	return claimed.minus(before), e.commandStats().minus(claimed)
}

// pipelined runs sc (a library function) n times in pipelines of 500, with the shard and
// ARGV[3…] of call i from args, and fails on any error or refusal. It
// loads the library at its first call only: a FUNCTION LOAD compiles the
// whole library (~5 ms) and leaves the replaced one to Lua's collector,
// whose work would then weigh on the scripts measured.
func (e *env) pipelined(sc *script, n int, args func(i int) (int, []any)) {
	e.t.Helper()
	if !e.loaded {
		if err := e.store.LoadFunctions(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		e.loaded = true
	}
	version, _ := library()
	for from := 0; from < n; from += 500 {
		cmds, err := e.rdb.Pipelined(e.ctx, func(p redis.Pipeliner) error {
			for i := from; i < min(n, from+500); i++ {
				shard, a := args(i)
				p.FCall(e.ctx, qualified(version, sc.name), []string{e.store.keys.ready(shard)}, e.store.argv(shard, a...)...)
			}
			return nil
		})
		if err != nil {
			e.t.Fatalf("%s pipeline: %v", sc.name, err)
		}
		for _, c := range cmds {
			if r, _ := c.(*redis.Cmd).Slice(); len(r) == 0 || r[0] != statusOK {
				e.t.Fatalf("%s: %v", sc.name, r)
			}
		}
	}
}

// commandStats are totals of INFO commandstats, without INFO and CONFIG,
// and the server's CPU time (INFO cpu: user + system, µs; unlike usec, a
// wall time inside Redis, it does not grow when the host is busy and Redis
// waits for a core, but it counts every client's work, INFO's included).
type commandStats struct{ calls, usec, cpu int64 }

func (a commandStats) minus(b commandStats) commandStats {
	return commandStats{a.calls - b.calls, a.usec - b.usec, a.cpu - b.cpu}
}

func (a *commandStats) add(b commandStats) {
	a.calls, a.usec, a.cpu = a.calls+b.calls, a.usec+b.usec, a.cpu+b.cpu
}

// commandStats reads the server's command totals. The usec of FCALL (and
// EVALSHA) includes the commands its function ran; they are counted in
// calls only.
func (e *env) commandStats() commandStats {
	e.t.Helper()
	info, err := e.rdb.Info(context.Background(), "commandstats", "cpu").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	var st commandStats
	for _, line := range strings.Split(info, "\n") {
		if name, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && (name == "used_cpu_user" || name == "used_cpu_sys") {
			f, _ := strconv.ParseFloat(v, 64)
			st.cpu += int64(f * 1e6)
			continue
		}
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || strings.HasPrefix(name, "cmdstat_info") ||
			strings.HasPrefix(name, "cmdstat_config") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch {
			case k == "calls":
				st.calls += n
			case k == "usec" && (name == "cmdstat_evalsha" || name == "cmdstat_fcall"):
				st.usec += n
			}
		}
	}
	return st
}
