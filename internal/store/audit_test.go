package store

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// auditKeyspace checks every key under prefix against the data model
// (docs/design.md §2, §3) and returns the problems found, one line each:
//
//   - no orphans: every key either has a TTL (terminal job records — dead
//     ones too, with their dead set —, their idempotency keys, idle tenant
//     hashes) or is reachable — a live job from
//     the one set its state says (backlog or head lane, delayed, leases, dead),
//     a tenant hash that holds jobs or is disabled/paused, the tenant's lists
//     from its hash, an idempotency key from its live job;
//   - every member of a set or list is a record in the matching state, and
//     every key carries the hash tag of its tenant's or job's shard;
//   - released and running records carry what their state needs (gen ≥ 1,
//     a slot, a claim time) and their lease is not before the slot;
//   - the tenant counters equal what the job records say;
//   - ready holds exactly the tenants that can use it (docs/design.md §2.2): each
//     has a queued job and is neither disabled, admin-paused, at its
//     concurrency cap nor at its release cap; every tenant with a queued job
//     and none of those blockers is in ready (else it would be stuck), at a
//     score no earlier than its pauses;
//   - every tenant hash, and every tenant's secrets, in its shard's tenant index;
//   - the observation aggregates (lib.lua AGG) equal what the tenants say:
//     open and running sums, top, the gates, the dead letters; none of
//     their entries names a tenant out of the index;
//   - upstreams: every registry hash <p>:{u:<name>}:u has cfg, p and a
//     version ≥ 1, no TTL, and is in the listing <p>:upstreams (no TTL);
//     its concurrency lease set <p>:{u:<name>}:run has a TTL.
//
// Reusable by any test of this package: call it after a scenario, with
// Redis quiet (it reads with many commands, not atomically).
func auditKeyspace(ctx context.Context, rdb redis.UniversalClient, prefix string, shards int) ([]string, error) {
	ks, err := loadKeyspace(ctx, rdb, prefix, shards)
	if err != nil {
		return nil, err
	}
	ks.checkJobs()
	ks.checkSets()
	ks.checkTenants()
	ks.checkReadyComplete()
	ks.checkIdem()
	ks.checkIndex()
	ks.checkUpstreams()
	ks.checkAggregates()
	return ks.problems, nil
}

// checkIndex: every tenant hash is in its shard's tenant index
// (lua/tenants.lua), the index holds only its shard's tenants, and its name
// set holds the same members, in name order.
func (ks *keyspaceSnapshot) checkIndex() {
	for shard := range ks.shards {
		index, names := ks.sets[ks.keyOf(shard, "tenants")], ks.sets[ks.keyOf(shard, "tenant_names")]
		if sorted := slices.Sorted(slices.Values(index)); !slices.Equal(sorted, names) {
			ks.problem("shard %d: tenant index %q, name set %q", shard, sorted, names)
		}
		for _, tn := range index {
			if ShardOf(tn, ks.shards) != shard {
				ks.problem("tenant index of shard %d holds %q of shard %d", shard, tn, ShardOf(tn, ks.shards))
			}
		}
	}
	for tn := range ks.tenants {
		if !slices.Contains(ks.sets[ks.keyOf(ShardOf(tn, ks.shards), "tenants")], tn) {
			ks.problem("tenant %q has a hash but is not in its shard's tenant index", tn)
		}
	}
	for _, tn := range ks.secrets {
		if !slices.Contains(ks.sets[ks.keyOf(ShardOf(tn, ks.shards), "tenants")], tn) {
			ks.problem("tenant %q has secrets but is not in its shard's tenant index", tn)
		}
	}
}

var (
	upstreamKeyPattern = regexp.MustCompile(`^\{u:([^{}:]+)\}:u$`)
	upstreamRunPattern = regexp.MustCompile(`^\{u:([^{}:]+)\}:run$`)
)

// loadUpstream reads key when it is the upstream listing, a registry hash
// or a concurrency lease set (which must have a TTL), and reports whether
// it was.
func (ks *keyspaceSnapshot) loadUpstream(ctx context.Context, rdb redis.UniversalClient, key string) (bool, error) {
	rest := strings.TrimPrefix(key, ks.prefix+":")
	if upstreamRunPattern.MatchString(rest) {
		if ttl, err := rdb.PTTL(ctx, key).Result(); err != nil || ttl == -1 {
			ks.problem("upstream lease set %s: ttl %s (%v), want one", key, ttl, err)
		}
		return true, nil
	}
	m := upstreamKeyPattern.FindStringSubmatch(rest)
	if rest != "upstreams" && m == nil {
		return false, nil
	}
	if ttl, err := rdb.PTTL(ctx, key).Result(); err != nil || ttl >= 0 {
		ks.problem("upstream key %s: ttl %s (%v)", key, ttl, err)
	}
	var err error
	if m == nil {
		ks.listing, err = rdb.ZRange(ctx, key, 0, -1).Result()
	} else {
		ks.upstreams[m[1]], err = rdb.HGetAll(ctx, key).Result()
	}
	return true, err
}

// checkUpstreams: every registry hash is complete and listed.
func (ks *keyspaceSnapshot) checkUpstreams() {
	for name, h := range ks.upstreams {
		if v, err := strconv.ParseInt(h["v"], 10, 64); h["cfg"] == "" || h["p"] == "" || err != nil || v < 1 {
			ks.problem("upstream %q: cfg %q, p %q, v %q", name, h["cfg"], h["p"], h["v"])
		}
		if !slices.Contains(ks.listing, name) {
			ks.problem("upstream %q has a hash but is not in the listing", name)
		}
	}
}

// requireConsistent fails the test with every problem auditKeyspace finds.
func (e *env) requireConsistent() {
	e.t.Helper()
	problems, err := auditKeyspace(e.ctx, e.rdb, e.prefix, e.store.Shards())
	if err != nil {
		e.t.Fatalf("audit: %v", err)
	}
	if len(problems) > 0 {
		e.t.Fatalf("keyspace audit found %d problems:\n%s", len(problems), strings.Join(problems, "\n"))
	}
}

type auditedKey struct {
	shard int
	ttl   time.Duration // < 0: none
}

type keyspaceSnapshot struct {
	prefix    string
	shards    int
	keys      map[string]auditedKey
	jobs      map[string]map[string]string // id → fields
	tenants   map[string]map[string]string // tenant → fields
	tenantTTL map[string]time.Duration
	secrets   []string                      // tenants with secrets by API
	lists     map[string][]string           // q and head keys → members
	sets      map[string][]string           // ready/delayed/leases/dead keys → members
	scores    map[string]map[string]float64 // ready, leases and aggregate sets → member → score
	hashes    map[string]map[string]string  // agg and dead:n keys → fields
	policies  map[int]map[string]string     // shard → policy hash
	idem      map[string]string             // key → value
	upstreams map[string]map[string]string  // upstream name → registry hash
	fair      map[int]map[string]string     // shard → <p>:{sN}:fair
	listing   []string                      // <p>:upstreams
	problems  []string
}

func (ks *keyspaceSnapshot) problem(format string, args ...any) {
	ks.problems = append(ks.problems, fmt.Sprintf(format, args...))
}

var keyPattern = regexp.MustCompile(`^\{s(\d+)\}:(.*)$`)

func loadKeyspace(ctx context.Context, rdb redis.UniversalClient, prefix string, shards int) (*keyspaceSnapshot, error) {
	ks := &keyspaceSnapshot{prefix: prefix, shards: shards, keys: map[string]auditedKey{},
		jobs: map[string]map[string]string{}, tenants: map[string]map[string]string{},
		tenantTTL: map[string]time.Duration{},
		lists:     map[string][]string{}, sets: map[string][]string{}, idem: map[string]string{},
		scores: map[string]map[string]float64{}, policies: map[int]map[string]string{},
		upstreams: map[string]map[string]string{}, fair: map[int]map[string]string{}, hashes: map[string]map[string]string{}}
	keys, err := redistest.Keys(ctx, rdb, prefix+":*")
	for _, k := range keys {
		if err := ks.load(ctx, rdb, k); err != nil {
			return nil, err
		}
	}
	return ks, err
}

// load reads one key into the snapshot according to its name.
func (ks *keyspaceSnapshot) load(ctx context.Context, rdb redis.UniversalClient, key string) error {
	if key == ks.prefix+":workers" {
		return nil // worker heartbeats (workers_test.go checks them)
	}
	if handled, err := ks.loadUpstream(ctx, rdb, key); handled {
		return err
	}
	m := keyPattern.FindStringSubmatch(strings.TrimPrefix(key, ks.prefix+":"))
	if m == nil {
		ks.problem("unknown key %s", key)
		return nil
	}
	shard, _ := strconv.Atoi(m[1])
	ttl, err := rdb.PTTL(ctx, key).Result()
	if err != nil {
		return err
	}
	if ttl == -2 { // expired since the SCAN (TTLs run in real time)
		return nil
	}
	ks.keys[key] = auditedKey{shard: shard, ttl: ttl}
	rest := m[2]
	switch {
	case rest == "ready" || rest == "leases" || rest == "delayed":
		var zs []redis.Z
		zs, err = rdb.ZRangeWithScores(ctx, key, 0, -1).Result()
		ks.scores[key] = map[string]float64{}
		for _, z := range zs {
			ks.sets[key] = append(ks.sets[key], z.Member.(string))
			ks.scores[key][z.Member.(string)] = z.Score
		}
	case strings.HasSuffix(rest, ":dead"):
		ks.sets[key], err = rdb.ZRange(ctx, key, 0, -1).Result()
	case strings.HasPrefix(rest, "t:") && strings.HasSuffix(rest, ":ra"): // recent.lua: a string, always with a TTL
		var raw string
		if raw, err = rdb.Get(ctx, key).Result(); err == nil {
			if _, perr := parseRecent(raw); perr != nil || ttl < 0 {
				ks.problem("recent attempts %s: %v, ttl %s", key, perr, ttl)
			}
		}
	case strings.HasPrefix(rest, "t:") && strings.HasSuffix(rest, ":circ:woken"): // circuit_wake.lua: destination → woken µs, always with a TTL
		var h map[string]string
		if h, err = rdb.HGetAll(ctx, key).Result(); err == nil {
			for d, v := range h {
				if n, perr := strconv.ParseInt(v, 10, 64); perr != nil || n <= 0 || d == "" || ttl < 0 {
					ks.problem("tenant circuit wake-ups %s: %q → %q, ttl %s", key, d, v, ttl)
				}
			}
		}
	case strings.HasPrefix(rest, "t:") && strings.Contains(rest, ":circ:"): // finish.lua defer: job id → due µs, always with a TTL
		if n, zerr := rdb.ZCard(ctx, key).Result(); zerr != nil || n == 0 || ttl < 0 {
			ks.problem("tenant circuit jobs %s: %d (%v), ttl %s", key, n, zerr, ttl)
		}
	case strings.HasPrefix(rest, "t:") && strings.HasSuffix(rest, ":circ"): // finish.lua defer: destination → due µs, always with a TTL
		var h map[string]string
		if h, err = rdb.HGetAll(ctx, key).Result(); err == nil {
			for d, v := range h {
				if n, perr := strconv.ParseInt(v, 10, 64); perr != nil || n <= 0 || d == "" {
					ks.problem("tenant circuits %s: %q → %q", key, d, v)
				}
			}
			if ttl < 0 {
				ks.problem("tenant circuits %s: no TTL", key)
			}
		}
	case rest == "tenants" || rest == "tenant_names":
		if ttl >= 0 {
			ks.problem("tenant index %s has a TTL", key)
		}
		ks.sets[key], err = rdb.ZRange(ctx, key, 0, -1).Result()
	case rest == "tenants_backfilled":
		if v, gerr := rdb.Get(ctx, key).Int64(); gerr != nil || v <= 0 || ttl >= 0 {
			ks.problem("backfill marker %s: %d (%v), ttl %s", key, v, gerr, ttl)
		}
	case rest == "vclock":
		if v, gerr := rdb.Get(ctx, key).Int64(); gerr != nil || v < 0 || ttl >= 0 {
			ks.problem("vclock %s: %d (%v), ttl %s", key, v, gerr, ttl)
		}
	case rest == "finished":
		if ttl < 0 || ttl > MaxFinishedWindow {
			ks.problem("finished counter %s: ttl %s", key, ttl)
		}
	case rest == "agg" || rest == "dead:n":
		if ttl >= 0 {
			ks.problem("aggregate %s has a TTL", key)
		}
		ks.hashes[key], err = rdb.HGetAll(ctx, key).Result()
	case rest == "top" || rest == "dead:x" || strings.HasPrefix(rest, "gate:"):
		if ttl >= 0 {
			ks.problem("aggregate %s has a TTL", key)
		}
		var zs []redis.Z
		zs, err = rdb.ZRangeWithScores(ctx, key, 0, -1).Result()
		ks.scores[key] = map[string]float64{}
		for _, z := range zs {
			ks.scores[key][z.Member.(string)] = z.Score
		}
	case rest == "waitmark":
		if v, gerr := rdb.Get(ctx, key).Result(); gerr != nil || v != "1" || ttl < 0 || ttl > time.Minute {
			ks.problem("waitmark %s: %q (%v), ttl %s", key, v, gerr, ttl)
		}
	case rest == "fair":
		if ttl >= 0 {
			ks.problem("fair-share weights %s have a TTL", key)
		}
		ks.fair[shard], err = rdb.HGetAll(ctx, key).Result()
	case rest == "policy":
		if ttl >= 0 {
			ks.problem("policy hash %s has a TTL", key)
		}
		ks.policies[shard], err = rdb.HGetAll(ctx, key).Result()
	case strings.HasSuffix(rest, ":q"):
		ks.lists[key], err = rdb.LRange(ctx, key, 0, -1).Result()
	case strings.HasSuffix(rest, ":head"):
		ks.lists[key], err = rdb.ZRange(ctx, key, 0, -1).Result()
	case strings.HasPrefix(rest, "t:"):
		tn := strings.TrimPrefix(rest, "t:")
		if ShardOf(tn, ks.shards) != shard {
			ks.problem("tenant key %s: tenant %q belongs to shard %d", key, tn, ShardOf(tn, ks.shards))
		}
		ks.tenantTTL[tn] = ttl
		var h map[string]string
		if h, err = rdb.HGetAll(ctx, key).Result(); err == nil {
			var ok bool
			if ks.tenants[tn], ok = tenantFields(h); !ok {
				ks.problem("tenant %q: packed state of %d bytes", tn, len(h["s"]))
			}
		}
	case strings.HasPrefix(rest, "j:"):
		ks.jobs[strings.TrimPrefix(rest, "j:")], err = rdb.HGetAll(ctx, key).Result()
	case strings.HasPrefix(rest, "sec:"):
		ks.secrets = append(ks.secrets, strings.TrimPrefix(rest, "sec:"))
	case strings.HasPrefix(rest, "idem:"):
		ks.idem[key], err = rdb.Get(ctx, key).Result()
	default:
		ks.problem("unknown key %s", key)
	}
	return err
}

func (ks *keyspaceSnapshot) keyOf(shard int, name string) string {
	return ks.prefix + ":{s" + strconv.Itoa(shard) + "}:" + name
}

// home is where a live job's id must be, by state; "" for none.
func (ks *keyspaceSnapshot) home(shard int, job map[string]string) []string {
	tn := job["tenant"]
	switch State(job["state"]) {
	case StateQueued:
		return []string{ks.keyOf(shard, "t:"+tn+":q"), ks.keyOf(shard, "t:"+tn+":head")}
	case StateScheduled, StateRetrying:
		return []string{ks.keyOf(shard, "delayed")}
	case StateReleased, StateRunning:
		return []string{ks.keyOf(shard, "leases")}
	case StateDead:
		return []string{ks.keyOf(shard, "t:"+tn+":dead")}
	}
	return nil
}

func (ks *keyspaceSnapshot) checkJobs() {
	for id, job := range ks.jobs {
		shard, err := ShardOfJobID(id)
		key := ks.keyOf(shard, "j:"+id)
		if err != nil || ks.keys[key].shard != shard {
			ks.problem("job %s: bad id or hash tag (%v)", id, err)
			continue
		}
		state := State(job["state"])
		if ks.keys[key].ttl >= 0 {
			if state != StateCanceled && state != StateSucceeded && state != StateDead {
				ks.problem("job %s is %s but has a TTL", id, state)
			}
			continue
		}
		homes := ks.home(shard, job)
		if homes == nil {
			ks.problem("job %s is %q without a TTL: orphan", id, state)
			continue
		}
		found := 0
		for _, h := range homes {
			found += count(append(ks.lists[h], ks.sets[h]...), id)
		}
		if found != 1 {
			ks.problem("job %s (%s) found %d times in %v", id, state, found, homes)
		}
		ks.checkRecord(shard, id, job)
	}
}

// checkRecord: a record carries what its state needs; a delayed job's
// score is its due time.
func (ks *keyspaceSnapshot) checkRecord(shard int, id string, job map[string]string) {
	state := State(job["state"])
	delayed := int64(ks.scores[ks.keyOf(shard, "delayed")][id])
	switch state {
	case StateDead:
		if num(job, "ended") == 0 {
			ks.problem("dead job %s has no ended time", id)
		}
		return
	case StateScheduled, StateRetrying:
		due := map[State]string{StateScheduled: "run_at", StateRetrying: "due"}[state]
		if delayed != num(job, due) {
			ks.problem("%s job %s: delayed at %d, its %s is %s", state, id, delayed, due, job[due])
		}
		return
	case StateReleased, StateRunning:
	default:
		return
	}
	lease, ok := ks.scores[ks.keyOf(shard, "leases")][id]
	switch {
	case num(job, "gen") < 1:
		ks.problem("%s job %s has gen %s", state, id, job["gen"])
	case num(job, "slot") == 0:
		ks.problem("%s job %s has no slot", state, id)
	case ok && int64(lease) < num(job, "slot"):
		ks.problem("%s job %s: lease %d before its slot %s", state, id, int64(lease), job["slot"])
	case state == StateRunning && (num(job, "claimed") == 0 || num(job, "attempt") < 1 || num(job, "first") == 0):
		ks.problem("running job %s lacks its claim (claimed %q, attempt %q, first %q)", id, job["claimed"], job["attempt"], job["first"])
	}
}

func count(xs []string, x string) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}

// checkSets: every member of a list or set is a record in a matching state.
func (ks *keyspaceSnapshot) checkSets() {
	want := map[string][]State{
		"delayed": {StateScheduled, StateRetrying}, "leases": {StateReleased, StateRunning},
		"q": {StateQueued}, "head": {StateQueued}, "dead": {StateDead},
	}
	for key, members := range mergeMaps(ks.lists, ks.sets) {
		kind := key[strings.LastIndex(key, ":")+1:]
		if kind == "ready" {
			ks.checkReady(key, members)
			continue
		}
		if kind == "tenants" || kind == "tenant_names" {
			continue // checkIndex
		}
		if ks.keys[key].ttl >= 0 && kind != "dead" { // a dead set expires with its newest letter
			ks.problem("%s has a TTL", key)
		}
		for _, id := range members {
			job, ok := ks.jobs[id]
			if !ok || !slices.Contains(want[kind], State(job["state"])) {
				ks.problem("%s holds %s, which is %q", key, id, job["state"])
			}
		}
		if kind == "q" || kind == "head" {
			tn := strings.TrimSuffix(strings.SplitN(key, ":t:", 2)[1], ":"+kind)
			if ks.tenants[tn] == nil {
				ks.problem("%s: no tenant hash for %q", key, tn)
			}
		}
	}
}

// checkReady: every tenant in ready has a queued job and can use its score.
func (ks *keyspaceSnapshot) checkReady(key string, tenants []string) {
	shard := ks.keys[key].shard
	for _, tn := range tenants {
		cost, ok := ks.headCost(shard, tn)
		if !ok {
			ks.problem("%s holds tenant %q, which has no queued job", key, tn)
			continue
		}
		if why := ks.blocked(shard, tn, cost); why != "" {
			ks.problem("%s holds tenant %q, which is %s", key, tn, why)
		}
		h := ks.tenants[tn]
		if score := int64(ks.scores[key][tn]); score < max(num(h, "paused_until"), num(h, "admin_until")) {
			ks.problem("%s holds tenant %q at %d, before its pause ends", key, tn, score)
		}
	}
}

// checkReadyComplete: a tenant with a queued job that nothing blocks is in
// ready — otherwise no pass would ever visit it.
func (ks *keyspaceSnapshot) checkReadyComplete() {
	for tn := range ks.tenants {
		shard := ShardOf(tn, ks.shards)
		cost, ok := ks.headCost(shard, tn)
		if !ok || ks.blocked(shard, tn, cost) != "" {
			continue
		}
		if _, in := ks.scores[ks.keyOf(shard, "ready")][tn]; !in {
			ks.problem("tenant %q has queued jobs, nothing blocks it, but it is not in ready: stuck", tn)
		}
	}
}

// headCost is the cost of tenant's next job (head lane first, then the
// backlog); false when it has none.
func (ks *keyspaceSnapshot) headCost(shard int, tn string) (int64, bool) {
	for _, kind := range []string{":head", ":q"} {
		if l := ks.lists[ks.keyOf(shard, "t:"+tn+kind)]; len(l) > 0 {
			return num(ks.jobs[l[0]], "cost"), true
		}
	}
	return 0, false
}

// blocked says why tenant cannot use a ready score, "" when nothing blocks it.
func (ks *keyspaceSnapshot) blocked(shard int, tn string, cost int64) string {
	h, p := ks.tenants[tn], ks.policy(shard, tn)
	iv := effectiveInterval(p, num(h, "rf"))
	rtok, rcap := num(h, "rtok"), (num(h, "lead")+iv-1)/iv+p.Burst
	switch {
	case num(h, "disabled") == 1:
		return "disabled"
	case num(h, "admin_paused") == 1:
		return "admin-paused"
	case num(h, "running")+num(h, "released") >= p.Concurrency:
		return "at its concurrency cap"
	case rtok > 0 && rtok+cost > rcap:
		return "at its release cap"
	case heldFair(h["rs"]) && num(h, "running")+num(h, "released") > 0:
		return "held at its fair share" // its next claim, finish or sweep puts it back
	}
	return ""
}

// policy is tenant's effective policy: DefaultParams ← "*" ← tenant.
func (ks *keyspaceSnapshot) policy(shard int, tn string) Params {
	p := DefaultParams()
	for _, field := range []string{"*", tn} {
		var o Overrides
		if raw, ok := ks.policies[shard][field]; ok {
			if err := json.Unmarshal([]byte(raw), &o); err != nil {
				ks.problem("policy %q on shard %d: %v", field, shard, err)
			}
		}
		p = o.Apply(p)
	}
	return p
}

func mergeMaps(a, b map[string][]string) map[string][]string {
	m := map[string][]string{}
	for k, v := range a {
		m[k] = v
	}
	for k, v := range b {
		m[k] = v
	}
	return m
}

// checkTenants: counters match the records; the rate factor is in range;
// expiry per docs/design.md §3.
func (ks *keyspaceSnapshot) checkTenants() {
	type counts struct{ live, bytes, qtok, running, released, rtok int64 }
	want := map[string]*counts{}
	for _, job := range ks.jobs {
		c := want[job["tenant"]]
		if c == nil {
			c = &counts{}
			want[job["tenant"]] = c
		}
		cost, _ := strconv.ParseInt(job["cost"], 10, 64)
		size, _ := strconv.ParseInt(job["bytes"], 10, 64)
		switch State(job["state"]) {
		case StateQueued:
			c.qtok += cost
			fallthrough
		case StateScheduled, StateRetrying:
			c.live, c.bytes = c.live+1, c.bytes+size
		case StateReleased:
			c.live, c.bytes, c.released, c.rtok = c.live+1, c.bytes+size, c.released+1, c.rtok+cost
		case StateRunning:
			c.running++
		}
	}
	for tn, c := range want {
		h := ks.tenants[tn]
		got := counts{num(h, "live"), num(h, "bytes"), num(h, "qtok"), num(h, "running"), num(h, "released"), num(h, "rtok")}
		if got != *c {
			ks.problem("tenant %q counters %+v, records say %+v", tn, got, *c)
		}
		head := ks.lists[ks.keyOf(ShardOf(tn, ks.shards), "t:"+tn+":head")]
		if h != nil && num(h, "hlen") != int64(len(head)) {
			ks.problem("tenant %q hlen %d, head lane holds %d", tn, num(h, "hlen"), len(head))
		}
	}
	ks.checkFairWeights()
	for tn, h := range ks.tenants {
		if rf := num(h, "rf"); rf < 0 || rf >= RateFactorFull {
			ks.problem("tenant %q rate factor %d ppm: want 1 … %d, or 0 for full", tn, rf, RateFactorFull-1)
		}
		busy := num(h, "live")+num(h, "running") > 0 || num(h, "disabled") == 1 || num(h, "admin_paused") == 1
		ttl := ks.tenantTTL[tn]
		if busy && ttl >= 0 {
			ks.problem("tenant %q holds jobs or is paused but has a TTL", tn)
		}
		if !busy && ttl < 0 {
			ks.problem("tenant %q is idle but has no TTL: orphan", tn)
		}
	}
}

// checkFairWeights: each tenant's fw is its policy weight while it holds a
// worker slot (running + released > 0), else 0, and each shard's held
// weight (<p>:{sN}:fair field w) is the sum of its tenants' fw.
func (ks *keyspaceSnapshot) checkFairWeights() {
	sum := map[int]int64{}
	for tn, h := range ks.tenants {
		shard := ShardOf(tn, ks.shards)
		want := int64(0)
		if num(h, "running")+num(h, "released") > 0 {
			want = ks.policy(shard, tn).Weight
		}
		if got := num(h, "fw"); got != want {
			ks.problem("tenant %q fw %d, want %d (its weight while it holds slots)", tn, got, want)
		}
		sum[shard] += num(h, "fw")
	}
	for shard := range ks.shards {
		if got := num(ks.fair[shard], "w"); got != sum[shard] {
			ks.problem("shard %d held weight %d, its tenants' fw sum to %d", shard, got, sum[shard])
		}
	}
}

// effectiveInterval is T_eff = ⌈T·10⁶ / f⌉ for a tenant of policy p whose
// stored rate factor is rf (0: full), as lib.lua's interval computes it.
func effectiveInterval(p Params, rf int64) int64 {
	if p.Adaptive != 1 || rf <= 0 || rf >= RateFactorFull {
		return p.RateUS
	}
	return (p.RateUS*RateFactorFull + rf - 1) / rf
}

// heldFair says whether a tenant's digest rs (lua/lib.lua sched_sig) was
// taken while a pass held it at its fair share (blocked code 4, the first
// double).
func heldFair(rs string) bool {
	return len(rs) >= 8 && math.Float64frombits(binary.LittleEndian.Uint64([]byte(rs))) == 4
}

func num(h map[string]string, f string) int64 {
	v, _ := strconv.ParseInt(h[f], 10, 64)
	return v
}

// checkIdem: an idempotency key without a TTL belongs to a live job of its tenant.
func (ks *keyspaceSnapshot) checkIdem() {
	for key, v := range ks.idem {
		_, id, ok := strings.Cut(v, " ")
		job := ks.jobs[id]
		if !ok || (job == nil && ks.keys[key].ttl < 0) {
			ks.problem("idempotency key %s = %q: no such job and no TTL", key, v)
			continue
		}
		if ks.keys[key].ttl < 0 && State(job["state"]).Terminal() {
			ks.problem("idempotency key %s of terminal job %s has no TTL", key, id)
		}
		if job != nil && !strings.HasSuffix(key, ":idem:"+job["tenant"]+":"+job["idem"]) {
			ks.problem("idempotency key %s does not match job %s (%s, %q)", key, id, job["tenant"], job["idem"])
		}
	}
}

// TestAuditFindsProblems: the checker is not vacuous.
func TestAuditFindsProblems(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.enqueueOne("acme", item(`{}`))
	e.requireConsistent()

	key, _ := e.store.keys.job(r.ID)
	e.rdb.HSet(e.ctx, key, "state", "scheduled")
	e.rdb.Set(e.ctx, e.store.keys.idem("acme", "lost"), "ab j0_01KJMMA2G0WAAKMBBJK9MDDZKB", 0)
	e.rdb.HSet(e.ctx, e.store.keys.tenant("other"), "live", 0)
	e.enqueueOne("globex", item(`{}`))
	e.rdb.ZRem(e.ctx, e.store.keys.ready(e.store.keys.shardOf("globex")), "globex")
	e.rdb.HSet(e.ctx, e.store.keys.tenant("globex"), "hlen", 1)
	problems, err := auditKeyspace(e.ctx, e.rdb, e.prefix, e.store.Shards())
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(problems, "\n")
	for _, want := range []string{
		"job " + r.ID + " (scheduled) found 0 times", // not in the delayed set
		"holds " + r.ID + `, which is "scheduled"`,   // the backlog holds a non-queued job
		`tenant "acme" counters`,                     // qtok no longer matches
		"idempotency key " + e.store.keys.idem("acme", "lost"),
		`tenant "other" is idle but has no TTL`,
		`tenant "globex" has queued jobs, nothing blocks it, but it is not in ready: stuck`,
		`tenant "globex" hlen 1, head lane holds 0`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("audit missed %q; found:\n%s", want, all)
		}
	}
}

// checkAggregates: each shard's observation aggregates (lib.lua AGG) equal
// the sums and sets its tenant hashes and dead sets give, and every entry
// of theirs names a tenant of the index.
func (ks *keyspaceSnapshot) checkAggregates() {
	const forever = 9007199254740991 // lib.lua AGG.FOREVER
	for shard := range ks.shards {
		agg := ks.hashes[ks.keyOf(shard, "agg")]
		index := ks.sets[ks.keyOf(shard, "tenants")]
		var open, running, dead int64
		gates := map[string]map[string]float64{"gate:a": {}, "gate:u": {}, "gate:d": {}, "gate:p": {}}
		top, letters := map[string]float64{}, map[string]string{}
		for tn, h := range ks.tenants {
			if ShardOf(tn, ks.shards) != shard {
				continue
			}
			open, running = open+num(h, "live")+num(h, "running"), running+num(h, "running")
			if live := num(h, "live"); live > 0 {
				top[tn] = float64(live)
			}
			a, d := float64(num(h, "admin_until")), 0.0
			if num(h, "admin_paused") == 1 {
				a = forever
			}
			if num(h, "disabled") == 1 {
				d = forever
			}
			u := float64(num(h, "paused_until"))
			for name, v := range map[string]float64{"gate:a": a, "gate:u": u, "gate:d": d, "gate:p": max(a, u) * (1 - d/forever)} {
				if v > 0 {
					gates[name][tn] = v
				}
			}
		}
		for key, members := range ks.sets {
			if tn, ok := strings.CutSuffix(strings.TrimPrefix(key, ks.keyOf(shard, "t:")), ":dead"); ok && strings.HasPrefix(key, ks.keyOf(shard, "t:")) {
				dead += int64(len(members))
				letters[tn] = strconv.Itoa(len(members))
			}
		}
		or := num(agg, "or") // lib.lua AGG: open + running · 2^32
		if got := [3]int64{or % (1 << 32), or >> 32, num(agg, "dead")}; got != [3]int64{open, running, dead} {
			ks.problem("shard %d: aggregates open, running, dead %v; the tenants say %v", shard, got, [3]int64{open, running, dead})
		}
		want := map[string]map[string]float64{"top": top}
		for name, g := range gates {
			want[name] = g
		}
		for name, w := range want {
			got := ks.scores[ks.keyOf(shard, name)]
			for tn, v := range w {
				if got[tn] != v {
					ks.problem("shard %d: %s holds %q at %v, its tenant says %v", shard, name, tn, got[tn], v)
				}
			}
			for tn, v := range got {
				_, hashed := ks.tenants[tn]
				if _, ok := w[tn]; !ok && (hashed || !slices.Contains(index, tn)) {
					ks.problem("shard %d: %s holds %q at %v, its tenant says none", shard, name, tn, v)
				}
			}
		}
		if got := ks.hashes[ks.keyOf(shard, "dead:n")]; !maps.Equal(got, letters) && (len(got) > 0 || len(letters) > 0) {
			ks.problem("shard %d: dead:n %v, the dead sets hold %v", shard, got, letters)
		}
	}
}
