package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/plan"
	"github.com/sluicehq/sluice/internal/redisscript"
	"github.com/sluicehq/sluice/internal/wire"
)

// Planners (Config.Planner): where a pass's release is decided.
const (
	PlannerLua = "lua" // pass.lua decides in Redis
	PlannerGo  = "go"  // the dispatcher reads, decides with internal/plan and writes with plan_apply.lua
)

// planPass runs shard's pass as plan-and-apply (docs/design.md "Where the
// decisions run"): plain reads of what the pass would read, the release
// decided by internal/plan, plan_apply.lua writing it. ok is false, with
// nothing written, when the pass needs what only pass.lua does — delayed
// jobs due by now + D, leases past now, tenant index entries due, an
// aggregates build in progress, a tenant holding lane jobs or deferred by
// a circuit, a dead set to trim, a policy the plan cannot read, a backlog
// longer than read, or no capacity — and the caller runs pass.lua.
func (s *Store) planPass(ctx context.Context, shard int, cfg PassConfig) (res PassResult, ok bool, err error) {
	if cfg.Capacity == 0 {
		return res, false, nil
	}
	rd, ok, err := s.planRead(ctx, shard, cfg)
	if err != nil || !ok {
		return res, false, err
	}
	before := make([]plan.Tenant, len(rd.cands))
	for i, c := range rd.cands {
		before[i] = c.Loaded.State
	}
	out := plan.Release(rd.ps, rd.cands)
	saves := make([]plan.Saved, len(rd.cands))
	for i, c := range rd.cands {
		saves[i] = plan.Save(rd.ps, c)
		out.Incomplete = out.Incomplete || saves[i].Incomplete
	}
	if out.Incomplete {
		return res, false, nil
	}
	args := s.applyArgs(shard, cfg, rd, out, saves, before)
	d, err := s.runKeys(ctx, scriptPlanApply, []string{s.keys.ready(shard)}, args...)
	if err != nil {
		return res, false, fmt.Errorf("pass on shard %d: apply the plan: %w", shard, err)
	}
	skipped := map[string]bool{}
	for i, l := 0, d.list(2); i < l.Len(); i++ {
		skipped[l.str(i)] = true
	}
	signs := map[string]*wire.Signing{}
	for i, l := 0, d.list(3); i < l.Len(); i++ {
		row := l.list(i)
		signs[row.str(0)] = signingWire(decodeSecretSet(row, 1))
	}
	res = PassResult{Now: redisscript.MicrosTime(int64(rd.ps.Now)), More: out.More, CapacityReached: out.CapacityReached,
		NextWake: redisscript.MicrosTime(d.int(1)), Tenants: out.Visited, Planned: true}
	res.skipped = len(skipped) > 0
	for _, r := range out.Released {
		if skipped[r.Tenant] {
			continue
		}
		res.Released = append(res.Released, rd.release(r, signs))
	}
	if err := d.Err(); err != nil {
		return PassResult{}, false, fmt.Errorf("pass on shard %d: apply the plan: %w", shard, err)
	}
	sortReleases(res.Released)
	return res, true, nil
}

// planReading is what planRead gives: the plan's settings and candidates,
// and what the apply compares and the reply needs of what was read.
type planReading struct {
	ps     plan.Pass
	cands  []*plan.Candidate
	raw    []map[string]string          // each candidate's tenant hash as read
	jobs   map[string]map[string]string // job id → its record's fields read
	fairR  float64                      // field r of the shard's fair hash
	byName map[string]*plan.Candidate
}

// planRecordFields are the record fields the plan and the reply read.
var planRecordFields = []string{"state", "cost", "gen", "type", "nb", "bytes", "attempt", "first", "body", "pcl",
	"created", "ups"}

// planRead reads what shard's pass would read, in four pipelined rounds
// of plain commands: now (Redis TIME) and the shard's sets; the ready
// tenants' hashes and policies; their backlogs' first entries, as many as
// each may release and one; those entries' records. ok is false when the
// pass needs pass.lua (planPass says when).
func (s *Store) planRead(ctx context.Context, shard int, cfg PassConfig) (rd planReading, ok bool, err error) {
	k := s.keys
	want := cfg.MaxTenants
	if cfg.Capacity > 0 {
		want = min(want, cfg.Capacity+2)
	}
	var (
		now                           *redis.TimeCmd
		delayed, leases, ready, index *redis.ZSliceCmd
		vclock, fairR                 *redis.StringCmd
		pol                           *redis.SliceCmd
	)
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		if s.clock == nil {
			now = p.Time(ctx)
		}
		delayed = p.ZRangeWithScores(ctx, k.delayed(shard), 0, 0)
		leases = p.ZRangeWithScores(ctx, k.leases(shard), 0, 0)
		ready = p.ZRangeWithScores(ctx, k.ready(shard), 0, int64(want))
		index = p.ZRangeWithScores(ctx, k.tenantIndex(shard), 0, 0)
		vclock = p.Get(ctx, k.vclock(shard))
		fairR = p.HGet(ctx, k.fair(shard), "r")
		pol = p.HMGet(ctx, k.policy(shard), "#ab", "#v", "*")
		return nil
	})
	if err != nil && err != redis.Nil {
		return rd, false, fmt.Errorf("pass on shard %d: read: %w", shard, err)
	}
	var t time.Time
	if s.clock != nil {
		t = s.clock()
	} else {
		t = now.Val()
	}
	nowUS := float64(t.UnixMicro())
	horizon := nowUS + float64(cfg.Lead.Microseconds())
	due := func(z []redis.Z, by float64) bool { return len(z) > 0 && z[0].Score <= by }
	if due(delayed.Val(), horizon) || due(leases.Val(), nowUS) || due(index.Val(), nowUS) || pol.Val()[0] != nil {
		return rd, false, nil
	}
	pols := s.plans.policies(shard, pol.Val()[1], pol.Val()[2])
	if pols == nil {
		return rd, false, nil
	}
	rd.ps = planSettings(cfg, nowUS)
	rd.ps.VClock, _ = strconv.ParseFloat(vclock.Val(), 64)
	rd.fairR, _ = strconv.ParseFloat(fairR.Val(), 64)
	var names []string
	scores := map[string]float64{}
	rd.byName = map[string]*plan.Candidate{}
	for _, z := range ready.Val() {
		if z.Score > horizon {
			break
		}
		names = append(names, z.Member.(string))
		scores[z.Member.(string)] = z.Score
	}
	if len(names) > want {
		rd.ps.Truncated, names = true, names[:want]
	}
	if len(names) == 0 {
		return rd, false, nil
	}

	// The tenants and the policies not known at this epoch.
	hashes := make([]*redis.MapStringStringCmd, len(names))
	overrides := make([]*redis.StringCmd, len(names))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, tn := range names {
			hashes[i] = p.HGetAll(ctx, k.tenant(tn))
			if _, known := pols.get(tn); !known {
				overrides[i] = p.HGet(ctx, k.policy(shard), tn)
			}
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return rd, false, fmt.Errorf("pass on shard %d: read tenants: %w", shard, err)
	}
	depth := make([]int64, len(names))
	for i, tn := range names {
		pol, _ := pols.get(tn)
		if overrides[i] != nil {
			var raw any
			if v, err := overrides[i].Result(); err == nil {
				raw = v
			}
			params, err := policyLayer(pols.defaults, raw)
			if err != nil {
				return rd, false, nil
			}
			pol = planPolicy(params)
			pols.put(tn, pol)
		}
		h := hashes[i].Val()
		l, ok, err := plan.Load(h, &pol, nowUS)
		if err != nil || !ok || !l.Stored {
			return rd, false, nil
		}
		c := &plan.Candidate{Name: tn, Loaded: l, Policy: pol, Score: scores[tn]}
		st := &l.State
		// A dead set to look at (trim_dead: plan.Save takes it as empty) and
		// an idle tenant (expire_tenant) are pass.lua's.
		if !plan.Supported(c, nowUS) || (st.DZ == 0 && st.Running > 0) || (st.Live == 0 && st.Running == 0) {
			return rd, false, nil
		}
		// At most its concurrency's room can go, and the pass's capacity;
		// one more entry is its next head.
		most := pol.Concurrency
		if rd.ps.Lambda > 0 {
			most = min(most, plan.FairCap(&pol, rd.ps.Lambda))
		}
		room := max(0, most-st.Running-st.Released)
		if rd.ps.Capacity > 0 {
			room = min(room, float64(rd.ps.Capacity))
		}
		depth[i] = int64(min(room, 64))
		if st.C1 != 1 && depth[i] > 0 {
			depth[i]++ // the next head's cost, for its reschedule
		}
		rd.cands = append(rd.cands, c)
		rd.raw = append(rd.raw, h)
		rd.byName[tn] = c
	}

	// Their backlogs' first entries.
	heads := make([]*redis.StringSliceCmd, len(names))
	lists := make([]*redis.StringSliceCmd, len(names))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range rd.cands {
			if depth[i] == 0 {
				continue // it releases nothing: its reschedule reads no head (blocked)
			}
			if c.Loaded.State.Hlen > 0 {
				heads[i] = p.ZRange(ctx, k.tenantHead(c.Name), 0, depth[i]-1)
			}
			lists[i] = p.LRange(ctx, k.tenantQueue(c.Name), 0, depth[i]-1)
		}
		return nil
	})
	if err != nil {
		return rd, false, fmt.Errorf("pass on shard %d: read backlogs: %w", shard, err)
	}
	var ids []string
	for i, c := range rd.cands {
		var head, list []string
		if heads[i] != nil {
			head = heads[i].Val()
		}
		if lists[i] != nil {
			list = lists[i].Val()
		}
		c.Cut = int64(len(head)) == depth[i] || int64(len(list)) == depth[i]
		for j, id := range append(head, list...) {
			c.Jobs = append(c.Jobs, plan.Job{ID: id, FromHead: j < len(head)})
			ids = append(ids, id)
		}
	}

	// Their records.
	recs := make([]*redis.SliceCmd, len(ids))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			key, err := k.job(id)
			if err != nil {
				return err
			}
			recs[i] = p.HMGet(ctx, key, planRecordFields...)
		}
		return nil
	})
	if err != nil {
		return rd, false, fmt.Errorf("pass on shard %d: read records: %w", shard, err)
	}
	rd.jobs = make(map[string]map[string]string, len(ids))
	for i, id := range ids {
		f := map[string]string{}
		for j, v := range recs[i].Val() {
			if s, ok := v.(string); ok {
				f[planRecordFields[j]] = s
			}
		}
		rd.jobs[id] = f
	}
	for _, c := range rd.cands {
		for j := range c.Jobs {
			jb := &c.Jobs[j]
			f := rd.jobs[jb.ID]
			num := func(name string, or float64) float64 {
				v, err := strconv.ParseFloat(f[name], 64)
				if err != nil {
					return or
				}
				return v
			}
			jb.Queued, jb.Cost, jb.Gen, jb.Type, jb.NB = f["state"] == "queued", num("cost", 1), num("gen", 0), f["type"], num("nb", 0)
			jb.Bytes, jb.Attempt, jb.First = num("bytes", 0), num("attempt", 0), num("first", 0)
			jb.BodyLen, jb.PCL = float64(len(f["body"])), f["pcl"] == "1"
		}
	}
	return rd, true, nil
}

// planSettings is the plan's view of a pass's settings at now (µs), as
// pass.lua takes them from its arguments (PassGranted's).
func planSettings(cfg PassConfig, now float64) plan.Pass {
	return plan.Pass{Now: now, Lead: float64(cfg.Lead.Microseconds()), MinLead: float64(max(cfg.MinLead, 0).Microseconds()),
		Spacing: float64(max(cfg.ClaimSpacing, 0).Microseconds()), Capacity: max(cfg.Capacity, -1),
		Lambda: float64(fairArg(cfg.FairShare)), Preclaim: float64(preclaimArg(cfg.Preclaim))}
}

// policyLayer is base with a stored policy entry's overrides applied (nil:
// none), as lib.lua merges them; an entry the plan cannot read is an
// error, and its pass is left to pass.lua.
func policyLayer(base Params, raw any) (Params, error) {
	text, ok := raw.(string)
	if !ok {
		return base, nil
	}
	var o Overrides
	if err := json.Unmarshal([]byte(text), &o); err != nil {
		return base, err
	}
	return o.Apply(base), nil
}

// planPolicy is what internal/plan reads of a tenant's params.
func planPolicy(p Params) plan.Policy {
	return plan.Policy{RateUS: float64(p.RateUS), Burst: float64(p.Burst), Concurrency: float64(p.Concurrency),
		Weight: float64(p.Weight), Adaptive: p.Adaptive == 1, Pacing: p.Pacing == 1, AdmitBurst: float64(p.AdmitBurst),
		TimeoutUS: float64(p.TimeoutUS)}
}

// applyArgs is plan_apply.lua's ARGV for the plan.
func (s *Store) applyArgs(shard int, cfg PassConfig, rd planReading, out plan.Result, saves []plan.Saved,
	before []plan.Tenant) []any {
	num := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	flag := func(b bool) string {
		if b {
			return "1"
		}
		return "0"
	}
	vclock := ""
	if out.VClock > rd.ps.VClock {
		vclock = num(out.VClock)
	}
	fairR := ""
	if out.WaitWeight != rd.fairR {
		fairR = num(out.WaitWeight)
	}
	args := []any{s.keys.base(shard), num(rd.ps.Now), num(rd.ps.Lead), num(float64(cfg.Grace.Microseconds())),
		vclock, fairR, flag(out.More), flag(out.CapacityReached)}
	jobs := map[string][]plan.Released{}
	for _, r := range out.Released {
		jobs[r.Tenant] = append(jobs[r.Tenant], r)
	}
	n := 0
	var body []any
	for i, sv := range saves {
		if sv.Unread {
			continue
		}
		n++
		c, h, b := rd.cands[i], rd.raw[i], before[i]
		ns, nrs, nf0, fx := "", "", "", ""
		if packed := string(sv.State.Encode()); packed != h["s"] {
			ns = packed
		}
		if sv.RS != c.Loaded.RS {
			nrs = sv.RS
		}
		if sv.F0 != c.Loaded.F0 || c.Loaded.FF != c.Loaded.F0 {
			nf0 = num(sv.F0)
			if sv.HasFX {
				fx = num(sv.FX)
			}
		}
		score := ""
		if sv.Ready {
			score = num(sv.Score)
		}
		top := ""
		if sv.State.Live != b.Live {
			top = num(sv.State.Live)
		}
		takenHead, takenList := c.Taken()
		rel := jobs[c.Name]
		body = append(body, c.Name, h["s"], h["rs"], h["f0"], h["ff"], ns, nrs, nf0, fx, score,
			num(sv.State.FW-b.FW), num(sv.State.Running-b.Running), top, flag(b.Live > 0),
			takenHead, takenList, len(rel))
		for _, r := range rel {
			kind, attempt, first, webhook, deadline := "r", "0", "0", "0", r.SendAt+float64(cfg.Grace.Microseconds())
			if r.Preclaimed {
				kind, attempt, first = "p", num(r.Job.Attempt), num(r.Job.First)
				webhook = flag(r.Job.Type == wire.TypeWebhook)
				deadline = r.SendAt + c.Policy.TimeoutUS + float64(cfg.Grace.Microseconds())
			}
			body = append(body, r.Job.ID, kind, num(r.Job.Gen), num(r.Slot), num(deadline), attempt, first, webhook)
		}
	}
	args = append(args, n)
	return append(args, body...)
}

// release is the hand-off row of planned release r.
func (rd planReading) release(r plan.Released, signs map[string]*wire.Signing) wire.Release {
	c := rd.byName[r.Tenant]
	out := wire.Release{ID: r.Job.ID, Tenant: r.Tenant, Type: r.Job.Type, Cost: int64(r.Job.Cost), Gen: int64(r.Job.Gen),
		Slot: redisscript.MicrosTime(int64(r.Slot)), Timeout: redisscript.Micros(int64(c.Policy.TimeoutUS)),
		SendAt: redisscript.MicrosTime(int64(r.SendAt))}
	f := rd.jobs[r.Job.ID]
	if out.Type == wire.TypeTask {
		out.Queue, out.TaskType = taskRoute(f["body"])
	}
	if r.Preclaimed {
		created, _ := strconv.ParseInt(f["created"], 10, 64)
		out.Claimed = &wire.Claimed{Tenant: r.Tenant, Type: out.Type, Attempt: int64(r.Job.Attempt), Body: f["body"],
			TimeoutUS: out.Timeout.Microseconds(), SlotUS: out.Slot.UnixMicro(), CreatedUS: created, Cost: out.Cost,
			Upstreams: splitUpstreams(f["ups"])}
		if out.Type == wire.TypeWebhook {
			out.Claimed.Signing = signs[r.Tenant]
		}
	}
	return out
}

// taskRoute is a task job's asynq queue and task type from its body
// (pass.lua task_route): "" for what is not a string.
func taskRoute(body string) (queue, taskType string) {
	var b map[string]any
	if json.Unmarshal([]byte(body), &b) != nil {
		return "", ""
	}
	q, _ := b["queue"].(string)
	tt, _ := b["task_type"].(string)
	return q, tt
}

// planPolicies remembers, per shard, the tenants' policies as the plan
// reads them for one policy epoch (field #v of <p>:{sN}:policy, which
// every policy write moves: lib.lua load_policy keeps its texts the same
// way), so a pass reads a tenant's overrides once per epoch. A hash
// without an epoch is read every pass. Safe for concurrent use.
type planPolicies struct {
	mu     sync.Mutex
	shards map[int]*epochPolicies
}

// epochPolicies are one shard's policies at one epoch.
type epochPolicies struct {
	mu       sync.Mutex
	epoch    string
	defaults Params
	tenants  map[string]plan.Policy
}

// planPoliciesMax bounds a shard's remembered policies (~150 bytes each):
// past it they are forgotten and read again. A miss costs one HGET in the
// pass's second read, so the bound is small, as lib.lua's
// POLICY_TEXTS_MAX is.
const planPoliciesMax = 4096

// policies returns shard's policies at epoch (nil when the defaults'
// text cannot be read): the remembered ones while the epoch stands.
func (pp *planPolicies) policies(shard int, epoch, defaults any) *epochPolicies {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.shards == nil {
		pp.shards = map[int]*epochPolicies{}
	}
	v, _ := epoch.(string)
	if e := pp.shards[shard]; e != nil && v != "" && e.epoch == v && len(e.tenants) < planPoliciesMax {
		return e
	}
	d, err := policyLayer(DefaultParams(), defaults)
	if err != nil {
		return nil
	}
	e := &epochPolicies{epoch: v, defaults: d, tenants: map[string]plan.Policy{}}
	if v != "" {
		pp.shards[shard] = e
	}
	return e
}

func (e *epochPolicies) get(tn string) (plan.Policy, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, ok := e.tenants[tn]
	return p, ok
}

func (e *epochPolicies) put(tn string, p plan.Policy) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.tenants[tn] = p
}
