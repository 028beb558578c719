package dispatch

import (
	"context"
	"crypto/sha256"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

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

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// env is one test's Store on a private prefix with a fake clock at epoch.
type env struct {
	t      *testing.T
	ctx    context.Context
	rdb    *redis.Client
	prefix string
	store  *Store
	clock  *fakeClock
}

func newEnv(t *testing.T) *env {
	t.Helper()
	rdb, prefix := redistest.New(t)
	clock := &fakeClock{t: epoch}
	store, err := NewStore(rdb, Config{Prefix: prefix, Shards: 4, Clock: clock.Now})
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

func (e *env) pop(tenant string, lead time.Duration) (Release, bool) {
	e.t.Helper()
	r, ok, err := e.store.Pop(e.ctx, tenant, lead, time.Second)
	if err != nil {
		e.t.Fatal(err)
	}
	return r, ok
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

func us(n int64) time.Duration { return time.Duration(n) * time.Microsecond }

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
