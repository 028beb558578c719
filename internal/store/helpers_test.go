package store

import (
	"context"
	"crypto/sha256"
	"flag"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/wire"
)

// TestMain runs the package's tests against a real Redis. Property tests run
// rapidChecksDefault cases unless -rapid.checks says otherwise: one case of
// the dispatch properties is hundreds of scripts.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if !set {
		_ = flag.Set("rapid.checks", strconv.Itoa(rapidChecksDefault))
	}
	redistest.Main(m)
}

const rapidChecksDefault = 25

// testPlanner is the Config.Planner of the tests' stores:
// $SLUICE_TEST_PLANNER, else the default. scripts/test runs the package
// under each planner.
var testPlanner = os.Getenv("SLUICE_TEST_PLANNER")

// epoch is the fake clock's start: a realistic present-day Redis time, so
// µs values have their production magnitude (≈1.77·10¹⁵).
var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fakeClock is a settable clock, safe for concurrent use.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t, which must not be earlier (Redis time is monotone).
func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.t) {
		c.t = t
	}
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// env is one test's Store on a private prefix with a fake clock at epoch.
type env struct {
	t      testing.TB
	ctx    context.Context
	rdb    redis.UniversalClient
	prefix string
	store  *Store
	clock  *fakeClock
	cals   map[int]quota.Calendars // upPass: what each shard's dispatcher knows of the upstreams' calendars
	grants []quota.UpstreamGrant   // orphanPass: the grants for the shard's next pass
	loaded bool                    // pipelined: the Functions library is loaded
}

func newEnv(t testing.TB) *env { return newEnvShards(t, 4) }

func newEnvShards(t testing.TB, shards int) *env {
	t.Helper()
	rdb, prefix := redistest.New(t)
	clock := &fakeClock{t: epoch}
	store, err := NewStore(rdb, Config{Prefix: prefix, Shards: shards, Clock: clock.Now, Planner: testPlanner})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, ctx: context.Background(), rdb: rdb, prefix: prefix, store: store, clock: clock}
}

// params returns DefaultParams changed by edit, for seeding.
func params(edit func(*Params)) Params {
	p := DefaultParams()
	edit(&p)
	return p
}

func (e *env) seed(p Params) {
	e.t.Helper()
	if err := e.store.SeedDefaults(e.ctx, p); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) enqueue(tenant string, items ...Item) []Result {
	e.t.Helper()
	rs, err := e.store.Enqueue(e.ctx, tenant, items)
	if err != nil {
		e.t.Fatalf("enqueue: %v", err)
	}
	return rs
}

// enqueueOne enqueues one item and requires it accepted.
func (e *env) enqueueOne(tenant string, it Item) Result {
	e.t.Helper()
	r := e.enqueue(tenant, it)[0]
	if r.Outcome != Accepted {
		e.t.Fatalf("enqueue: want accepted, got %+v", r)
	}
	return r
}

func (e *env) state(tenant string) TenantState {
	e.t.Helper()
	st, err := e.store.TenantState(e.ctx, tenant)
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

func (e *env) job(id string) Job {
	e.t.Helper()
	j, err := e.store.GetJob(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return j
}

// pop releases at most one job of tenant's shard, due by now + lead, at its
// GCRA slot (L = 0): a one-tenant stand-in for a dispatcher pass.
func (e *env) pop(tenant string, lead time.Duration) (wire.Release, bool) {
	e.t.Helper()
	res := e.pass(e.store.keys.shardOf(tenant), PassConfig{Lead: max(lead, time.Microsecond),
		MinLead: -1, Grace: time.Second, Capacity: 1})
	if len(res.Released) == 0 {
		return wire.Release{}, false
	}
	return res.Released[0], true
}

// pass runs one pass on shard with cfg.
func (e *env) pass(shard int, cfg PassConfig) PassResult {
	e.t.Helper()
	res, err := e.store.Pass(e.ctx, shard, cfg)
	if err != nil {
		e.t.Fatalf("pass on shard %d: %v", shard, err)
	}
	return res
}

// passTenant runs one unlimited pass on tenant's shard with D = lead,
// L = minLead (< 0: none), grace 1s.
func (e *env) passTenant(tenant string, lead, minLead time.Duration) []wire.Release {
	e.t.Helper()
	return e.pass(e.store.keys.shardOf(tenant), PassConfig{Lead: lead, MinLead: minLead,
		Grace: time.Second, Capacity: -1}).Released
}

func (e *env) claim(id string, gen int64) Claim {
	e.t.Helper()
	return e.claimWithin(id, gen, 2*time.Millisecond)
}

// claimWithin claims id at gen with tolerance eps, requiring no error.
func (e *env) claimWithin(id string, gen int64, eps time.Duration) Claim {
	e.t.Helper()
	c, err := e.store.Claim(e.ctx, id, gen, eps)
	if err != nil {
		e.t.Fatalf("claim %s@%d: %v", id, gen, err)
	}
	return c
}

// claimAt sets the clock to the release's slot and claims it, requiring ok.
func (e *env) claimAt(r wire.Release) ClaimedJob {
	e.t.Helper()
	e.clock.Set(r.Slot)
	c := e.claim(r.ID, r.Gen)
	if c.Outcome != ClaimOK {
		e.t.Fatalf("claim %s@%d at its slot: %+v", r.ID, r.Gen, c)
	}
	return c.Job
}

func (e *env) finish(id string, gen int64, o wire.AttemptOutcome, cfg FinishConfig) State {
	e.t.Helper()
	st, err := e.store.Finish(e.ctx, id, gen, o, cfg)
	if err != nil {
		e.t.Fatalf("finish %s@%d: %v", id, gen, err)
	}
	return st
}

// item is a webhook job whose body is body.
func item(body string) Item {
	return Item{Type: "webhook", Body: []byte(body)}
}

// idemItem is item(body) under an idempotency key, fingerprinted by its body.
func idemItem(key, body string) Item {
	it := item(body)
	it.IdemKey, it.Fingerprint = key, sha256.Sum256([]byte(body))
	return it
}

func ids(rs []Result) []string {
	var out []string
	for _, r := range rs {
		if r.ID != "" {
			out = append(out, r.ID)
		}
	}
	return out
}

func outcomes(rs []Result) string {
	s := ""
	for _, r := range rs {
		switch r.Outcome {
		case Accepted:
			s += "A"
		case Duplicate:
			s += "D"
		case Refused:
			s += "R"
		default:
			s += strconv.Itoa(int(r.Outcome))
		}
	}
	return s
}

func redisZ(score float64, member string) redis.Z { return redis.Z{Score: score, Member: member} }
