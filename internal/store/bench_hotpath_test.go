package store

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

// BenchmarkHotPathCost measures what one delivered job costs Redis on the
// store's hot path: a pass releases one job of each of 64 backlogged tenants
// (T = 100ms, burst 1, one shard), workers claim each at its send time and
// finish it with a success, and one new job per tenant keeps the backlogs
// at their depth (untimed, not counted). The clock is fake; time moves on
// to 90ms after the round's first slot between rounds, as BenchmarkPass.
//
// The calls run through the Store's API (one FCALL per call) in four
// modes: single (Claim and Finish per job), batch (ClaimBatch and
// FinishBatch with the round's jobs), coalesced (a Coalescer under 64
// concurrent callers), preclaimed (the pass's pre-claim on, ε = 2ms, and
// time moved on to 100ms after the round's first slot, so every job is due
// at its release, as in a backlog: the pass claims them and the claim phase
// has nothing left — a job it left would be claimed coalesced; finishes
// coalesced) and contended (preclaimed with the pool contended: fair share
// λ = 1.5, so each tenant holds one job and leaves ready until its finish,
// as in bench-dispatch's throughput part). Reported per delivered job, from INFO commandstats
// deltas (server-wide: run it alone, -run '^$' -bench HotPathCost):
//
//	cmds/job            every Redis command of pass + claim + finish (the
//	                    FCALLs and the commands inside them)
//	redis-µs/job        Redis time inside the FCALLs (commandstats usec: a
//	                    wall time, inflated when the host is busy)
//	redis-cpu-µs/job    the Redis server's CPU time (INFO cpu) over the
//	                    three phases: steadier on a busy host
//	pass-, claim-, finish-cmds/job and -redis-µs/job: the same per script
//	preclaimed/job      the share of jobs the pass claimed
//
// Under scripts/hotpath-instructions -split, SLUICE_CALLGRIND_PID names the
// redis-server that callgrind runs: after each phase of a timed round the
// benchmark has callgrind dump its counts, named for the phase (pass,
// claim, finish; the untimed enqueues: other), which the script sums per
// script.
func BenchmarkHotPathCost(b *testing.B) {
	for _, mode := range []string{"single", "batch", "coalesced", "preclaimed", "contended"} {
		b.Run("mode="+mode, func(b *testing.B) { benchmarkHotPath(b, mode) })
	}
}

func benchmarkHotPath(b *testing.B, mode string) {
	const tenants, depth = 64, 3
	e := newEnvShards(b, 1)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Concurrency = 100_000, 1, 10 }))
	names := make([]string, tenants)
	for i := range names {
		names[i] = fmt.Sprintf("t%03d", i)
	}
	for range depth {
		e.benchEnqueue(names)
	}
	if err := e.store.LoadFunctions(e.ctx); err != nil {
		b.Fatal(err)
	}
	cfg := PassConfig{Lead: 90 * ms, MinLead: 50 * ms, Grace: time.Second, Capacity: -1}
	step := 90 * ms // between rounds: each tenant's next slot 10ms ahead
	if mode == "preclaimed" || mode == "contended" {
		cfg.Preclaim, step = 2*ms, 100*ms // each next slot due
	}
	if mode == "contended" {
		cfg.FairShare = 1.5 // each tenant held at its share of 1, as in a contended pool
	}
	var pass, claims, finishes commandStats
	jobs, preclaimed := 0, 0
	b.ResetTimer()
	for range b.N {
		before := e.commandStats()
		callgrindDump(b, "other")
		res := e.pass(0, cfg)
		callgrindDump(b, "pass")
		passed := e.commandStats()
		pass.add(passed.minus(before))
		if len(res.Released) != tenants {
			b.Fatalf("round released %d jobs for %d tenants", len(res.Released), tenants)
		}
		e.clock.Set(res.Released[len(res.Released)-1].SendAt)
		var toClaim []wire.Release
		for _, r := range res.Released {
			if r.Claimed == nil {
				toClaim = append(toClaim, r)
			}
		}
		preclaimed += len(res.Released) - len(toClaim)
		e.hotClaims(mode, toClaim)
		callgrindDump(b, "claim")
		claimed := e.commandStats()
		claims.add(claimed.minus(passed))
		e.hotFinishes(mode, res.Released)
		callgrindDump(b, "finish")
		finishes.add(e.commandStats().minus(claimed))
		jobs += len(res.Released)
		b.StopTimer()
		e.benchEnqueue(names)
		e.clock.Set(res.Released[0].Slot.Add(step))
		b.StartTimer()
	}
	n := float64(jobs)
	total := pass
	total.add(claims)
	total.add(finishes)
	b.ReportMetric(float64(total.calls)/n, "cmds/job")
	b.ReportMetric(float64(total.usec)/n, "redis-µs/job")
	b.ReportMetric(float64(total.cpu)/n, "redis-cpu-µs/job")
	b.ReportMetric(float64(preclaimed)/n, "preclaimed/job")
	for _, s := range []struct {
		name string
		st   commandStats
	}{{"pass", pass}, {"claim", claims}, {"finish", finishes}} {
		b.ReportMetric(float64(s.st.calls)/n, s.name+"-cmds/job")
		b.ReportMetric(float64(s.st.usec)/n, s.name+"-redis-µs/job")
	}
}

// callgrindDump has callgrind dump the counts of the redis-server named by
// SLUICE_CALLGRIND_PID (scripts/hotpath-instructions -split), the dump
// named phase; without it, nothing.
func callgrindDump(b *testing.B, phase string) {
	b.Helper()
	pid := os.Getenv("SLUICE_CALLGRIND_PID")
	if pid == "" {
		return
	}
	if out, err := exec.Command("callgrind_control", "-d", phase, pid).CombinedOutput(); err != nil {
		b.Fatalf("callgrind_control -d %s %s: %v: %s", phase, pid, err, out)
	}
}

// benchOK is the success outcome the benchmarks finish with.
var benchOK = wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200, Latency: 20 * ms}

// hotClaims claims every release (the clock at or past its send time) in
// mode, requiring each claimed.
func (e *env) hotClaims(mode string, rel []wire.Release) {
	e.t.Helper()
	switch mode {
	case "single":
		for _, r := range rel {
			if c := e.claim(r.ID, r.Gen); c.Outcome != ClaimOK {
				e.t.Fatalf("claim %s: %+v", r.ID, c)
			}
		}
	case "batch":
		for i, c := range e.claimBatch(0, claimReqs(rel...)...) {
			if c.Outcome != ClaimOK {
				e.t.Fatalf("claim %s: %+v", rel[i].ID, c)
			}
		}
	case "coalesced", "preclaimed", "contended":
		c := NewCoalescer(e.store, 0)
		e.concurrently(rel, func(r wire.Release) error {
			cl, err := c.Claim(e.ctx, r.ID, r.Gen, 2*ms)
			if err == nil && cl.Outcome != ClaimOK {
				err = fmt.Errorf("claim %s: %+v", r.ID, cl)
			}
			return err
		})
	default:
		e.t.Fatalf("mode %q", mode)
	}
}

// concurrently runs f for every release, each in its own goroutine.
func (e *env) concurrently(rel []wire.Release, f func(wire.Release) error) {
	e.t.Helper()
	errs := make([]error, len(rel))
	var wg sync.WaitGroup
	for i, r := range rel {
		wg.Go(func() { errs[i] = f(r) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		e.t.Fatal(err)
	}
}

// hotFinishes finishes every claimed release with a success in mode.
func (e *env) hotFinishes(mode string, rel []wire.Release) {
	e.t.Helper()
	switch mode {
	case "single":
		for _, r := range rel {
			if st := e.finish(r.ID, r.Gen, benchOK, FinishConfig{}); st != StateSucceeded {
				e.t.Fatalf("finish %s: %s", r.ID, st)
			}
		}
	case "batch":
		reqs := make([]FinishRequest, len(rel))
		for i, r := range rel {
			reqs[i] = FinishRequest{ID: r.ID, Gen: r.Gen, Outcome: benchOK}
		}
		rs, err := e.store.FinishBatch(e.ctx, 0, reqs, FinishConfig{})
		if err != nil {
			e.t.Fatal(err)
		}
		for i, r := range rs {
			if r != (FinishResult{State: StateSucceeded}) {
				e.t.Fatalf("finish %s: %+v", rel[i].ID, r)
			}
		}
	case "coalesced", "preclaimed", "contended":
		c := NewCoalescer(e.store, 0)
		e.concurrently(rel, func(r wire.Release) error {
			st, err := c.Finish(e.ctx, r.ID, r.Gen, benchOK, FinishConfig{})
			if err == nil && st != StateSucceeded {
				err = fmt.Errorf("finish %s: %s", r.ID, st)
			}
			return err
		})
	default:
		e.t.Fatalf("mode %q", mode)
	}
}
