package bucket

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// epoch is the fake clock's origin: a present-day instant (≈ 1.8e15 µs, where
// float arithmetic across the Lua boundary would lose precision), aligned to
// every window used in the tests.
var epoch = time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)

// at is epoch + d.
func at(d time.Duration) time.Time { return epoch.Add(d) }

// tb is what the helpers need of a *testing.T or a *rapid.T.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
}

// fixture is one limiter on the test Redis with its client.
type fixture struct {
	t   tb
	rdb redis.UniversalClient
	lim *Limiter
}

var keySeq atomic.Int64

// newFixture returns a limiter for l under a prefix unique to t, closed when
// t ends.
func newFixture(t testing.TB, l Limit, opts ...Option) *fixture {
	t.Helper()
	rdb, prefix := redistest.New(t)
	lim, err := NewLimiter(rdb, prefix, "lim", l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	return &fixture{t: t, rdb: rdb, lim: lim}
}

// newKey returns a key not used before in this test binary.
func newKey() string { return fmt.Sprintf("k%d", keySeq.Add(1)) }

// allowAt is AllowAt that fails the test on error.
func (f *fixture) allowAt(key string, cost int64, now time.Time) Decision {
	f.t.Helper()
	d, err := f.lim.AllowAt(context.Background(), key, cost, now)
	if err != nil {
		f.t.Fatalf("AllowAt(%q, %d, %s): %v", key, cost, now.Sub(epoch), err)
	}
	return d
}

// redisKey is the Redis key of key.
func (f *fixture) redisKey(key string) string {
	return redisKey(f.lim.prefix, f.lim.name, key)
}

// pttl is the key's PTTL: -2 when missing, -1 when it has no TTL.
func (f *fixture) pttl(key string) time.Duration {
	f.t.Helper()
	d, err := f.rdb.PTTL(context.Background(), f.redisKey(key)).Result()
	if err != nil {
		f.t.Fatalf("%v", err)
	}
	return d
}

// checkTTL fails unless key has a positive TTL (written) or does not exist
// (nothing admitted yet): no key ever lives without a TTL.
func (f *fixture) checkTTL(key string, written bool) {
	f.t.Helper()
	got := f.pttl(key)
	switch {
	case written && got <= 0:
		f.t.Fatalf("key %q: PTTL %v after an admission, want > 0", f.redisKey(key), got)
	case !written && got != -2:
		f.t.Fatalf("key %q: PTTL %v before any admission, want no key (-2)", f.redisKey(key), got)
	}
}

// dump is the key's serialized value ("" when missing), to show a refusal
// changed nothing.
func (f *fixture) dump(key string) string {
	f.t.Helper()
	v, err := f.rdb.Dump(context.Background(), f.redisKey(key)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		f.t.Fatalf("%v", err)
	}
	return v
}

// Equivalent limits: capacity 5, refilled in 10s — 5 per 10s windows, or
// one token every 2s with burst 5.
var equivalent = map[Algorithm]Limit{
	FixedWindow:   {Algorithm: FixedWindow, Limit: 5, Window: 10 * time.Second},
	SlidingLog:    {Algorithm: SlidingLog, Limit: 5, Window: 10 * time.Second},
	SlidingWindow: {Algorithm: SlidingWindow, Limit: 5, Window: 10 * time.Second},
	TokenBucket:   {Algorithm: TokenBucket, Rate: Rate{Tokens: 30, Per: time.Minute}, Burst: 5},
	GCRA:          {Algorithm: GCRA, Rate: Rate{Tokens: 30, Per: time.Minute}, Burst: 5},
}

// withCapacity is equivalent[a] with capacity n (windows and refill scaled
// so the long-run rate stays one token per 2s).
func withCapacity(a Algorithm, n int64) Limit {
	l := equivalent[a]
	if a.Windowed() {
		l.Limit, l.Window = n, time.Duration(n)*2*time.Second
	} else {
		l.Burst = n
	}
	return l
}
