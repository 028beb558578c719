package store

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/wire"
)

// TestPlannedPassMatchesScript drives two stores on one Redis through the
// same random walk — enqueues, passes, claims, finishes (successes and
// retries), pauses, time — one deciding its passes with pass.lua, the other
// with internal/plan and plan_apply.lua (PlannerGo, which falls back to
// pass.lua for what it does not plan), with the same job ids and retry
// jitter. After every step their keys must hold the same values, and
// every pass must give the same result, hand-off rows and pre-claimed
// jobs included.
func TestPlannedPassMatchesScript(t *testing.T) {
	t.Parallel()
	planned, passes := 0, 0
	rapid.Check(t, func(rt *rapid.T) {
		lua, gop := newPlannerPair(t)
		both := []*env{lua, gop}
		defer dropKeys(rt, both...) // the dumps scan the whole keyspace: keep it small
		base := params(func(p *Params) {
			p.RateUS = rapid.SampledFrom([]int64{1000, 20000, 100000}).Draw(rt, "rate_us")
			p.Burst = int64(rapid.IntRange(1, 4).Draw(rt, "burst"))
			p.Concurrency = int64(rapid.IntRange(1, 6).Draw(rt, "concurrency"))
			p.MinBackoffUS, p.MaxBackoffUS = 1000, 5000
		})
		var tenants []string
		for _, e := range both {
			e.seed(base)
		}
		for i := range rapid.IntRange(1, 5).Draw(rt, "tenants") {
			tn := fmt.Sprintf("pa%d", i)
			tenants = append(tenants, tn)
			if rapid.Bool().Draw(rt, tn+" own policy") {
				p := base
				p.RateUS = rapid.SampledFrom([]int64{2000, 30000}).Draw(rt, tn+" rate_us")
				p.Burst = int64(rapid.IntRange(1, 3).Draw(rt, tn+" burst"))
				p.Weight = int64(rapid.IntRange(1, 5).Draw(rt, tn+" weight"))
				o := Overrides{RateUS: &p.RateUS, Burst: &p.Burst, Weight: &p.Weight}
				for _, e := range both {
					if _, err := e.store.PutTenantPolicy(e.ctx, tn, o, 0); err != nil {
						rt.Fatalf("policy of %s: %v", tn, err)
					}
				}
			}
		}
		out := make([][]wire.Release, 2)   // released, not yet claimed, each store's
		running := make([][]ClaimedJob, 2) // claimed or pre-claimed
		for range rapid.IntRange(20, 80).Draw(rt, "steps") {
			switch rapid.IntRange(0, 6).Draw(rt, "op") {
			case 0, 1:
				tn := rapid.SampledFrom(tenants).Draw(rt, "tenant")
				var items []Item
				for range rapid.IntRange(1, 4).Draw(rt, "jobs") {
					it := rapid.SampledFrom([]Item{item(`{"n":1}`), {Type: wire.TypeHTTP, Body: []byte(`{"type":"http"}`)},
						{Type: wire.TypeTask, Body: []byte(`{"queue":"q","task_type":"t"}`)}}).Draw(rt, "item")
					it.Cost = int64(rapid.IntRange(1, 2).Draw(rt, "cost"))
					items = append(items, it)
				}
				lua.enqueue(tn, items...)
				gop.enqueue(tn, items...)
			case 2, 6:
				cfg := PassConfig{
					Lead:          time.Duration(rapid.IntRange(5, 150).Draw(rt, "lead ms")) * ms,
					MinLead:       -1,
					Grace:         time.Second,
					MaxPromotions: 1000,
					MaxTenants:    rapid.IntRange(1, 6).Draw(rt, "K"),
					Capacity:      rapid.SampledFrom([]int{-1, 0, 1, 2, 5}).Draw(rt, "capacity"),
					ClaimSpacing:  time.Duration(rapid.IntRange(-1, 3000).Draw(rt, "spacing µs")) * time.Microsecond,
					FairShare:     rapid.SampledFrom([]float64{0, 0.5, 1, 2.5}).Draw(rt, "λ"),
					Preclaim:      rapid.SampledFrom([]time.Duration{0, 6 * ms, 40 * ms}).Draw(rt, "ε"),
				}
				ra, rb := lua.pass(0, cfg), gop.pass(0, cfg)
				passes++
				if rb.Planned {
					planned++
				}
				ga, gb := passText(ra), passText(rb)
				if ga != gb {
					rt.Fatalf("pass:\n lua %s\n go  %s", ga, gb)
				}
				for i, r := range [][]wire.Release{ra.Released, rb.Released} {
					for _, x := range r {
						if job, ok := PreClaimed(wire.Payload{ID: x.ID, Gen: x.Gen, Claimed: x.Claimed}); ok {
							running[i] = append(running[i], job)
						} else {
							out[i] = append(out[i], x)
						}
					}
				}
			case 3:
				for i, e := range both {
					for _, r := range out[i] {
						c, err := e.store.Claim(e.ctx, r.ID, r.Gen, time.Second)
						if err != nil {
							rt.Fatalf("claim %s: %v", r.ID, err)
						}
						if c.Outcome == ClaimOK {
							running[i] = append(running[i], c.Job)
						}
					}
					out[i] = nil
				}
			case 4:
				var kinds []bool
				for range running[0] {
					kinds = append(kinds, rapid.IntRange(0, 4).Draw(rt, "retry") == 0)
				}
				for i, e := range both {
					for j, job := range running[i] {
						o := wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200}
						if j < len(kinds) && kinds[j] {
							o = wire.AttemptOutcome{Kind: wire.FinishRetry, Status: 500, Error: "http_500"}
						}
						e.finish(job.ID, job.Gen, o, FinishConfig{})
					}
					running[i] = nil
				}
			case 5:
				lua.clock.Advance(time.Duration(rapid.IntRange(0, 40).Draw(rt, "advance ms")) * ms)
				if rapid.IntRange(0, 5).Draw(rt, "pause") == 0 {
					tn := rapid.SampledFrom(tenants).Draw(rt, "paused tenant")
					until := lua.clock.Now().Add(time.Duration(rapid.IntRange(1, 60).Draw(rt, "pause ms")) * ms)
					for _, e := range both {
						if err := e.store.Pause(e.ctx, tn, until); err != nil {
							rt.Fatalf("pause %s: %v", tn, err)
						}
					}
				}
			}
			a, b := dumpKeys(rt, lua), dumpKeys(rt, gop)
			// Keys expire in Redis's real time, and the two stores wrote
			// them a moment apart: one with an expiry may be gone from
			// one side only.
			for _, k := range slices.Sorted(maps.Keys(a)) {
				x, y := a[k], b[k]
				if x != y && !(y == "" && strings.HasSuffix(x, " (expires)")) {
					rt.Fatalf("key %s:\n lua %q\n go  %q", k, x, y)
				}
			}
			for _, k := range slices.Sorted(maps.Keys(b)) {
				if _, ok := a[k]; !ok && !strings.HasSuffix(b[k], " (expires)") {
					rt.Fatalf("key %s only with go: %q", k, b[k])
				}
			}
		}
	})
	if planned == 0 {
		t.Fatal("no pass was planned")
	}
	t.Logf("%d of %d passes planned", planned, passes)
}

// newPlannerPair returns two envs on one Redis and one fake clock, with
// deterministic retry jitter: the first's Store runs PlannerLua, the
// second's PlannerGo.
func newPlannerPair(t *testing.T) (lua, gop *env) {
	lua = newEnvShards(t, 1)
	rdb, prefix := redistest.New(t)
	store, err := NewStore(rdb, Config{Prefix: prefix, Shards: 1, Clock: lua.clock.Now, Planner: PlannerGo})
	if err != nil {
		t.Fatal(err)
	}
	gop = &env{t: t, ctx: lua.ctx, rdb: rdb, prefix: prefix, store: store, clock: lua.clock}
	for _, e := range []*env{lua, gop} {
		var n atomic.Int64
		e.store.seed = func() uint64 { return 42 } // a planned pass draws none
		e.store.jobID = func(shard int, _ time.Time) (string, error) {
			return fmt.Sprintf("j%d_%026d", shard, n.Add(1)), nil // the same ids in both
		}
	}
	return lua, gop
}

// passText is a pass's result as text.
func passText(r PassResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "now %d more %v cap %v wake %d promoted %d swept %d tenants %d",
		r.Now.UnixMicro(), r.More, r.CapacityReached, r.NextWake.UnixMicro(), r.Promoted, r.Swept, r.Tenants)
	for _, x := range r.Released {
		fmt.Fprintf(&b, "\n  %s %s %s c%d g%d slot %d send %d timeout %s %s/%s", x.ID, x.Tenant, x.Type, x.Cost, x.Gen,
			x.Slot.UnixMicro(), x.SendAt.UnixMicro(), x.Timeout, x.Queue, x.TaskType)
		if c := x.Claimed; c != nil {
			v := *c
			v.Signing = nil
			fmt.Fprintf(&b, " pre-claimed %+v", v)
			if c.Signing != nil {
				fmt.Fprintf(&b, " signing %+v", *c.Signing)
			}
		}
	}
	return b.String()
}

// dumpKeys is every key of e's prefix and its value as text, the prefix
// left out; a key with an expiry says so (not its time: the two stores
// write it a moment apart).
func dumpKeys(rt *rapid.T, e *env) map[string]string {
	keys, err := redistest.Keys(e.ctx, e.rdb, e.prefix+":*")
	if err != nil {
		rt.Fatal(err)
	}
	fix := func(s string) string { return strings.ReplaceAll(s, e.prefix, "P") }
	types := make([]*redis.StatusCmd, len(keys))
	ttls := make([]*redis.DurationCmd, len(keys))
	if _, err := e.rdb.Pipelined(e.ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			types[i], ttls[i] = p.Type(e.ctx, k), p.PTTL(e.ctx, k)
		}
		return nil
	}); err != nil {
		rt.Fatal(err)
	}
	vals := make([]redis.Cmder, len(keys))
	if _, err := e.rdb.Pipelined(e.ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			switch types[i].Val() {
			case "string":
				vals[i] = p.Get(e.ctx, k)
			case "hash":
				vals[i] = p.HGetAll(e.ctx, k)
			case "list":
				vals[i] = p.LRange(e.ctx, k, 0, -1)
			case "zset":
				vals[i] = p.ZRangeWithScores(e.ctx, k, 0, -1)
			case "set":
				vals[i] = p.SMembers(e.ctx, k)
			}
		}
		return nil
	}); err != nil && err != redis.Nil {
		rt.Fatal(err)
	}
	out := map[string]string{}
	for i, k := range keys {
		if types[i].Val() == "none" { // expired since the scan
			continue
		}
		var v []string
		switch c := vals[i].(type) {
		case *redis.StringCmd:
			v = []string{c.Val()}
		case *redis.MapStringStringCmd:
			for f, x := range c.Val() {
				v = append(v, f+"="+x)
			}
			sort.Strings(v)
		case *redis.StringSliceCmd:
			v = c.Val()
			if types[i].Val() == "set" {
				sort.Strings(v)
			}
		case *redis.ZSliceCmd:
			for _, z := range c.Val() {
				v = append(v, fmt.Sprintf("%s@%v", z.Member, z.Score))
			}
		}
		text := types[i].Val() + ": " + strings.Join(v, " ")
		if ttls[i].Val() > 0 {
			text += " (expires)"
		}
		out[fix(k)] = fix(text)
	}
	return out
}

// dropKeys deletes every key of the envs' prefixes.
func dropKeys(rt *rapid.T, envs ...*env) {
	for _, e := range envs {
		keys, err := redistest.Keys(e.ctx, e.rdb, e.prefix+":*")
		if err != nil {
			rt.Fatal(err)
		}
		for _, k := range keys {
			e.rdb.Del(e.ctx, k)
		}
	}
}
