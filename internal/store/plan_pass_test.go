package store

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/internal/plan"
	"github.com/sluicehq/sluice/internal/redisscript"
	"github.com/sluicehq/sluice/internal/wire"
)

// TestPlanReleaseMatchesPass drives tenants through enqueues, passes,
// claims, finishes (successes and retries) and pauses, and before every
// pass that has nothing to promote or sweep, plans its release with
// package plan from what a read of Redis gives: the jobs the pass
// releases (slot, send time, generation) and what it then stores of every
// tenant it touched (state, digest, ready score, fast-finish tokens) must
// be plan's, bit for bit.
func TestPlanReleaseMatchesPass(t *testing.T) {
	t.Parallel()
	compared := map[string]int{}
	kinds := []string{"passes", "released", "saved", "minted", "fx", "held", "head lane", "capacity reached", "more",
		"blocked fair", "pre-claimed"}
	covered := func() bool {
		return !slices.ContainsFunc(kinds, func(k string) bool { return compared[k] == 0 })
	}
	// Some kinds are rare in a random walk (held: a tenant's released
	// tokens at its release cap): a few more rounds until each was compared.
	for round := 0; round < 4 && !covered() && !t.Failed(); round++ {
		rapid.Check(t, planWalk(t, compared))
	}
	t.Logf("compared: %v", compared)
	for _, what := range kinds {
		if compared[what] == 0 {
			t.Errorf("no compared pass had %s", what)
		}
	}
}

// planWalk is TestPlanReleaseMatchesPass's property, counting what it
// compared in compared.
func planWalk(t *testing.T, compared map[string]int) func(*rapid.T) {
	return func(rt *rapid.T) {
		e := newEnvShards(t, 1)
		base := params(func(p *Params) {
			p.RateUS = rapid.SampledFrom([]int64{1000, 20000, 100000}).Draw(rt, "rate_us")
			p.Burst = int64(rapid.IntRange(1, 4).Draw(rt, "burst"))
			p.Concurrency = int64(rapid.IntRange(1, 6).Draw(rt, "concurrency"))
			p.MinBackoffUS, p.MaxBackoffUS = 1000, 5000
		})
		e.seed(base)
		pols := map[string]Params{}
		var tenants []string
		for i := range rapid.IntRange(1, 5).Draw(rt, "tenants") {
			tn := fmt.Sprintf("pt%d", i)
			p := base
			var o Overrides
			if rapid.Bool().Draw(rt, tn+" own policy") {
				p.RateUS = rapid.SampledFrom([]int64{2000, 30000}).Draw(rt, tn+" rate_us")
				p.Burst = int64(rapid.IntRange(1, 3).Draw(rt, tn+" burst"))
				p.Concurrency = int64(rapid.IntRange(1, 4).Draw(rt, tn+" concurrency"))
				p.Weight = int64(rapid.IntRange(1, 5).Draw(rt, tn+" weight"))
				o = Overrides{RateUS: &p.RateUS, Burst: &p.Burst, Concurrency: &p.Concurrency, Weight: &p.Weight}
				if _, err := e.store.PutTenantPolicy(e.ctx, tn, o, 0); err != nil {
					rt.Fatalf("policy of %s: %v", tn, err)
				}
			}
			pols[tn] = p
			tenants = append(tenants, tn)
		}
		var out []wire.Release // released, not yet claimed
		var running []ClaimedJob
		for range rapid.IntRange(40, 160).Draw(rt, "steps") {
			switch rapid.IntRange(0, 6).Draw(rt, "op") {
			case 0, 1: // enqueue
				tn := rapid.SampledFrom(tenants).Draw(rt, "tenant")
				var items []Item
				for range rapid.IntRange(1, 4).Draw(rt, "jobs") {
					it := rapid.SampledFrom([]Item{item(`{"n":1}`), item(`{"n":1}`),
						{Type: wire.TypeHTTP, Body: []byte(`{"type":"http"}`)},
						{Type: wire.TypeTask, Body: []byte(`{"queue":"q","task_type":"t"}`)}}).Draw(rt, "item")
					it.Cost = int64(rapid.IntRange(1, int(min(pols[tn].Burst, 3))).Draw(rt, "cost"))
					items = append(items, it)
				}
				e.enqueue(tn, items...)
			case 2, 6: // a pass, planned first when it only releases
				cfg := PassConfig{
					Lead:         time.Duration(rapid.IntRange(5, 150).Draw(rt, "lead ms")) * ms,
					MinLead:      time.Duration(rapid.IntRange(-1, 100).Draw(rt, "min lead ms")) * ms,
					Grace:        time.Second,
					MaxTenants:   rapid.IntRange(1, 6).Draw(rt, "K"),
					Capacity:     rapid.SampledFrom([]int{-1, 1, 2, 3, 5, 10}).Draw(rt, "capacity"),
					ClaimSpacing: time.Duration(rapid.IntRange(-1, 3000).Draw(rt, "spacing µs")) * time.Microsecond,
					FairShare:    rapid.SampledFrom([]float64{0, 0.5, 1, 2.5}).Draw(rt, "λ"),
					Preclaim:     rapid.SampledFrom([]time.Duration{0, 0, 2 * ms, 6 * ms, 40 * ms}).Draw(rt, "ε"),
				}
				if cfg.MinLead > cfg.Lead {
					cfg.MinLead = cfg.Lead
				}
				if cfg.MinLead == 0 {
					cfg.MinLead = -1 // 0 is the default's
				}
				want, ok := planPass(rt, e, cfg, pols)
				res := e.pass(0, cfg)
				if ok {
					checkPlanned(rt, e, want, res)
					planCount(compared, want)
				}
				out = append(out, res.Released...)
			case 3: // claim what was released
				for _, r := range out {
					c, err := e.store.Claim(e.ctx, r.ID, r.Gen, time.Second)
					if err != nil {
						rt.Fatalf("claim %s: %v", r.ID, err)
					}
					if c.Outcome == ClaimOK {
						running = append(running, c.Job)
					}
				}
				out = nil
			case 4: // finish the running: successes, and a retry now and then
				for _, j := range running {
					o := wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200}
					if rapid.IntRange(0, 4).Draw(rt, "retry") == 0 {
						o = wire.AttemptOutcome{Kind: wire.FinishRetry, Status: 500, Error: "http_500"}
					}
					e.finish(j.ID, j.Gen, o, FinishConfig{})
				}
				running = nil
			case 5: // time passes; a pause now and then
				e.clock.Advance(time.Duration(rapid.IntRange(0, 40).Draw(rt, "advance ms")) * ms)
				if rapid.IntRange(0, 5).Draw(rt, "pause") == 0 {
					tn := rapid.SampledFrom(tenants).Draw(rt, "paused tenant")
					until := e.clock.Now().Add(time.Duration(rapid.IntRange(1, 60).Draw(rt, "pause ms")) * ms)
					if err := e.store.Pause(e.ctx, tn, until); err != nil {
						rt.Fatalf("pause %s: %v", tn, err)
					}
				}
			}
		}
	}
}

// planCount counts what a compared pass covered.
func planCount(n map[string]int, p planned) {
	n["passes"]++
	n["released"] += len(p.res.Released)
	for _, r := range p.res.Released {
		if r.Job.FromHead {
			n["head lane"]++
		}
		if r.Preclaimed {
			n["pre-claimed"]++
		}
	}
	for _, sv := range p.saves {
		switch {
		case sv.Unread:
			n["unread"]++
		case sv.RS == plan.RSHeld:
			n["held"]++
		case sv.Block == plan.Fair:
			n["blocked fair"]++
		}
		if !sv.Unread {
			n["saved"]++
		}
		if sv.F0 != 0 {
			n["minted"]++
		}
		if sv.HasFX {
			n["fx"]++
		}
	}
	if p.res.CapacityReached {
		n["capacity reached"]++
	}
	if p.res.More {
		n["more"]++
	}
}

// planned is plan's answer for a pass: its result and each touched
// tenant's save.
type planned struct {
	res    plan.Result
	saves  []plan.Saved
	loaded []string // each tenant's field s as read
	now    float64
}

// planPass reads what the shard's pass would read and plans its release;
// false when the pass would promote or sweep first (not planned here).
func planPass(rt *rapid.T, e *env, cfg PassConfig, pols map[string]Params) (planned, bool) {
	k := e.store.keys
	now := float64(e.clock.Now().UnixMicro())
	cfg = cfg.WithDefaults()
	horizon := now + float64(cfg.Lead.Microseconds())
	due := e.rdb.ZCount(e.ctx, k.delayed(0), "-inf", strconv.FormatFloat(horizon, 'f', 0, 64)).Val()
	lapsed := e.rdb.ZCount(e.ctx, k.leases(0), "-inf", strconv.FormatFloat(now, 'f', 0, 64)).Val()
	if due > 0 || lapsed > 0 || cfg.Capacity == 0 {
		return planned{}, false
	}
	want := cfg.MaxTenants
	if cfg.Capacity > 0 {
		want = min(want, cfg.Capacity+2)
	}
	ready := e.rdb.ZRangeByScoreWithScores(e.ctx, k.ready(0), &redis.ZRangeBy{
		Min: "-inf", Max: strconv.FormatFloat(horizon, 'f', 0, 64), Count: int64(want + 1)}).Val()
	ps := planSettings(cfg, now)
	if len(ready) > want {
		ps.Truncated, ready = true, ready[:want]
	}
	ps.VClock, _ = e.rdb.Get(e.ctx, k.vclock(0)).Float64()
	var cands []*plan.Candidate
	for _, z := range ready {
		tn := z.Member.(string)
		pol := planPolicy(pols[tn])
		l, ok, err := plan.Load(e.rdb.HGetAll(e.ctx, k.tenant(tn)).Val(), &pol, now)
		if err != nil || !ok {
			rt.Fatalf("load %s: ok %v, %v", tn, ok, err)
		}
		c := &plan.Candidate{Name: tn, Loaded: l, Policy: pol, Score: z.Score}
		var ids []string
		heads := e.rdb.ZRange(e.ctx, k.tenantHead(tn), 0, -1).Val()
		if l.State.Hlen > 0 {
			ids = append(ids, heads...)
		}
		ids = append(ids, e.rdb.LRange(e.ctx, k.tenantQueue(tn), 0, -1).Val()...)
		for i, id := range ids {
			key, _ := e.store.JobKey(id)
			v := e.rdb.HMGet(e.ctx, key, "state", "cost", "gen", "type", "nb", "bytes", "attempt", "first", "body", "pcl").Val()
			num := func(x any, or float64) float64 {
				f, err := strconv.ParseFloat(fmt.Sprint(x), 64)
				if x == nil || err != nil {
					return or
				}
				return f
			}
			c.Jobs = append(c.Jobs, plan.Job{ID: id, Queued: v[0] == "queued", FromHead: i < len(ids) && l.State.Hlen > 0 && i < len(heads),
				Cost: num(v[1], 1), Gen: num(v[2], 0), Type: fmt.Sprint(v[3]), NB: num(v[4], 0),
				Bytes: num(v[5], 0), Attempt: num(v[6], 0), First: num(v[7], 0), BodyLen: float64(len(fmt.Sprint(v[8]))), PCL: v[9] == "1"})
		}
		if !plan.Supported(c, now) {
			rt.Fatalf("tenant %s not supported by plan", tn)
		}
		cands = append(cands, c)
	}
	res := plan.Release(ps, cands)
	var saves []plan.Saved
	var loaded []string
	for _, c := range cands {
		saves = append(saves, plan.Save(ps, c))
		loaded = append(loaded, c.Loaded.Packed)
	}
	return planned{res: res, saves: saves, loaded: loaded, now: now}, true
}

// checkPlanned compares a pass's result and what it stored with plan's.
func checkPlanned(rt *rapid.T, e *env, want planned, got PassResult) {
	k := e.store.keys
	var rel []wire.Release
	for _, r := range want.res.Released {
		w := wire.Release{ID: r.Job.ID, Tenant: r.Tenant, Cost: int64(r.Job.Cost), Gen: int64(r.Job.Gen),
			Slot: redisscript.MicrosTime(int64(r.Slot)), SendAt: redisscript.MicrosTime(int64(r.SendAt))}
		if r.Preclaimed {
			w.Claimed = &wire.Claimed{Attempt: int64(r.Job.Attempt)}
		}
		rel = append(rel, w)
	}
	slices.SortStableFunc(rel, func(a, b wire.Release) int { return cmp.Or(a.Slot.Compare(b.Slot), cmp.Compare(a.ID, b.ID)) })
	show := func(rs []wire.Release) (out []string) {
		for _, r := range rs {
			pre := "released"
			if r.Claimed != nil {
				pre = fmt.Sprintf("pre-claimed, attempt %d", r.Claimed.Attempt)
			}
			out = append(out, fmt.Sprintf("%s/%s c%d g%d slot %d send %d %s", r.Tenant, r.ID, r.Cost, r.Gen,
				r.Slot.UnixMicro(), r.SendAt.UnixMicro(), pre))
		}
		return out
	}
	gotRel, wantRel := show(got.Released), show(rel)
	if !slices.Equal(gotRel, wantRel) {
		rt.Fatalf("released:\n pass %q\n plan %q", gotRel, wantRel)
	}
	if got.More != want.res.More || got.CapacityReached != want.res.CapacityReached || got.Tenants != want.res.Visited {
		rt.Fatalf("pass more %v, capacity reached %v, visited %d; plan %v, %v, %d", got.More, got.CapacityReached,
			got.Tenants, want.res.More, want.res.CapacityReached, want.res.Visited)
	}
	if r, _ := e.rdb.HGet(e.ctx, k.fair(0), "r").Float64(); r != want.res.WaitWeight {
		rt.Fatalf("fair r %v, plan %v", r, want.res.WaitWeight)
	}
	if vc, _ := e.rdb.Get(e.ctx, k.vclock(0)).Float64(); vc != want.res.VClock {
		rt.Fatalf("vclock %v, plan %v", vc, want.res.VClock)
	}
	for i, sv := range want.saves {
		h := e.rdb.HGetAll(e.ctx, k.tenant(sv.Name)).Val()
		if sv.Unread {
			if h["s"] != want.loaded[i] {
				rt.Fatalf("%s: read, not visited, but its state changed", sv.Name)
			}
			continue
		}
		if h["s"] != string(sv.State.Encode()) {
			st, _ := plan.Decode([]byte(h["s"]))
			rt.Fatalf("%s: state\n pass %+v\n plan %+v", sv.Name, st, sv.State)
		}
		if h["rs"] != sv.RS {
			rt.Fatalf("%s: rs %q, plan %q", sv.Name, h["rs"], sv.RS)
		}
		score, err := e.rdb.ZScore(e.ctx, k.ready(0), sv.Name).Result()
		if inReady := err == nil; inReady != sv.Ready || (inReady && score != sv.Score) {
			rt.Fatalf("%s: in ready %v at %v; plan %v at %v", sv.Name, inReady, score, sv.Ready, sv.Score)
		}
		f0, _ := strconv.ParseFloat(h["f0"], 64)
		if f0 != sv.F0 {
			rt.Fatalf("%s: f0 %v, plan %v", sv.Name, f0, sv.F0)
		}
		if fx, _ := strconv.ParseFloat(h["fx"], 64); sv.HasFX && fx != sv.FX {
			rt.Fatalf("%s: fx %v, plan %v", sv.Name, fx, sv.FX)
		}
	}
}
