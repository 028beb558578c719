package store

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/upstream"
	"github.com/sluicehq/sluice/internal/wire"
)

// A job naming upstreams waits in its tenant's lane for that set (record
// field ups: sorted, ','), counted in qtok and uq, the c1 fast path off; a
// plain job of the same tenant goes to the backlog.
func TestEnqueueUpstreamsGoToTheirLane(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.Burst = 4 }))
	up := e.enqueueOne("acme", Item{Type: "webhook", Body: []byte(`{}`), Cost: 2, Upstreams: []string{"sms-b", "sms-a"}})
	plain := e.enqueueOne("acme", item(`{}`))
	k := e.store.keys
	if got := e.rdb.HGet(e.ctx, mustJobKey(t, e, up.ID), "ups").Val(); got != "sms-a,sms-b" {
		t.Fatalf("record ups %q, want sms-a,sms-b", got)
	}
	if got := e.rdb.ZRange(e.ctx, k.lane("acme", "sms-a,sms-b"), 0, -1).Val(); len(got) != 1 || got[0] != up.ID {
		t.Fatalf("lane %v, want [%s]", got, up.ID)
	}
	if got := e.rdb.LRange(e.ctx, k.tenantQueue("acme"), 0, -1).Val(); len(got) != 1 || got[0] != plain.ID {
		t.Fatalf("backlog %v, want [%s]", got, plain.ID)
	}
	if got := e.rdb.SMembers(e.ctx, k.lanes("acme")).Val(); len(got) != 1 || got[0] != "sms-a,sms-b" {
		t.Fatalf("lane set %v", got)
	}
	for _, n := range []string{"sms-a", "sms-b"} {
		if e.rdb.ZScore(e.ctx, k.upstreamWaiting(k.shardOf("acme"), n), "acme").Err() != nil {
			t.Fatalf("acme not in the waiting set of %s", n)
		}
	}
	if q, uq, c1 := e.tenantField("acme", "qtok"), e.tenantField("acme", "uq"), e.tenantField("acme", "c1"); q != 3 || uq != 1 || c1 != 0 {
		t.Fatalf("qtok %d uq %d c1 %d, want 3 1 0", q, uq, c1)
	}
	if st := e.state("acme"); st.Queued != 2 {
		t.Fatalf("queued %d, want 2", st.Queued)
	}
}

// Bad upstream names are refused before anything is written.
func TestEnqueueUpstreamsInvalid(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, ups := range [][]string{
		{"a", "b", "c", "d", "e"}, // more than 4
		{"a", "a"},                // twice
		{"a:b"},                   // not a valid name
		{""},
		{string(make([]byte, 65))},
	} {
		_, err := e.store.Enqueue(e.ctx, "acme", []Item{upItem(`{}`, ups...)})
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("upstreams %q: err %v, want ErrInvalid", ups, err)
		}
	}
	if n := e.rdb.Exists(e.ctx, e.store.keys.tenant("acme")).Val(); n != 0 {
		t.Fatal("a refused enqueue wrote the tenant")
	}
}

// Canceling a lane job takes it out of its lane and the counts.
func TestCancelLaneJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.enqueueOne("acme", upItem(`{}`, "sms"))
	if _, _, err := e.store.Cancel(e.ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	if n := e.rdb.ZCard(e.ctx, e.store.keys.lane("acme", "sms")).Val(); n != 0 {
		t.Fatalf("lane holds %d jobs after the cancel", n)
	}
	if q, uq := e.tenantField("acme", "qtok"), e.tenantField("acme", "uq"); q != 0 || uq != 0 {
		t.Fatalf("qtok %d uq %d, want 0 0", q, uq)
	}
}

// A lane job leaves only within a segment its shard was granted: the first
// pass reports demand (the tenant's plain job leaves meanwhile), the
// coordinator grants a segment at now, the next pass releases the job in it.
func TestLaneJobWaitsForAGrant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst = 1000, 4 })) // the tenant: 1000/s
	e.putUpstream("sms", 50*time.Millisecond, 1)
	shard := e.store.keys.shardOf("acme")
	up := e.enqueueOne("acme", upItem(`{}`, "sms"))
	plain := e.enqueueOne("acme", item(`{}`))
	res, grants := e.upPass(shard, nil)
	if len(res.Released) != 1 || res.Released[0].ID != plain.ID {
		t.Fatalf("first pass released %+v, want only the plain job", res.Released)
	}
	if len(res.Demand) != 1 || res.Demand[0] != (quota.UpstreamDemand{Upstream: "sms", Wanted: 1, Weight: 1, Unit: 1}) {
		t.Fatalf("demand %+v", res.Demand)
	}
	now := e.clock.Now()
	if len(grants) != 1 || len(grants[0].Segments) != 1 {
		t.Fatalf("grants %+v, want one segment", grants)
	}
	g := grants[0]
	if !g.Segments[0].T0.Equal(now) || g.Interval != 50*time.Millisecond || g.Burst != 1 {
		t.Fatalf("grant %+v, want a segment from now (%v), 50ms, burst 1", g, now)
	}
	// Asking again before the next round gives nothing more and no demand.
	res, _ = e.upPass(shard, nil)
	if len(res.Released) != 0 || len(res.Demand) != 0 {
		t.Fatalf("a pass without the grant released %+v, demand %+v", res.Released, res.Demand)
	}
	res, _ = e.upPass(shard, grants)
	if len(res.Released) != 1 || res.Released[0].ID != up.ID {
		t.Fatalf("the granted pass released %+v, want the lane job", res.Released)
	}
	if s := res.Released[0].Slot; s.Before(g.Segments[0].T0) || s.After(now.Add(grantLead)) {
		t.Fatalf("slot %v outside [%v, now + D]", s, g.Segments[0].T0)
	}
	if q, uq := e.tenantField("acme", "qtok"), e.tenantField("acme", "uq"); q != 0 || uq != 0 {
		t.Fatalf("qtok %d uq %d after the release, want 0 0", q, uq)
	}
}

// An unknown upstream is quota.ErrUpstreamNotFound and grants nothing.
func TestGrantUnknownUpstream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	gs, err := e.store.GrantUpstreams(e.ctx, 0, []quota.UpstreamDemand{{Upstream: "nope", Wanted: 3, Weight: 1, Unit: 1}},
		quota.GrantConfig{Horizon: grantLead})
	if !errors.Is(err, quota.ErrUpstreamNotFound) || len(gs) != 0 {
		t.Fatalf("grants %+v, err %v; want quota.ErrUpstreamNotFound", gs, err)
	}
}

func mustJobKey(t *testing.T, e *env, id string) string {
	t.Helper()
	k, err := e.store.keys.job(id)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// A throttle with UpstreamScope returns the job to the front of its lane
// without using an attempt and leaves the tenant unpaused; without it the
// tenant pauses, as before.
func TestFinishUpstreamScope(t *testing.T) {
	t.Parallel()
	for _, scope := range []bool{true, false} {
		t.Run(fmt.Sprintf("scope=%v", scope), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.seed(params(func(p *Params) { p.RateUS, p.Burst = 1000, 4 }))
			e.putUpstream("sms", 50*time.Millisecond, 2)
			shard := e.store.keys.shardOf("acme")
			first := e.enqueueOne("acme", upItem(`{"n":1}`, "sms"))
			e.enqueueOne("acme", upItem(`{"n":2}`, "sms"))
			_, grants := e.upPass(shard, nil)
			res, _ := e.upPass(shard, grants)
			if len(res.Released) == 0 || res.Released[0].ID != first.ID {
				t.Fatalf("released %+v, want the first lane job first", res.Released)
			}
			r := res.Released[0]
			job := e.claimAt(r)
			if len(job.Upstreams) != 1 || job.Upstreams[0] != "sms" {
				t.Fatalf("claimed job's upstreams %v, want [sms]", job.Upstreams)
			}
			st := e.finish(r.ID, r.Gen, wire.AttemptOutcome{Kind: wire.FinishThrottled, Status: 429},
				FinishConfig{UpstreamScope: scope})
			if st != StateQueued {
				t.Fatalf("state %s after the throttle, want queued", st)
			}
			if j := e.job(r.ID); j.Attempt != 0 {
				t.Fatalf("attempts used %d, want 0", j.Attempt)
			}
			if head := e.rdb.ZRange(e.ctx, e.store.keys.lane("acme", "sms"), 0, 0).Val(); len(head) != 1 || head[0] != r.ID {
				t.Fatalf("lane head %v, want the throttled job %s", head, r.ID)
			}
			paused := !e.state("acme").PausedUntil.IsZero()
			if paused == scope {
				t.Fatalf("tenant paused %v with upstream scope %v", paused, scope)
			}
		})
	}
}

// quota.UpstreamRuntime shows the calendar's end, the tokens left now, and the
// jobs waiting on the upstream by tenant across shards.
func TestUpstreamRuntime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst = 1000, 4 }))
	e.putUpstream("sms", 50*time.Millisecond, 2)
	tenants := distinctShards(e, 2)
	for range 3 {
		e.enqueueOne(tenants[0], upItem(`{}`, "sms"))
	}
	for range 2 {
		e.enqueueOne(tenants[1], upItem(`{}`, "sms", "other"))
	}
	e.enqueueOne(tenants[1], item(`{}`)) // plain: not waiting on it
	rt, err := e.store.UpstreamRuntime(e.ctx, "sms")
	if err != nil {
		t.Fatal(err)
	}
	if rt.Tokens != 2 || !rt.TAT.IsZero() || rt.EffectiveIntervalUS != 50_000 || rt.Truncated {
		t.Fatalf("idle runtime %+v, want 2 tokens, no TAT, 50ms", rt)
	}
	if len(rt.WaitingByTenant) != 2 || rt.WaitingByTenant[tenants[0]] != 3 || rt.WaitingByTenant[tenants[1]] != 2 {
		t.Fatalf("waiting %v, want %s: 3, %s: 2", rt.WaitingByTenant, tenants[0], tenants[1])
	}
	// A round hands out H = 100ms of the calendar (2 units): no token left now.
	shard := e.store.keys.shardOf(tenants[0])
	_, grants := e.upPass(shard, nil)
	res, _ := e.upPass(shard, grants)
	if len(res.Released) != 2 {
		t.Fatalf("released %d jobs of the 2-unit segment, want 2", len(res.Released))
	}
	rt, err = e.store.UpstreamRuntime(e.ctx, "sms")
	if err != nil {
		t.Fatal(err)
	}
	if want := e.clock.Now().Add(grantLead); !rt.TAT.Equal(want) || rt.Tokens != 0 {
		t.Fatalf("runtime %+v, want TAT %v and 0 tokens", rt, want)
	}
	if rt.WaitingByTenant[tenants[0]] != 1 {
		t.Fatalf("waiting %v, want %s: 1 after two releases", rt.WaitingByTenant, tenants[0])
	}
	if _, err := e.store.UpstreamRuntime(e.ctx, "nope"); !errors.Is(err, quota.ErrUpstreamNotFound) {
		t.Fatalf("unknown upstream: %v, want quota.ErrUpstreamNotFound", err)
	}
}

// An adaptive upstream halves its rate on a congestion signal (once per
// episode: a signal from an attempt slotted before the episode's end does
// not cut again), recovers by the step on a success, and its coordinator
// spaces new segments by the effective interval; a non-adaptive one never
// changes.
func TestUpstreamAdaptive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putUpstream("fixed", 10*time.Millisecond, 1)
	e.putUpstream("ai", 10*time.Millisecond, 1, func(c *upstream.Config) { c.Adaptive = true })
	cfg := FinishConfig{AdaptiveFloorPPM: 100_000, AdaptiveStepPPM: 100_000}.Adapt()
	now := e.clock.Now()
	step := func(name string, congested bool, slot time.Time, wantF int64, wantIV time.Duration) {
		t.Helper()
		f, iv, err := e.store.UpstreamOutcome(e.ctx, name, congested, slot, cfg)
		if err != nil || f != wantF || iv != wantIV {
			t.Fatalf("%s congested=%v: factor %d, interval %v, err %v; want %d, %v", name, congested, f, iv, err, wantF, wantIV)
		}
	}
	step("fixed", true, now, RateFactorFull, 10*time.Millisecond)
	// A grant moves the calendar to now + H: the cut's episode runs until then.
	if _, err := e.store.GrantUpstreams(e.ctx, 0, []quota.UpstreamDemand{{Upstream: "ai", Wanted: 100, Weight: 1, Unit: 1}},
		quota.GrantConfig{Horizon: grantLead}); err != nil {
		t.Fatal(err)
	}
	step("ai", true, now, 500_000, 20*time.Millisecond)
	step("ai", true, now, 500_000, 20*time.Millisecond) // same episode: no second cut
	later := now.Add(grantLead)
	step("ai", true, later, 250_000, 40*time.Millisecond)
	e.clock.Advance(time.Second)
	gs, err := e.store.GrantUpstreams(e.ctx, 0, []quota.UpstreamDemand{{Upstream: "ai", Wanted: 100, Weight: 1, Unit: 1}},
		quota.GrantConfig{Horizon: grantLead})
	if err != nil || len(gs) != 1 || gs[0].Interval != 40*time.Millisecond {
		t.Fatalf("grant %+v, err %v: want the effective interval 40ms", gs, err)
	}
	if seg := gs[0].Segments; len(seg) != 1 || seg[0].Ceil.Sub(seg[0].T0) != 3*40*time.Millisecond {
		t.Fatalf("segments %+v, want 3 units of 40ms (⌈100ms / 40ms⌉)", seg)
	}
	step("ai", false, e.clock.Now().Add(time.Hour), 350_000, 28572*time.Microsecond) // ⌈10ms·10⁶/350000⌉
	rt, err := e.store.UpstreamRuntime(e.ctx, "ai")
	if err != nil || rt.EffectiveIntervalUS != 28572 {
		t.Fatalf("runtime %+v, err %v: want the effective interval 28572µs", rt, err)
	}
}

// A grant without an answer (Interval 0: the upstream is not configured, or
// its coordinator failed) only moves the shard's next ask: no demand until
// then, and what the shard knew of the upstream stays.
func TestUnansweredGrantDefersTheNextAsk(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueueOne("acme", upItem(`{}`, "gone"))
	shard := e.store.keys.shardOf("acme")
	res, _ := e.store.PassGranted(e.ctx, shard, PassConfig{Lead: grantLead, MinLead: -1, Capacity: -1}, nil)
	if len(res.Demand) != 1 {
		t.Fatalf("demand %+v, want the unknown upstream", res.Demand)
	}
	if _, err := e.store.GrantUpstreams(e.ctx, shard, res.Demand, quota.GrantConfig{Horizon: grantLead}); !errors.Is(err, quota.ErrUpstreamNotFound) {
		t.Fatalf("grant: %v, want quota.ErrUpstreamNotFound", err)
	}
	next := e.clock.Now().Add(2 * time.Second)
	cfg := PassConfig{Lead: grantLead, MinLead: -1, Capacity: -1}
	res, err := e.store.PassGranted(e.ctx, shard, cfg, []quota.UpstreamGrant{{Upstream: "gone", Burst: 1, NextGrant: next}})
	if err != nil || len(res.Demand) != 0 || len(res.Released) != 0 {
		t.Fatalf("pass with the unanswered grant: %+v, %v; want nothing", res, err)
	}
	// The tenant's ready score is the next ask + H, so the shard wakes at it.
	if !res.NextWake.Equal(next) {
		t.Fatalf("next wake %v, want the next ask %v", res.NextWake, next)
	}
	e.clock.Set(next)
	if res = e.pass(shard, cfg); len(res.Demand) != 1 {
		t.Fatalf("demand %+v at the next ask, want the upstream again", res.Demand)
	}
}

// A paused upstream grants nothing before its pause ends; a manual pause
// (until resumed) is asked about again within a second, so a resume is
// learnt at once, and then grants start from now.
func TestPausedUpstreamGrantsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putUpstream("sms", 50*time.Millisecond, 1)
	ask := func() quota.UpstreamGrant {
		t.Helper()
		gs, err := e.store.GrantUpstreams(e.ctx, 0, []quota.UpstreamDemand{{Upstream: "sms", Wanted: 10, Weight: 1, Unit: 1}},
			quota.GrantConfig{Horizon: grantLead})
		if err != nil || len(gs) != 1 {
			t.Fatalf("grant %+v, %v", gs, err)
		}
		return gs[0]
	}
	if err := e.store.PauseUpstream(e.ctx, "sms", e.clock.Now().Add(time.Minute), "throttled"); err != nil {
		t.Fatal(err)
	}
	if g := ask(); len(g.Segments) != 0 || !g.NextGrant.Equal(e.clock.Now().Add(time.Second)) {
		t.Fatalf("paused a minute: %+v, want no segment and the next ask in 1s", g)
	}
	if err := e.store.PauseUpstream(e.ctx, "sms", time.Time{}, "manual"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	if g := ask(); len(g.Segments) != 0 || !g.NextGrant.Equal(e.clock.Now().Add(time.Second)) {
		t.Fatalf("paused until resumed: %+v, want no segment and the next ask in 1s", g)
	}
	if err := e.store.ResumeUpstream(e.ctx, "sms"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	if g := ask(); len(g.Segments) != 1 || !g.Segments[0].T0.Equal(e.clock.Now()) {
		t.Fatalf("resumed: %+v, want a segment from now", g)
	}
}
