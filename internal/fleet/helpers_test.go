package fleet

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestMain runs the package's tests against a real Redis.
func TestMain(m *testing.M) { redistest.Main(m) }

// epoch is the fake clock's start: a realistic present-day Redis time, so
// µs values have their production magnitude.
var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// stepClock is a fake clock that only moves forward, safe for concurrent use.
type stepClock struct{ us atomic.Int64 }

func (c *stepClock) Now() time.Time          { return time.UnixMicro(c.us.Load()).UTC() }
func (c *stepClock) Advance(d time.Duration) { c.us.Add(d.Microseconds()) }

// env is one test's Roster on a private prefix with a fake clock at epoch.
type env struct {
	ctx    context.Context
	rdb    redis.UniversalClient
	prefix string
	roster *Roster
	clock  *stepClock
}

func newEnv(t testing.TB) *env {
	t.Helper()
	rdb, prefix := redistest.New(t)
	clock := &stepClock{}
	clock.us.Store(epoch.UnixMicro())
	roster, err := New(rdb, Config{Prefix: prefix, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return &env{ctx: context.Background(), rdb: rdb, prefix: prefix, roster: roster, clock: clock}
}
