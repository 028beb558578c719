package store

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

// tenantsByName lists every tenant through Store.Tenants, by id, failing on
// a repeat.
func (e *env) tenantsByName() map[string]TenantSummary {
	e.t.Helper()
	all, err := e.store.Tenants(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]TenantSummary{}
	for _, st := range all {
		if _, dup := out[st.Tenant]; dup {
			e.t.Fatalf("tenant %q listed twice", st.Tenant)
		}
		out[st.Tenant] = st
	}
	return out
}

// Every tenant with state is listed once, whichever script made it — an
// enqueue, a pause, a policy — with the state TenantState reads; one whose
// state is gone leaves the index, by the listing or by the pass's trim.
func TestTenantsListsEveryTenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 300
	for i := range n {
		tn := fmt.Sprintf("t%03d", i)
		for range i % 4 {
			e.enqueueOne(tn, item(`{}`))
		}
		if i%4 == 0 {
			if err := e.store.Pause(e.ctx, tn, time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := e.store.PutTenantPolicy(e.ctx, "policy-only", Overrides{Burst: ptr(int64(3))}, AnyVersion); err != nil {
		t.Fatal(err)
	}
	got := e.tenantsByName()
	if len(got) != n+1 {
		t.Fatalf("%d tenants listed, want %d", len(got), n+1)
	}
	for i := range n {
		tn := fmt.Sprintf("t%03d", i)
		st, want := got[tn], e.state(tn)
		if st.Backlog != int64(i%4) || st.Backlog != want.Backlog || st.AdminPaused != (i%4 == 0) ||
			!st.Exists || st.OldestQueuedAt != want.OldestQueuedAt || (i%4 > 0) == st.OldestQueuedAt.IsZero() {
			t.Fatalf("%s listed %+v, want backlog %d (TenantState %+v)", tn, st, i%4, want)
		}
	}
	if st, ok := got["policy-only"]; !ok || st.Exists || st.Backlog != 0 {
		t.Fatalf("policy-only tenant listed as %+v (%v)", st, ok)
	}

	// State gone (as an expiry leaves it): the listing drops the entry.
	if err := e.rdb.Del(e.ctx, e.store.keys.tenant("t001")).Err(); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.tenantsByName()["t001"]; ok {
		t.Fatal("t001 listed after its state is gone")
	}
	index := e.store.keys.tenantIndex(e.store.keys.shardOf("t001"))
	if e.rdb.ZScore(e.ctx, index, "t001").Err() == nil {
		t.Fatal("t001 still in the index after a listing found it empty")
	}

	// The pass's trim: an entry due for its check with no state left goes;
	// one with state stays, checked again later.
	gone, kept := "t002", "t003"
	for _, tn := range []string{gone, kept} {
		if err := e.rdb.Del(e.ctx, e.store.keys.tenant(tn)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	e.enqueueOne(kept, item(`{}`)) // created again: in the index again
	e.clock.Advance(2 * time.Hour)
	for shard := range e.store.Shards() {
		for range n / indexTrimMax {
			e.pass(shard, PassConfig{Lead: time.Millisecond, MinLead: -1, Capacity: 0})
		}
	}
	for _, c := range []struct {
		tn string
		in bool
	}{{gone, false}, {kept, true}, {"t004", true}, {"policy-only", true}} {
		key := e.store.keys.tenantIndex(e.store.keys.shardOf(c.tn))
		score, err := e.rdb.ZScore(e.ctx, key, c.tn).Result()
		if (err == nil) != c.in {
			t.Fatalf("%s in the index after the trim: %v, want %v", c.tn, err == nil, c.in)
		}
		if c.in && int64(score) <= e.clock.Now().UnixMicro() {
			t.Fatalf("%s: next check %d not after now", c.tn, int64(score))
		}
	}
}

// indexTrimMax is tenants.lua's INDEX_TRIM_MAX.
const indexTrimMax = 16

// Inflow is a sliding minute over two one-minute buckets.
func TestInflowPerSecond(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.AdmitBurst = 1000 }))
	e.clock.Set(epoch.Add(30 * time.Second)) // epoch starts a minute
	for range 60 {
		e.enqueueOne("acme", item(`{}`))
	}
	if got := e.state("acme").InflowPerSecond(); math.Abs(got-1) > 1e-9 {
		t.Fatalf("inflow %v, want 1/s (60 in the current minute)", got)
	}
	e.clock.Set(epoch.Add(90 * time.Second)) // half of the previous minute still in the window
	if got := e.state("acme").InflowPerSecond(); math.Abs(got-0.5) > 1e-9 {
		t.Fatalf("inflow %v, want 0.5/s", got)
	}
	for range 30 {
		e.enqueueOne("acme", item(`{}`))
	}
	if got := e.state("acme").InflowPerSecond(); math.Abs(got-1) > 1e-9 {
		t.Fatalf("inflow %v, want (30 + 60/2)/60 = 1/s", got)
	}
	e.clock.Set(epoch.Add(200 * time.Second))
	if got := e.state("acme").InflowPerSecond(); got != 0 {
		t.Fatalf("inflow %v two minutes later, want 0", got)
	}
}

// drain dispatches tenant's backlog the way a dispatcher and workers would
// — passes at their wake-ups, each job claimed at its slot and finished —
// and returns the time its last job was claimed.
func (e *env) drain(tenant string) time.Time {
	e.t.Helper()
	var last time.Time
	shard := e.store.keys.shardOf(tenant)
	for e.state(tenant).Backlog > 0 {
		res := e.pass(shard, PassConfig{Lead: 100 * ms, MinLead: 50 * ms, Grace: time.Second, Capacity: -1})
		for _, r := range res.Released {
			c := e.claimAt(r)
			e.finish(r.ID, c.Gen, benchOK, FinishConfig{})
			last = e.clock.Now()
		}
		if len(res.Released) == 0 {
			e.clock.Advance(50 * ms)
		}
	}
	return last
}

// The drain forecast of a tenant with a known backlog and rate is within
// 10 % of the time its backlog then takes, with and without a timed pause.
func TestForecastMatchesDrain(t *testing.T) {
	t.Parallel()
	for _, pause := range []time.Duration{0, 3 * time.Second} {
		t.Run(fmt.Sprintf("pause=%s", pause), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.AdmitBurst, p.Concurrency = 100_000, 2, 1000, 10 }))
			for range 60 {
				e.enqueueOne("acme", item(`{}`))
			}
			e.clock.Advance(2 * time.Second)
			if pause > 0 {
				if err := e.store.Pause(e.ctx, "acme", e.clock.Now().Add(pause)); err != nil {
					t.Fatal(err)
				}
			}
			start := e.state("acme")
			f := start.Forecast()
			if !f.DrainKnown || f.OldestJobAge != 2*time.Second || f.Draining != (pause == 0) {
				t.Fatalf("forecast %+v", f)
			}
			took := e.drain("acme").Sub(start.Now)
			if ratio := float64(f.DrainETA) / float64(took); ratio < 0.9 || ratio > 1.1 {
				t.Fatalf("forecast %s, the drain took %s (ratio %.3f)", f.DrainETA, took, ratio)
			}
			after := e.state("acme").Forecast()
			if after.DrainETA != 0 || after.OldestJobAge != 0 || !after.DrainKnown {
				t.Fatalf("forecast after the drain %+v", after)
			}
		})
	}
}

// Disabled or paused without an end: no ETA, not draining; inflow at the
// rate: not draining.
func TestForecastStalled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.RateUS, p.AdmitBurst = 1_000_000, 1000 })) // 1/s
	for range 120 {
		e.enqueueOne("acme", item(`{}`))
	}
	if f := e.state("acme").Forecast(); f.Draining || !f.DrainKnown || f.InflowPerSecond < 1 {
		t.Fatalf("inflow 2/s at 1/s: %+v, want not draining", f)
	}
	if err := e.store.Pause(e.ctx, "acme", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if f := e.state("acme").Forecast(); f.Draining || f.DrainKnown {
		t.Fatalf("paused: %+v, want no ETA", f)
	}
}

// deadLetters makes n dead letters of tenant (max_attempts 1, each failing
// with outcome kind), through passes, claims and finishes.
func (e *env) deadLetters(tenant string, n int, kind wire.FinishKind) []string {
	e.t.Helper()
	var ids []string
	for len(ids) < n {
		items := make([]Item, min(MaxBatch, n-len(ids)))
		for i := range items {
			items[i] = item(`{}`)
		}
		for _, r := range e.enqueue(tenant, items...) {
			ids = append(ids, r.ID)
		}
	}
	shard := e.store.keys.shardOf(tenant)
	for dead := 0; dead < n; {
		res := e.pass(shard, PassConfig{Lead: time.Second, MinLead: -1, Grace: time.Minute, Capacity: -1, ClaimSpacing: -1})
		if len(res.Released) == 0 {
			e.t.Fatalf("%d of %d dead, nothing released", dead, n)
		}
		e.clock.Set(res.Released[len(res.Released)-1].Slot)
		cs, err := e.store.ClaimBatch(e.ctx, shard, claimReqs(res.Released...), time.Second)
		if err != nil {
			e.t.Fatal(err)
		}
		reqs := make([]FinishRequest, len(cs))
		for i, c := range cs {
			if c.Outcome != ClaimOK {
				e.t.Fatalf("claim %s: %+v", res.Released[i].ID, c)
			}
			reqs[i] = FinishRequest{ID: res.Released[i].ID, Gen: c.Job.Gen, Outcome: outcome(kind)}
		}
		if _, err := e.store.FinishBatch(e.ctx, shard, reqs, FinishConfig{}); err != nil {
			e.t.Fatal(err)
		}
		dead += len(reqs)
	}
	return ids
}

func fastDeadParams(p *Params) {
	p.RateUS, p.Burst, p.Concurrency, p.AdmitBurst, p.MaxAttempts = 1, 1000, 1_000_000, 1_000_000, 1
}

// 5 000 dead letters replayed in bounded calls along the cursor: each
// exactly once (gen one past its death's), the call count as the limit
// says; a repeated call replays nothing more.
func TestReplayDeadBulk(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	e.seed(params(fastDeadParams))
	const n, limit = 5000, 700
	ids := e.deadLetters("acme", n, wire.FinishPermanent)
	gens := map[string]int64{}
	for _, id := range ids {
		gens[id] = e.job(id).Gen
	}
	total, calls, cursor := 0, 0, ""
	for {
		k, next, err := e.store.ReplayDead(e.ctx, "acme", DeadReplay{Limit: limit, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		if k > limit {
			t.Fatalf("one call replayed %d, limit %d", k, limit)
		}
		total, calls, cursor = total+k, calls+1, next
		if cursor == "" {
			break
		}
	}
	if total != n || calls != (n+limit-1)/limit {
		t.Fatalf("replayed %d in %d calls, want %d in %d", total, calls, n, (n+limit-1)/limit)
	}
	for _, id := range ids {
		if j := e.job(id); j.State != StateQueued || j.Gen != gens[id]+1 {
			t.Fatalf("job %s: %s gen %d, want queued at gen %d", id, j.State, j.Gen, gens[id]+1)
		}
	}
	if st := e.state("acme"); st.Backlog != n || st.DeadLetters != 0 {
		t.Fatalf("after the replay: %+v", st)
	}
	if k, next, err := e.store.ReplayDead(e.ctx, "acme", DeadReplay{Limit: limit}); err != nil || k != 0 || next != "" {
		t.Fatalf("repeated replay: %d, %q, %v", k, next, err)
	}
	e.requireConsistent()
}

// Reason and before select; a cursor keeps its walk's cutoff, so a letter
// that dies again after the walk began is not replayed twice by it; bad
// input changes nothing.
func TestReplayDeadSelect(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	e.seed(params(fastDeadParams))
	perm := e.deadLetters("acme", 4, wire.FinishPermanent)
	mid := e.clock.Now()
	e.clock.Advance(time.Second)
	retry := e.deadLetters("acme", 4, wire.FinishRetry)

	for _, bad := range []DeadReplay{{Limit: 0}, {Limit: MaxReplayDead + 1}, {Limit: 1, Reason: "Nope!"},
		{Limit: 1, Cursor: "garbage"}, {Limit: 1, Cursor: "1:2:j0_x"}, {Limit: 1, Before: time.Unix(0, -1)}} {
		if _, _, err := e.store.ReplayDead(e.ctx, "acme", bad); !errors.Is(err, ErrInvalid) {
			t.Fatalf("%+v: %v, want ErrInvalid", bad, err)
		}
	}
	if st := e.state("acme"); st.DeadLetters != 8 {
		t.Fatalf("bad input changed the dead set: %d letters", st.DeadLetters)
	}
	if k, _, err := e.store.ReplayDead(e.ctx, "acme", DeadReplay{Limit: 10, Reason: "retry", Before: mid}); err != nil || k != 0 {
		t.Fatalf("retry letters before %s: %d, %v; want none", mid, k, err)
	}
	k, next, err := e.store.ReplayDead(e.ctx, "acme", DeadReplay{Limit: 2, Reason: "retry"})
	if err != nil || k != 2 || next == "" {
		t.Fatalf("first two retry letters: %d, %q, %v", k, next, err)
	}
	for i, id := range retry {
		if want := map[bool]State{true: StateQueued, false: StateDead}[i < 2]; e.job(id).State != want {
			t.Fatalf("retry letter %d: %s, want %s", i, e.job(id).State, want)
		}
	}
	// The two replayed die again; the walk goes on past them.
	e.clock.Advance(time.Second)
	e.deadLettersAgain(retry[:2])
	k, next, err = e.store.ReplayDead(e.ctx, "acme", DeadReplay{Limit: 10, Reason: "retry", Cursor: next})
	if err != nil || k != 2 || next != "" {
		t.Fatalf("rest of the walk: %d, %q, %v; want the 2 others", k, next, err)
	}
	for i, id := range retry {
		if want := map[bool]State{true: StateDead, false: StateQueued}[i < 2]; e.job(id).State != want {
			t.Fatalf("retry letter %d after the walk: %s, want %s", i, e.job(id).State, want)
		}
	}
	for _, id := range perm {
		if e.job(id).State != StateDead {
			t.Fatalf("permanent letter %s replayed by a retry walk", id)
		}
	}
}

// deadLettersAgain kills the queued jobs ids again (they are the tenant's
// whole backlog).
func (e *env) deadLettersAgain(ids []string) {
	e.t.Helper()
	for _, id := range ids {
		c := e.attempt(id)
		if st := e.finish(id, c.Gen, outcome(wire.FinishRetry), FinishConfig{}); st != StateDead {
			e.t.Fatalf("job %s: %s, want dead", id, st)
		}
	}
}

// A drained tenant stays in the index, and listed, while the records of
// the jobs that just ended are kept (the succeeded retention; a canceled
// tombstone's retention for a cancel), even after its hash expired; a
// tenant with only secrets by API is listed too. Past the retention the
// pass's trim drops the entry; a busy tenant's stays.
func TestTenantIndexFollowsIdleExpiry(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	retention := 2 * time.Hour
	idle := e.enqueueOne("idle", item(`{}`)).ID
	c := e.attempt(idle)
	e.finish(idle, c.Gen, benchOK, FinishConfig{SucceededRetention: retention})
	e.enqueueOne("busy", item(`{}`))
	e.addSecret("signed", "v1.sealed", 0)
	index := e.store.keys.tenantIndex(0)
	now := e.clock.Now().UnixMicro()
	if score := int64(e.rdb.ZScore(e.ctx, index, "idle").Val()); score != now+retention.Microseconds() {
		t.Fatalf("idle tenant's entry due in %dµs, want the succeeded retention %dµs", score-now, retention.Microseconds())
	}
	if busy := int64(e.rdb.ZScore(e.ctx, index, "busy").Val()); busy < now+time.Hour.Microseconds()-time.Second.Microseconds() {
		t.Fatalf("busy tenant's entry due in %dµs, want about an hour", busy-now)
	}
	if err := e.rdb.Del(e.ctx, e.store.keys.tenant("idle")).Err(); err != nil { // as its expiry would
		t.Fatal(err)
	}
	e.clock.Advance(retention - time.Second)
	e.pass(0, PassConfig{Lead: time.Millisecond, MinLead: -1, Capacity: 0})
	if names := e.walkNames("", 10); !slices.Equal(names, []string{"busy", "idle", "signed"}) {
		t.Fatalf("within the retention: names %q, want busy, idle, signed", names)
	}
	views, err := e.store.TenantViews(e.ctx, []string{"busy", "idle", "signed"})
	if err != nil || len(views) != 3 {
		t.Fatalf("within the retention: %d views (%v), want 3", len(views), err)
	}
	e.clock.Advance(2 * time.Second)
	e.pass(0, PassConfig{Lead: time.Millisecond, MinLead: -1, Capacity: 0})
	if e.rdb.ZScore(e.ctx, index, "idle").Err() == nil {
		t.Fatal("the idle tenant's entry is still in the index after its retention")
	}
	if names := e.walkNames("", 10); !slices.Equal(names, []string{"busy", "signed"}) {
		t.Fatalf("after the retention: names %q, want busy, signed", names)
	}
	e.requireConsistent()
}

// An entry that comes due when its tenant has no key left (hash, dead set,
// secrets) leaves the index and the name set; one whose tenant still has
// policy overrides stays, checked again an hour on.
func TestIndexCheckOfTenantsWithNoKeyLeft(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	if _, err := e.store.PutTenantPolicy(e.ctx, "kept", Overrides{Adaptive: ptr(0)}, AnyVersion); err != nil {
		t.Fatal(err)
	}
	for _, tn := range []string{"kept", "gone"} {
		id := e.enqueueOne(tn, item(`{}`)).ID
		c := e.attempt(id)
		e.finish(id, c.Gen, benchOK, FinishConfig{SucceededRetention: time.Minute})
		if err := e.rdb.Del(e.ctx, e.store.keys.tenant(tn)).Err(); err != nil { // as its expiry would
			t.Fatal(err)
		}
	}
	e.clock.Advance(time.Minute + time.Second)
	e.pass(0, PassConfig{Lead: time.Millisecond, MinLead: -1, Capacity: 0})
	index := e.store.keys.tenantIndex(0)
	if e.rdb.ZScore(e.ctx, index, "gone").Err() == nil {
		t.Error("the tenant with no state left is still in the index")
	}
	next, err := e.rdb.ZScore(e.ctx, index, "kept").Result()
	if want := e.clock.Now().Add(time.Hour).UnixMicro(); err != nil || int64(next) != want {
		t.Errorf("the tenant with overrides: next check %d (%v), want an hour on, %d", int64(next), err, want)
	}
	if names := e.walkNames("", 10); !slices.Equal(names, []string{"kept"}) {
		t.Errorf("names %q, want kept", names)
	}
	e.requireConsistent()
}

// A canceled job keeps its tenant listed for the tombstone's retention.
func TestTenantIndexKeepsCanceled(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	id := e.enqueueOne("gone", item(`{}`)).ID
	e.cancel(id)
	now := e.clock.Now().UnixMicro()
	score := int64(e.rdb.ZScore(e.ctx, e.store.keys.tenantIndex(0), "gone").Val())
	if want := now + e.store.retention.Microseconds(); score != want {
		t.Fatalf("entry due in %dµs, want the canceled retention %dµs", score-now, want-now)
	}
	if err := e.rdb.Del(e.ctx, e.store.keys.tenant("gone")).Err(); err != nil {
		t.Fatal(err)
	}
	if views, err := e.store.TenantViews(e.ctx, []string{"gone"}); err != nil || len(views) != 1 {
		t.Fatalf("%d views (%v), want the canceled job's tenant", len(views), err)
	}
}

// A tenant drained under a retention shorter than the index's recheck (an
// hour) leaves nothing once that retention has passed: every key naming it
// or its job expires within the retention (the TTLs read, then the keys
// deleted as their expiry would), and the first pass after it drops the
// index entry and the name — not an hour on.
func TestDrainedTenantLeavesNothingAfterItsRetention(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	retention := 10 * time.Second
	id := e.enqueueOne("brief", idemItem("k", `{}`)).ID
	c := e.attempt(id)
	cfg := FinishConfig{SucceededRetention: retention, IdempotencyRetention: retention}
	if st := e.finish(id, c.Gen, benchOK, cfg); st != StateSucceeded {
		t.Fatalf("finish: %s, want succeeded", st)
	}
	now := e.clock.Now()
	index, names := e.store.keys.tenantIndex(0), e.store.keys.tenantNames(0)
	if score := int64(e.rdb.ZScore(e.ctx, index, "brief").Val()); score != now.Add(retention).UnixMicro() {
		t.Fatalf("entry due in %dµs, want the retention %dµs (not the hour of its creation's recheck)",
			score-now.UnixMicro(), retention.Microseconds())
	}
	keys := e.keysNaming("brief", id)
	if len(keys) < 3 { // the tenant hash, the job record, the idempotency key (and its recent attempts)
		t.Fatalf("keys naming the tenant or its job: %q, want at least its hash, record and idempotency key", keys)
	}
	for _, k := range keys {
		if ttl := e.rdb.PTTL(e.ctx, k).Val(); ttl <= 0 || ttl > retention {
			t.Fatalf("%s: TTL %s, want within the retention %s", k, ttl, retention)
		}
	}
	if err := e.rdb.Del(e.ctx, keys...).Err(); err != nil { // as their expiry would
		t.Fatal(err)
	}
	e.clock.Advance(retention + time.Second)
	e.pass(0, PassConfig{Lead: time.Millisecond, MinLead: -1, Capacity: 0})
	if e.rdb.ZScore(e.ctx, index, "brief").Err() == nil || e.rdb.ZScore(e.ctx, names, "brief").Err() == nil {
		t.Fatal("the drained tenant is still in the index or the name set after its retention")
	}
	if left := e.keysNaming("brief", id); len(left) > 0 {
		t.Fatalf("keys left: %q", left)
	}
}

// keysNaming is the keys under e's prefix whose name holds tenant or id.
func (e *env) keysNaming(tenant, id string) []string {
	e.t.Helper()
	var out []string
	iter := e.rdb.Scan(e.ctx, 0, e.prefix+":*", 100).Iterator()
	for iter.Next(e.ctx) {
		if k := iter.Val(); strings.Contains(k, ":"+tenant) || strings.Contains(k, id) {
			out = append(out, k)
		}
	}
	if err := iter.Err(); err != nil {
		e.t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// More index entries due than a pass checks (a mass expiry): the pass
// checks its limit and asks for the next pass 100 ms on, which takes the
// rest and asks for nothing more.
func TestIndexTrimCallsTheNextPassSoon(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	const n = 100 // > INDEX_TRIM_MAX (64)
	var keys []string
	for i := range n {
		tn := fmt.Sprintf("gone%03d", i)
		id := e.enqueueOne(tn, item(`{}`)).ID
		e.cancel(id)
		k, err := e.store.keys.job(id)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, e.store.keys.tenant(tn), k)
	}
	if err := e.rdb.Del(e.ctx, keys...).Err(); err != nil { // as their expiry would
		t.Fatal(err)
	}
	e.clock.Advance(e.store.retention + time.Minute)
	index := e.store.keys.tenantIndex(0)
	res := e.pass(0, PassConfig{Lead: time.Millisecond, MinLead: -1, Capacity: 0})
	if left := e.rdb.ZCard(e.ctx, index).Val(); left != n-64 {
		t.Fatalf("after the first pass %d entries, want %d", left, n-64)
	}
	if want := e.clock.Now().Add(100 * time.Millisecond); !res.NextWake.Equal(want) {
		t.Fatalf("first pass: next wake %s, want 100 ms on (%s)", res.NextWake, want)
	}
	e.clock.Advance(100 * time.Millisecond)
	res = e.pass(0, PassConfig{Lead: time.Millisecond, MinLead: -1, Capacity: 0})
	if left := e.rdb.ZCard(e.ctx, index).Val(); left != 0 {
		t.Fatalf("after the second pass %d entries, want 0", left)
	}
	if !res.NextWake.IsZero() {
		t.Fatalf("second pass: next wake %s, want none (nothing due)", res.NextWake)
	}
	if names := e.walkNames("", 10); len(names) != 0 {
		t.Fatalf("names left: %q", names)
	}
}
