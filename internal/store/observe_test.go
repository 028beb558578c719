package store

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

// truth is Observe's answer computed the slow way: from a walk of every
// tenant (Store.Tenants), the figures the aggregates must equal.
func (e *env) truth(top int) Observation {
	e.t.Helper()
	all, err := e.store.Tenants(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var o Observation
	for _, s := range all {
		o.Backlog += s.Backlog
		o.Running += s.Running
		o.DeadLetters += s.DeadLetters
		if s.AdminPaused || s.AdminUntil.After(s.Now) {
			o.AdminPaused++
		}
		if s.PausedUntil.After(s.Now) {
			o.UpstreamPaused++
		}
		if s.Disabled {
			o.Disabled++
		} else if s.Paused() {
			o.Paused++
		}
		o.Top = append(o.Top, TenantBacklog{Tenant: s.Tenant, Backlog: s.Backlog})
	}
	slices.SortFunc(o.Top, func(a, b TenantBacklog) int {
		return cmp.Or(cmp.Compare(b.Backlog, a.Backlog), cmp.Compare(a.Tenant, b.Tenant))
	})
	o.Top = o.Top[:min(len(o.Top), top)]
	return o
}

// observeMatches requires Observe's figures equal to the walk's after step.
func (e *env) observeMatches(step string) Observation {
	e.t.Helper()
	const top = 3
	got, err := e.store.Observe(e.ctx, ObserveOptions{Top: top, Attention: 10, Clean: true})
	if err != nil {
		e.t.Fatalf("%s: observe: %v", step, err)
	}
	want := e.truth(top)
	type counts struct{ Backlog, Running, Dead, Admin, Upstream, Disabled, Paused int64 }
	g := counts{got.Backlog, got.Running, got.DeadLetters, got.AdminPaused, got.UpstreamPaused, got.Disabled, got.Paused}
	w := counts{want.Backlog, want.Running, want.DeadLetters, want.AdminPaused, want.UpstreamPaused, want.Disabled, want.Paused}
	if g != w {
		e.t.Fatalf("%s: aggregates %+v, the tenants' walk %+v", step, g, w)
	}
	if !slices.Equal(got.Top, want.Top) {
		e.t.Fatalf("%s: top %v, the walk's %v", step, got.Top, want.Top)
	}
	if int64(len(got.DisabledTenants)) != got.Disabled || int64(len(got.PausedTenants)) != got.Paused {
		e.t.Fatalf("%s: named %d disabled, %d paused; counted %d, %d", step, len(got.DisabledTenants), len(got.PausedTenants), got.Disabled, got.Paused)
	}
	return got
}

// Every transition keeps the aggregates equal to the tenants' own figures:
// enqueue, release, claim, success, retry, dead letter, throttle (upstream
// pause), gone (disable), cancel, admin pause (timed and not), its end by
// time, resume, replay, replay of every letter, and the dead set's trim.
func TestObserveStaysExactThroughEveryTransition(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 2)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.MaxAttempts = 1000, 100, 2 }))
	fin := FinishConfig{DeadMaxPerTenant: 2}
	for i, tn := range []string{"acme", "bolt", "crow", "dune"} {
		for range i + 1 {
			e.enqueueOne(tn, item(`{"n":1}`))
		}
	}
	e.observeMatches("enqueue")
	var rel []wire.Release
	for _, tn := range []string{"acme", "bolt", "crow", "dune"} {
		rel = append(rel, e.passTenant(tn, time.Second, -1)...)
	}
	e.observeMatches("release")
	claimed := map[string]ClaimedJob{}
	for _, r := range rel {
		c := e.claim(r.ID, r.Gen)
		if c.Outcome != ClaimOK {
			t.Fatalf("claim %s: %+v", r.ID, c)
		}
		claimed[r.ID] = c.Job
	}
	e.observeMatches("claim")
	outcome := func(k wire.FinishKind) wire.AttemptOutcome {
		return wire.AttemptOutcome{Kind: k, Status: 500, Latency: ms}
	}
	steps := []wire.FinishKind{wire.FinishSuccess, wire.FinishRetry, wire.FinishPermanent, wire.FinishThrottled,
		wire.FinishGone, wire.FinishPermanent, wire.FinishPermanent, wire.FinishSuccess, wire.FinishRetry, wire.FinishSuccess}
	for i, r := range rel {
		k := steps[i%len(steps)]
		e.finish(r.ID, claimed[r.ID].Gen, outcome(k), fin)
		e.observeMatches(fmt.Sprintf("finish %d (%s)", i, k))
	}
	// A job canceled while queued.
	id := e.enqueueOne("acme", item(`{"n":2}`)).ID
	e.observeMatches("enqueue again")
	if _, _, err := e.store.Cancel(e.ctx, id); err != nil {
		t.Fatal(err)
	}
	e.observeMatches("cancel")
	if err := e.store.Pause(e.ctx, "acme", time.Time{}); err != nil {
		t.Fatal(err)
	}
	e.observeMatches("pause")
	if err := e.store.Pause(e.ctx, "bolt", e.clock.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	o := e.observeMatches("timed pause")
	if o.AdminPaused != 2 {
		t.Fatalf("admin-paused %d, want 2", o.AdminPaused)
	}
	e.clock.Advance(2 * time.Minute) // the timed pause and the upstream pause end by time alone
	e.observeMatches("pauses over")
	for _, tn := range []string{"acme", "bolt", "crow", "dune"} {
		if err := e.store.Resume(e.ctx, tn); err != nil {
			t.Fatal(err)
		}
	}
	o = e.observeMatches("resume")
	if o.AdminPaused+o.Disabled+o.Paused != 0 {
		t.Fatalf("after resume: %+v", o)
	}
	dead, _, err := e.store.DeadLetters(e.ctx, "dune", "", 10)
	if err != nil || len(dead) == 0 {
		t.Fatalf("dune's dead letters: %+v, %v", dead, err)
	}
	if _, err := e.store.Replay(e.ctx, dead[0].ID); err != nil {
		t.Fatal(err)
	}
	e.observeMatches("replay")
	for _, tn := range []string{"acme", "bolt", "crow", "dune"} {
		if _, _, err := e.store.ReplayDead(e.ctx, tn, DeadReplay{Limit: 100}); err != nil {
			t.Fatal(err)
		}
	}
	o = e.observeMatches("replay every letter")
	if o.DeadLetters != 0 || o.Backlog == 0 {
		t.Fatalf("after replaying every letter: %+v", o)
	}
}

// The dead count drops a tenant's letters when its dead set expires by its
// TTL (no script runs then): Observe takes them out.
func TestObserveForgetsExpiredDeadSets(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	e.seed(params(func(p *Params) { p.MaxAttempts = 1 }))
	id := e.enqueueOne("acme", item(`{"n":1}`)).ID
	r := e.passTenant("acme", time.Second, -1)[0]
	c := e.claimAt(r)
	e.finish(id, c.Gen, wire.AttemptOutcome{Kind: wire.FinishPermanent, Status: 400}, FinishConfig{DeadRetention: time.Hour})
	if o := e.observeMatches("dead"); o.DeadLetters != 1 {
		t.Fatalf("dead letters %d, want 1", o.DeadLetters)
	}
	if err := e.rdb.Del(e.ctx, e.store.keys.tenantDead("acme")).Err(); err != nil { // as its TTL would
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Hour)
	if o := e.observeMatches("expired"); o.DeadLetters != 0 {
		t.Fatalf("dead letters %d after the set expired, want 0", o.DeadLetters)
	}
	if n, _ := e.rdb.HLen(e.ctx, e.store.keys.agg(0, "dead:n")).Result(); n != 0 {
		t.Fatalf("dead:n keeps %d entries", n)
	}
}

// A tenant that stays listed (it has policy overrides) leaves the dead
// aggregates once its dead set has expired, at its index entry's next
// check by a pass — no Observe needed: an unobserved deployment keeps no
// entry for a dead set that is gone.
func TestIndexTrimForgetsAListedTenantsExpiredDeadSet(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	e.seed(params(func(p *Params) { p.MaxAttempts = 1 }))
	if _, err := e.store.PutTenantPolicy(e.ctx, "acme", Overrides{Adaptive: ptr(0)}, AnyVersion); err != nil {
		t.Fatal(err)
	}
	id := e.enqueueOne("acme", item(`{"n":1}`)).ID
	r := e.passTenant("acme", time.Second, -1)[0]
	c := e.claimAt(r)
	e.finish(id, c.Gen, wire.AttemptOutcome{Kind: wire.FinishPermanent, Status: 400}, FinishConfig{DeadRetention: time.Hour})
	if n, _ := e.rdb.HLen(e.ctx, e.store.keys.agg(0, "dead:n")).Result(); n != 1 {
		t.Fatalf("dead:n holds %d entries after a dead letter, want 1", n)
	}
	if err := e.rdb.Del(e.ctx, e.store.keys.tenantDead("acme")).Err(); err != nil { // as its TTL would
		t.Fatal(err)
	}
	// Past the entry's check: the retention of the job's end (a day by
	// default) and the dead set's hour.
	due, err := e.rdb.ZScore(e.ctx, e.store.keys.tenantIndex(0), "acme").Result()
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Set(time.UnixMicro(int64(due)).Add(time.Second))
	e.pass(0, PassConfig{Lead: time.Second, MinLead: -1, Capacity: -1})
	for _, k := range []string{"dead:n", "dead:x"} {
		if n, _ := e.rdb.Exists(e.ctx, e.store.keys.agg(0, k)).Result(); n != 0 {
			t.Errorf("%s still exists after the pass checked the tenant's index entry", k)
		}
	}
	if dead, _ := e.rdb.HGet(e.ctx, e.store.keys.agg(0, "agg"), "dead").Int(); dead != 0 {
		t.Errorf("agg dead = %d, want 0", dead)
	}
	if n, _ := e.rdb.ZScore(e.ctx, e.store.keys.tenantIndex(0), "acme").Result(); n == 0 {
		t.Error("the tenant with overrides left the index")
	}
}

// A deployment from before the aggregates (state written, aggregates
// absent) gets them built by its first Observe, equal to the walk's; a
// forced rebuild gives the same.
func TestObserveBuildsTheAggregatesOfAnOlderDeployment(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 2)
	e.seed(params(func(p *Params) { p.MaxAttempts = 1 }))
	for i, tn := range []string{"acme", "bolt", "crow"} {
		for range 2 * (i + 1) {
			e.enqueueOne(tn, item(`{"n":1}`))
		}
	}
	r := e.passTenant("bolt", time.Second, -1)
	c := e.claimAt(r[0])
	e.finish(r[0].ID, c.Gen, wire.AttemptOutcome{Kind: wire.FinishPermanent, Status: 400}, FinishConfig{})
	e.claimAt(r[1])
	if err := e.store.Pause(e.ctx, "crow", time.Time{}); err != nil {
		t.Fatal(err)
	}
	e.deleteAggregates() // as a release before them left it
	if built, err := e.store.BuildAggregates(e.ctx); err != nil || built != 2 {
		t.Fatalf("built %d shards (%v), want 2", built, err)
	}
	if built, err := e.store.BuildAggregates(e.ctx); err != nil || built != 0 {
		t.Fatalf("built %d shards again (%v), want none", built, err)
	}
	e.deleteAggregates()
	got, err := e.store.Observe(e.ctx, ObserveOptions{Top: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got.Rebuilt != 2 {
		t.Fatalf("rebuilt %d shards, want 2", got.Rebuilt)
	}
	o := e.observeMatches("built")
	if o.Backlog != 10 || o.Running != 1 || o.DeadLetters != 1 || o.AdminPaused != 1 {
		t.Fatalf("built: %+v", o)
	}
	e.enqueueOne("acme", item(`{"n":2}`)) // kept from there by the scripts
	e.observeMatches("enqueue after the build")
	if err := e.store.RebuildAggregates(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.observeMatches("forced rebuild")
}

// The top N is the N largest backlogs, ties by tenant, over every shard,
// and bad options are refused.
func TestObserveTopTiesByTenant(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 3)
	for i, tn := range []string{"t1", "t2", "t3", "t4", "t5", "t6", "t7"} {
		n := 2
		if i == 4 {
			n = 5
		}
		for range n {
			e.enqueueOne(tn, item(`{"n":1}`))
		}
	}
	got, err := e.store.Observe(e.ctx, ObserveOptions{Top: 3})
	if err != nil {
		t.Fatal(err)
	}
	want := []TenantBacklog{{"t5", 5}, {"t1", 2}, {"t2", 2}}
	if !slices.Equal(got.Top, want) {
		t.Fatalf("top %v, want %v", got.Top, want)
	}
	if err := e.store.Pause(e.ctx, "t0", time.Time{}); err != nil { // a tenant with no backlog
		t.Fatal(err)
	}
	got, err = e.store.Observe(e.ctx, ObserveOptions{Top: 9})
	if err != nil {
		t.Fatal(err)
	}
	want = []TenantBacklog{{"t5", 5}, {"t1", 2}, {"t2", 2}, {"t3", 2}, {"t4", 2}, {"t6", 2}, {"t7", 2}, {"t0", 0}}
	if !slices.Equal(got.Top, want) {
		t.Fatalf("top 9 of 8 tenants: %v, want %v", got.Top, want)
	}
	if _, err := e.store.Observe(e.ctx, ObserveOptions{Top: MaxObserveTop + 1}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("top %d: %v, want ErrInvalid", MaxObserveTop+1, err)
	}
}

// The scripts that keep the aggregates compile and keep them in the EVAL
// fallback too (a Redis without Functions; pass.lua is at Lua's locals
// limit there).
func TestObserveOnEval(t *testing.T) {
	t.Parallel()
	e := newEvalEnv(t)
	store := e.store
	e.enqueueOne("acme", item(`{"n":1}`))
	e.enqueueOne("acme", item(`{"n":2}`))
	r := e.passTenant("acme", time.Second, -1)
	c := e.claimAt(r[0])
	e.finish(r[0].ID, c.Gen, wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200}, FinishConfig{})
	o := e.observeMatches("eval")
	if o.Backlog != 1 || o.Running != 0 {
		t.Fatalf("eval: %+v", o)
	}
	if err := store.RebuildAggregates(e.ctx); err != nil {
		t.Fatal(err)
	}
	if store.runner.UsesFunctions() {
		t.Fatal("store did not fall back to EVAL")
	}
}

// deleteAggregates deletes every shard's aggregates.
func (e *env) deleteAggregates() {
	e.t.Helper()
	for shard := range e.store.keys.shards {
		for _, name := range []string{"agg", "top", "gate:a", "gate:u", "gate:d", "gate:p", "dead:n", "dead:x"} {
			if err := e.rdb.Del(e.ctx, e.store.keys.agg(shard, name)).Err(); err != nil {
				e.t.Fatal(err)
			}
		}
	}
}

// buildChunk runs one call of an aggregates build on shard 0 (observe_rebuild
// with chunk n) and returns its state: 0 built already, 1 ended, 2 goes on.
func (e *env) buildChunk(force bool, n int) int64 {
	e.t.Helper()
	f := "0"
	if force {
		f = "1"
	}
	d, err := e.store.run(e.ctx, scriptObserveRebuild, 0, f, n)
	if err == nil {
		err = d.Err()
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return d.int(3)
}

// An aggregates build walks the tenants a chunk a call; the tenants changed
// between its calls — counted already or not yet, new ones on either side
// of its cursor — leave the aggregates exact when it ends: a build never
// holds Redis for the whole shard, and never counts a change twice.
func TestAggregatesBuiltInChunksStayExact(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.MaxAttempts = 1000, 100, 1 }))
	tenants := []string{"t00", "t01", "t02", "t03", "t04", "t05", "t06", "t07", "t08", "t09", "t10", "t11"}
	for i, tn := range tenants {
		for range 1 + i%3 {
			e.enqueueOne(tn, item(`{"n":1}`))
		}
	}
	released := map[string][]wire.Release{} // one pass releases every job
	for _, r := range e.passTenant("t00", time.Second, -1) {
		released[r.Tenant] = append(released[r.Tenant], r)
	}
	claimed := func(tn string) (wire.Release, ClaimedJob) { // its first released job, claimed
		r := released[tn][0]
		released[tn] = released[tn][1:]
		return r, e.claimAt(r)
	}
	dead := func(tn string) { // … and dead-lettered
		r, c := claimed(tn)
		e.finish(r.ID, c.Gen, wire.AttemptOutcome{Kind: wire.FinishPermanent, Status: 400}, FinishConfig{})
	}
	dead("t04")
	if err := e.store.Pause(e.ctx, "t07", time.Time{}); err != nil {
		t.Fatal(err)
	}
	e.deleteAggregates() // as a release before them left it
	if s := e.buildChunk(false, 3); s != 2 {
		t.Fatalf("first chunk: state %d, want 2 (goes on)", s)
	}
	// Counted already (t00 … t02) and not yet (t03 …): each kind of change.
	e.enqueueOne("t01", item(`{"n":2}`))
	e.enqueueOne("t09", item(`{"n":2}`))
	dead("t02")
	dead("t10")
	if err := e.store.Pause(e.ctx, "t01", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Pause(e.ctx, "t11", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if s := e.buildChunk(false, 3); s != 2 {
		t.Fatalf("second chunk: state %d, want 2", s)
	}
	// New tenants before the cursor t05 in byte order (counted at once:
	// ZRANGE BYLEX's order, not a locale's, which puts "Zed" after "t05")
	// and after it.
	for _, tn := range []string{"a-new", "Zed", "t0", "zz-new"} {
		e.enqueueOne(tn, item(`{"n":3}`))
	}
	claimed("t05") // counted now
	// Not yet counted:
	if err := e.store.Resume(e.ctx, "t07"); err != nil {
		t.Fatal(err)
	}
	chunks := 2
	for s := int64(2); s == 2; chunks++ {
		s = e.buildChunk(false, 3)
		if s == 0 || chunks > 10 {
			t.Fatalf("chunk %d: state %d", chunks+1, s)
		}
	}
	if chunks != 5 { // 13 names walked (a-new, Zed, t0 came behind the cursor), 3 a call: the fifth reads 1 and ends it
		t.Fatalf("the build took %d calls, want 5", chunks)
	}
	o := e.observeMatches("built in chunks")
	if o.Running != 1 || o.DeadLetters != 3 || o.AdminPaused != 2 {
		t.Fatalf("built in chunks: %+v", o)
	}
	if s := e.buildChunk(false, 3); s != 0 {
		t.Fatalf("after the build: state %d, want 0 (built already)", s)
	}
	// A build under way ends at the next Observe, which finishes it.
	if s := e.buildChunk(true, 2); s != 2 {
		t.Fatalf("forced start: state %d, want 2", s)
	}
	e.enqueueOne("t06", item(`{"n":4}`))
	got, err := e.store.Observe(e.ctx, ObserveOptions{Top: 3})
	if err != nil || got.Rebuilt != 1 {
		t.Fatalf("observe during a build: rebuilt %d, %v; want 1", got.Rebuilt, err)
	}
	e.observeMatches("build finished by Observe")
}
