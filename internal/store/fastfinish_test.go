package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

// fastFinishEnv seeds a tenant policy with room to spare (concurrency 10,
// burst 10) and enqueues n jobs for acme.
func fastFinishEnv(t *testing.T, n int) (*env, int) {
	t.Helper()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Concurrency = 1000, 10, 10 }))
	e.enqueue("acme", batchOf(n, "a")...)
	return e, e.store.keys.shardOf("acme")
}

// fastPass runs a pre-claiming pass (D = 100ms, grace 1h) on shard with
// capacity (−1: no bound) and fair share λ (0: none), requiring want
// releases.
func (e *env) fastPass(shard, capacity int, fair float64, want int) []wire.Release {
	e.t.Helper()
	rel := e.pass(shard, PassConfig{Lead: 100 * ms, MinLead: -1, Grace: time.Hour, Capacity: capacity, FairShare: fair,
		Preclaim: 2 * ms}).Released
	if len(rel) != want {
		e.t.Fatalf("pass: %d releases, want %d", len(rel), want)
	}
	return rel
}

// requireCounts fails unless acme has running jobs running and queued
// queued, then audits the keyspace.
func (e *env) requireCounts(when string, running, queued int64) {
	e.t.Helper()
	if st := e.state("acme"); st.Running != running || st.Queued != queued {
		e.t.Fatalf("%s: running %d, queued %d; want %d and %d", when, st.Running, st.Queued, running, queued)
	}
	e.requireConsistent()
}

// packedState is acme's field s: what a load and save of the tenant
// rewrites, and a fast finish leaves alone.
func (e *env) packedState(tenant string) string {
	e.t.Helper()
	return e.rdb.HGet(e.ctx, e.store.keys.tenant(tenant), "s").Val()
}

// A plain success of a tenant that keeps a backlog takes a fast finish's
// token (lib.lua T_FIELDS.mint): the tenant's packed state is not rewritten,
// yet every reader sees it as the full finish would have left it — running
// down by one each time, the aggregates and ready set consistent, and the
// held weight dropped with the last running job. The next pass folds the
// tokens taken and releases the rest.
func TestFastFinishLeavesTheTenantUnwritten(t *testing.T) {
	t.Parallel()
	e, shard := fastFinishEnv(t, 6)
	rel := e.fastPass(shard, 3, 0, 3)
	if rel[0].Claimed == nil {
		t.Fatal("pass: the first release is not pre-claimed")
	}
	if w, err := e.store.FairWeights(e.ctx); err != nil || w.Held != 1 {
		t.Fatalf("held weight %+v (%v), want 1", w, err)
	}
	packed := e.packedState("acme")
	for i, r := range rel {
		if st := e.finish(r.ID, r.Gen, succeeded, FinishConfig{}); st != StateSucceeded {
			t.Fatalf("finish %d: %s, want succeeded", i, st)
		}
		if e.packedState("acme") != packed {
			t.Fatalf("finish %d rewrote the tenant's state: not a fast finish", i)
		}
		e.requireCounts(fmt.Sprintf("after finish %d", i), int64(len(rel)-1-i), 3)
	}
	if w, err := e.store.FairWeights(e.ctx); err != nil || w.Held != 0 {
		t.Fatalf("held weight after the last finish %+v (%v), want 0", w, err)
	}
	e.fastPass(shard, -1, 0, 3)
	e.requireCounts("after the next pass", 3, 0)
}

// With no backlog left the tokens stop one short of running: the last
// finish is a full one (the tenant goes idle: its held weight, its expiry),
// and it counts its own running − 1 once, through the token it found
// missing.
func TestFastFinishLastJobIsAFullFinish(t *testing.T) {
	t.Parallel()
	e, shard := fastFinishEnv(t, 2)
	rel := e.fastPass(shard, -1, 0, 2)
	packed := e.packedState("acme")
	e.finish(rel[0].ID, rel[0].Gen, succeeded, FinishConfig{})
	if e.packedState("acme") != packed {
		t.Fatal("first finish rewrote the tenant's state: want a fast finish (one other job still running)")
	}
	e.finish(rel[1].ID, rel[1].Gen, succeeded, FinishConfig{})
	if e.packedState("acme") == packed {
		t.Fatal("last finish left the tenant's state: want a full finish")
	}
	e.requireCounts("after both", 0, 0)
	if ttl := e.rdb.PTTL(e.ctx, e.store.keys.tenant("acme")).Val(); ttl <= 0 {
		t.Fatalf("idle tenant's hash TTL %s, want one (it expires)", ttl)
	}
	if w, err := e.store.FairWeights(e.ctx); err != nil || w.Held != 0 {
		t.Fatalf("held weight %+v (%v), want 0", w, err)
	}
	e.requireConsistent()
}

// A tenant the pass held at its fair share is out of ready; the fast
// finish of its one running job puts it back (at the score a full finish's
// reschedule gives it) without loading it, and the next pass releases it up
// to its share again.
func TestFastFinishPutsAFairHeldTenantBack(t *testing.T) {
	t.Parallel()
	e, shard := fastFinishEnv(t, 10)
	inReady := func() bool { return e.rdb.ZScore(e.ctx, e.store.keys.ready(shard), "acme").Err() == nil }
	rel := e.fastPass(shard, -1, 1.5, 1) // share ⌊1 × 1.5⌋ = 1
	if inReady() {
		t.Fatal("pass at share 1: in ready, want out of it")
	}
	packed := e.packedState("acme")
	if st := e.finish(rel[0].ID, rel[0].Gen, succeeded, FinishConfig{}); st != StateSucceeded || !inReady() {
		t.Fatalf("after a finish: %s, in ready %v; want succeeded and back in ready", st, inReady())
	}
	if e.packedState("acme") != packed {
		t.Fatal("the finish rewrote the tenant's state: not a fast finish")
	}
	if score := e.rdb.ZScore(e.ctx, e.store.keys.ready(shard), "acme").Val(); int64(score) > e.clock.Now().UnixMicro() {
		t.Fatalf("ready score %d µs, want due (≤ now %d)", int64(score), e.clock.Now().UnixMicro())
	}
	if w, err := e.store.FairWeights(e.ctx); err != nil || w.Held != 0 {
		t.Fatalf("held weight %+v (%v), want 0 (no job running)", w, err)
	}
	e.requireCounts("after the finish", 0, 9)
	e.fastPass(shard, -1, 1.5, 1) // back to its share of 1
	e.requireCounts("after the next pass", 1, 8)
}

// Any outcome but a plain success takes the full finish, and a tenant read
// in the same call again folds what the call's fast finishes took.
func TestFastFinishThenFullFinishInOneCall(t *testing.T) {
	t.Parallel()
	e, shard := fastFinishEnv(t, 6)
	rel := e.fastPass(shard, 3, 0, 3)
	retry := wire.AttemptOutcome{Kind: wire.FinishRetry, Status: 500}
	reqs := []FinishRequest{
		{ID: rel[0].ID, Gen: rel[0].Gen, Outcome: succeeded},
		{ID: rel[1].ID, Gen: rel[1].Gen, Outcome: retry},
		{ID: rel[2].ID, Gen: rel[2].Gen, Outcome: succeeded},
	}
	res, err := e.store.FinishBatch(e.ctx, shard, reqs, FinishConfig{})
	if err != nil || len(res) != 3 || res[0].State != StateSucceeded || res[1].State != StateRetrying || res[2].State != StateSucceeded {
		t.Fatalf("finish batch: %+v (%v), want succeeded, retrying, succeeded", res, err)
	}
	e.requireCounts("after the call", 0, 3)
}
