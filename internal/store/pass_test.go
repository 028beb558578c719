package store

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/internal/redisscript"
	"github.com/sluicehq/sluice/internal/wire"
)

const ms = time.Millisecond

// prodPass is the production shape of a pass: D = 100ms, L = 50ms, grace 1s.
// prodPass is the production timing without claim spacing, so slots are
// the exact GCRA ones (TestPassSpacesClaims covers the spacing).
var prodPass = PassConfig{Lead: 100 * ms, MinLead: 50 * ms, Grace: time.Second, Capacity: -1, ClaimSpacing: -1}

func batchOf(n int, tag string) []Item {
	items := make([]Item, n)
	for i := range items {
		items[i] = item(fmt.Sprintf(`{"%s":%d}`, tag, i))
	}
	return items
}

// Property: at r = 50/s, b = 1, with 100 queued jobs and passes at random
// times (workers claiming at the slot and holding jobs for random times),
// every job is released once, slots are ≥ T apart and no window of length
// Δ holds more than b + Δ/T tokens.
func TestPassReleasesAtTheGCRARate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const T = 20 * ms
	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Concurrency = T.Microseconds(), 1, 1000 }))
	iteration := 0
	rapid.Check(t, func(rt *rapid.T) {
		iteration++
		tenant := fmt.Sprintf("gcra%d", iteration)
		e.enqueue(tenant, batchOf(100, "i")...)
		s := newSim(e, tenant, prodPass)
		s.hold = func() time.Duration { return redisscript.Micros(rapid.Int64Range(0, 40_000).Draw(rt, "hold µs")) }
		for range rapid.IntRange(0, 80).Draw(rt, "random passes") {
			s.passAt(e.clock.Now().Add(redisscript.Micros(rapid.Int64Range(0, 60_000).Draw(rt, "gap µs"))))
		}
		for s.finished < 100 && len(s.released) <= 100 {
			s.passAt(e.clock.Now().Add(50 * ms))
		}
		seen := map[string]bool{}
		for _, r := range s.released {
			if seen[r.ID] || r.Gen != 1 {
				rt.Fatalf("job %s released again or at gen %d", r.ID, r.Gen)
			}
			seen[r.ID] = true
		}
		slots := s.slots()
		for i := 1; i < len(slots); i++ {
			if gap := slots[i].Sub(slots[i-1]); gap < T {
				rt.Fatalf("slots %d and %d only %s apart", i-1, i, gap)
			}
		}
		if v := gcraViolation(slots, 1, T); v != "" {
			rt.Fatal(v)
		}
		if s.finished != 100 {
			rt.Fatalf("%d of 100 jobs finished", s.finished)
		}
	})
	e.requireConsistent()
}

// b = 5: the first five slots coincide, then the spacing is T; with L the
// burst waits for now + L and TAT advances from there. Run to the end, every
// window respects b + Δ/T.
func TestPassBurstThenSpacing(t *testing.T) {
	t.Parallel()
	const T = 20 * ms
	for _, c := range []struct {
		minLead time.Duration
		want    []time.Duration // the first pass's slots
	}{
		{-1, []time.Duration{0, 0, 0, 0, 0, 20 * ms, 40 * ms, 60 * ms, 80 * ms, 100 * ms}}, // capped by slot ≤ now + D and ⌈D/T⌉ + b = 10
		// L moves no slot: the ones within L are claimed at pickup, the
		// others are spaced from each other (here already 20ms apart).
		{50 * ms, []time.Duration{0, 0, 0, 0, 0, 20 * ms, 40 * ms, 60 * ms, 80 * ms, 100 * ms}},
	} {
		t.Run(fmt.Sprint("L=", max(c.minLead, 0)), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Concurrency = T.Microseconds(), 5, 100 }))
			e.enqueue("acme", batchOf(20, "a")...)
			cfg := prodPass
			cfg.MinLead = c.minLead
			s := newSim(e, "acme", cfg)
			got := s.passAt(epoch).Released
			if len(got) != len(c.want) {
				t.Fatalf("released %d, want %d", len(got), len(c.want))
			}
			for i, r := range got {
				if r.Slot.Sub(epoch) != c.want[i] || r.Gen != 1 || r.Tenant != "acme" || r.Type != "webhook" {
					t.Errorf("release %d: %+v, want slot +%s", i, r, c.want[i])
				}
			}
			if st := e.state("acme"); c.minLead < 0 && (st.ReleasedCost != 10 || !st.NextAt.IsZero()) {
				t.Fatalf("state %+v: want 10 tokens released and out of ready at the release cap", st)
			}
			e.requireConsistent()
			for s.finished < 20 {
				s.passAt(e.clock.Now().Add(30 * ms))
			}
			if len(s.released) != 20 {
				t.Fatalf("%d releases for 20 jobs", len(s.released))
			}
			if v := gcraViolation(s.slots(), 5, T); v != "" {
				t.Fatal(v)
			}
			e.requireConsistent()
		})
	}
}

// released + running ≤ concurrency at every step, with workers holding
// jobs; the release cap bounds the released tokens when nobody claims.
func TestPassConcurrencyCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Concurrency = 1000, 3, 3 }))
	e.enqueue("acme", batchOf(60, "a")...)
	s := newSim(e, "acme", prodPass)
	i := 0
	s.hold = func() time.Duration { i++; return time.Duration(i%7) * 15 * ms }
	peak := int64(0)
	s.check = func(at string) {
		st := e.state("acme")
		if st.Released+st.Running > 3 {
			t.Fatalf("%s: %d released + %d running > concurrency 3", at, st.Released, st.Running)
		}
		peak = max(peak, st.Running)
	}
	for s.finished < 60 {
		s.passAt(e.clock.Now().Add(10 * ms))
	}
	if peak != 3 {
		t.Fatalf("peak running %d, want the cap 3 reached", peak)
	}
	e.requireConsistent()
}

func TestPassReleaseCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Concurrency = 10_000, 1, 1000 })) // 100/s
	e.enqueue("acme", batchOf(40, "a")...)
	shard := e.store.keys.shardOf("acme")
	cfg := prodPass
	cfg.Grace = time.Hour // no sweep here
	var released []wire.Release
	for range 40 { // 2s without a claim: GCRA alone would allow 200
		released = append(released, e.pass(shard, cfg).Released...)
		if st := e.state("acme"); st.ReleasedCost > 11 {
			t.Fatalf("released tokens %d > cap ⌈D/T⌉ + b = 11", st.ReleasedCost)
		}
		e.clock.Advance(50 * ms)
	}
	if len(released) != 11 {
		t.Fatalf("released %d, want the cap 11", len(released))
	}
	if st := e.state("acme"); !st.NextAt.IsZero() {
		t.Fatalf("at the release cap the tenant must leave ready: %+v", st)
	}
	e.requireConsistent()

	// A claim frees a token and puts the tenant back in ready. The job is
	// late (its slot passed long ago) and nothing went out since: it is
	// claimed at once.
	if c := e.claim(released[0].ID, released[0].Gen); c.Outcome != ClaimOK {
		t.Fatalf("late claim: %+v, want claimed", c)
	}
	if st := e.state("acme"); st.NextAt.IsZero() || st.ReleasedCost != 10 {
		t.Fatalf("after a claim: %+v, want back in ready with 10 tokens released", st)
	}
	if got := e.pass(shard, cfg).Released; len(got) != 1 {
		t.Fatalf("released %d after a claim, want 1", len(got))
	}
	e.requireConsistent()
}

// Task jobs carry their asynq route from the body; every release carries
// the policy's timeout.
func TestPassTaskRoute(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.Burst, p.TimeoutUS = 3, 7_000_000 }))
	task := Item{Type: "task", Body: []byte(`{"type":"task","task_type":"email:send","queue":"mail","payload":{"n":12345678901234567}}`)}
	bad := Item{Type: "task", Body: []byte(`not json`)}
	rs := e.enqueue("acme", task, bad, item(`{}`))
	got := e.pass(e.store.keys.shardOf("acme"), PassConfig{Lead: 100 * ms, MinLead: -1, Grace: time.Second,
		Capacity: -1, ClaimSpacing: -1}).Released
	if len(got) != 3 {
		t.Fatalf("released %d, want 3", len(got))
	}
	for _, r := range got {
		if !r.Slot.Equal(epoch) || !r.SendAt.Equal(epoch) {
			t.Errorf("release %s at +%s (send at +%s), want now", r.ID, r.Slot.Sub(epoch), r.SendAt.Sub(epoch))
		}
		r.Slot, r.SendAt = time.Time{}, time.Time{}
		want := wire.Release{ID: r.ID, Tenant: "acme", Type: "webhook", Cost: 1, Gen: 1, Timeout: 7 * time.Second}
		switch r.ID {
		case rs[0].ID:
			want.Type, want.Queue, want.TaskType = "task", "mail", "email:send"
		case rs[1].ID:
			want.Type = "task" // no route: the dispatcher decides
		}
		if r != want {
			t.Errorf("release %+v, want %+v", r, want)
		}
		if r.TaskID() != r.ID+":1" {
			t.Errorf("task id %q", r.TaskID())
		}
	}
}

// More when P or K cut the pass short; NextWake is the earliest of the
// ready scores − D, delayed due times and lease deadlines — or the pass's
// now when work is left (More or CapacityReached).
func TestPassBoundsAndNextWake(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenants := sameShard("acme", 3)
	for _, tn := range tenants {
		later := item(`{}`)
		later.Delay = 5 * time.Second
		e.enqueue(tn, item(`{}`), item(`{}`), later)
	}
	shard := e.store.keys.shardOf("acme")
	cfg := prodPass
	cfg.MaxTenants = 2
	cfg.Lead, cfg.MinLead = 50*ms, 50*ms // one job of each tenant within D (T = 100ms)
	res := e.pass(shard, cfg)
	if !res.More || res.Tenants != 2 || len(res.Released) != 2 {
		t.Fatalf("K = 2 of 3 eligible: %+v", res)
	}
	if !res.NextWake.Equal(res.Now) {
		t.Fatalf("More: next wake %s, want the pass's now %s", res.NextWake, res.Now)
	}
	res = e.pass(shard, cfg)
	if res.More || len(res.Released) != 1 {
		t.Fatalf("the third: %+v", res)
	}
	// Next: the second jobs' slots; ready scores are the GCRA slots (TAT =
	// +100ms): wake at +100ms − D = +50ms.
	if got := res.NextWake.Sub(epoch); got != 50*ms {
		t.Fatalf("next wake +%s, want +50ms", got)
	}
	e.clock.Advance(10 * time.Second) // every delayed job due, every lease expired
	cfg.MaxPromotions, cfg.Capacity = 2, 0
	res = e.pass(shard, cfg)
	if !res.More || res.Promoted != 2 || res.Swept != 2 || len(res.Released) != 0 || !res.CapacityReached {
		t.Fatalf("P = 2 with 3 due and 3 expired, capacity 0: %+v", res)
	}
	if !res.NextWake.Equal(res.Now) {
		t.Fatalf("with work left over, next wake %s, want the pass's now %s", res.NextWake, res.Now)
	}
	// Capacity reached alone (P no longer binds): now as well, although the
	// sets hold later times.
	cfg.MaxPromotions = 100
	res = e.pass(shard, cfg)
	if res.More || !res.CapacityReached || !res.NextWake.Equal(res.Now) {
		t.Fatalf("capacity 0, nothing cut short: want CapacityReached and next wake = now %s: %+v", res.Now, res)
	}
	e.requireConsistent()
}

// sameShard returns n tenant names on the shard of first, first included.
func sameShard(first string, n int) []string {
	out := []string{first}
	for i := 0; len(out) < n; i++ {
		if tn := fmt.Sprintf("%s%d", first, i); ShardOf(tn, 4) == ShardOf(first, 4) {
			out = append(out, tn)
		}
	}
	return out
}

// Promotion: due scheduled jobs join the backlog's tail; due retrying jobs
// join the head lane, in due order, ahead of the backlog.
func TestPassPromotion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.Burst, p.Concurrency, p.MinBackoffUS = 5, 100, 1_000_000 }))
	rs := e.enqueue("acme", item(`{"r":1}`), item(`{"r":2}`))
	for _, r := range e.passTenant("acme", 100*ms, -1) {
		job := e.claimAt(r)
		e.finish(job.ID, job.Gen, wire.AttemptOutcome{Kind: wire.FinishRetry, Status: 503}, FinishConfig{})
	}
	sched := item(`{"s":1}`)
	sched.Delay = 500 * ms
	more := e.enqueue("acme", item(`{"a":1}`), item(`{"b":1}`), sched)
	e.clock.Advance(1200 * ms)
	res := e.pass(e.store.keys.shardOf("acme"), PassConfig{Capacity: 0})
	if res.Promoted != 3 {
		t.Fatalf("promoted %d, want 3", res.Promoted)
	}
	head := e.rdb.ZRange(e.ctx, e.store.keys.tenantHead("acme"), 0, -1).Val()
	retried := []string{rs[0].ID, rs[1].ID}
	if e.job(rs[0].ID).Due.After(e.job(rs[1].ID).Due) {
		retried[0], retried[1] = retried[1], retried[0]
	}
	if !slices.Equal(head, retried) {
		t.Fatalf("head lane %v, want the retried jobs in due order %v", head, retried)
	}
	backlog := e.rdb.LRange(e.ctx, e.store.keys.tenantQueue("acme"), 0, -1).Val()
	if !slices.Equal(backlog, ids(more)) {
		t.Fatalf("backlog %v, want the queued jobs then the scheduled one %v", backlog, ids(more))
	}
	e.requireConsistent()
	if _, err := e.store.PutTenantPolicy(e.ctx, "acme", Overrides{Burst: ptr(1)}, AnyVersion); err != nil {
		t.Fatal(err) // burst 1: the slots follow the release order
	}
	var order []string
	for _, r := range e.passTenant("acme", time.Second, -1) {
		order = append(order, r.ID)
	}
	if want := append(retried, ids(more)...); !slices.Equal(order, want) {
		t.Fatalf("release order %v, want %v", order, want)
	}
	e.requireConsistent()
}

// One pass spaces the slots it hands out by ClaimSpacing across tenants, so
// the claims do not herd; slots only move later, and one pushed past now + D
// waits for the next pass.
func TestPassSpacesClaims(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst = 20_000, 1 }))
	tenants := make([]string, 0, 30)
	for i := range 30 {
		tn := fmt.Sprintf("t%02d", i)
		e.enqueue(tn, item(`{}`))
		if e.store.keys.shardOf(tn) == e.store.keys.shardOf("t00") {
			tenants = append(tenants, tn)
		}
	}
	cfg := PassConfig{Lead: 2 * ms, MinLead: -1, Grace: time.Second, Capacity: -1, ClaimSpacing: 250 * time.Microsecond}
	got := e.pass(e.store.keys.shardOf("t00"), cfg).Released
	if len(got) == 0 || len(got) > 9 {
		t.Fatalf("released %d of %d same-shard tenants, want 1…9 (slots within now + 2ms at 250µs apart)", len(got), len(tenants))
	}
	for i, r := range got {
		if want := time.Duration(i) * 250 * time.Microsecond; r.Slot.Sub(epoch) != want {
			t.Errorf("release %d at +%s, want +%s", i, r.Slot.Sub(epoch), want)
		}
	}
	waiting := 0
	for _, tn := range tenants {
		waiting += int(e.state(tn).Queued)
	}
	if waiting != len(tenants)-len(got) {
		t.Errorf("%d jobs still queued, want the %d not released", waiting, len(tenants)-len(got))
	}
}

// A delayed job of a tenant with nothing queued is promoted D ahead of its
// due time and released with its due time as its slot — it leaves at
// run_at, not a pass after it; the next wake is its due time − D. One of a
// tenant with queued jobs waits in the delayed set until its due time (no
// job of that tenant waits behind it), and the next wake is that due time.
func TestPassPromotesADelayedJobAheadOnlyForAnIdleTenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst = 1_000_000, 1 })) // T = 1 s
	const lead = 100 * ms
	due := func(d time.Duration) Item {
		it := item(`{"d":1}`)
		it.Delay = d
		return it
	}
	idle := e.enqueue("acme", due(300*ms))[0]
	at := e.job(idle.ID).RunAt
	shard := e.store.keys.shardOf("acme")
	res := e.pass(shard, PassConfig{Lead: lead, MinLead: 50 * ms, Grace: time.Second, Capacity: -1})
	if res.Promoted != 0 || len(res.Released) != 0 || !res.NextWake.Equal(at.Add(-lead)) {
		t.Fatalf("300 ms before due: promoted %d, released %d, next wake %s; want 0, 0, due − D = %s",
			res.Promoted, len(res.Released), res.NextWake, at.Add(-lead))
	}
	e.clock.Advance(250 * ms) // 50 ms before due: within D
	res = e.pass(shard, PassConfig{Lead: lead, MinLead: 50 * ms, Grace: time.Second, Capacity: -1})
	if res.Promoted != 1 || len(res.Released) != 1 || res.Released[0].ID != idle.ID {
		t.Fatalf("50 ms before due: promoted %d, released %+v; want the delayed job released ahead", res.Promoted, res.Released)
	}
	if r := res.Released[0]; !r.Slot.Equal(at) || !r.SendAt.Equal(at) {
		t.Fatalf("released with slot %s, send at %s; want its due time %s", r.Slot, r.SendAt, at)
	}
	if c := e.claim(idle.ID, res.Released[0].Gen); c.Outcome != ClaimEarly {
		t.Fatalf("claim 50 ms before due: %+v, want early", c)
	}
	e.requireConsistent()

	busy := e.enqueue("busy", item(`{"q":1}`), item(`{"q":2}`))
	delayed := e.enqueue("busy", due(60*ms))[0]
	bshard := e.store.keys.shardOf("busy")
	e.pass(bshard, PassConfig{Lead: lead, MinLead: 50 * ms, Grace: time.Second, Capacity: -1}) // the first queued job leaves
	if j := e.job(delayed.ID); j.State != StateScheduled {
		t.Fatalf("delayed job of a tenant with a queued job: %s before its due time, want scheduled", j.State)
	}
	e.clock.Advance(60 * ms)
	res = e.pass(bshard, PassConfig{Lead: lead, MinLead: 50 * ms, Grace: time.Second, Capacity: -1})
	if j := e.job(delayed.ID); j.State != StateQueued || res.Promoted != 1 {
		t.Fatalf("at its due time: %s, promoted %d; want queued behind %s, 1", j.State, res.Promoted, busy[1].ID)
	}
	e.requireConsistent()
}
