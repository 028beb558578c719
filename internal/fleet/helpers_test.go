package fleet

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestMain runs the package's tests against a real Redis.
func TestMain(m *testing.M) { redistest.Main(m) }

// epoch is the fake clock's start.
var epoch = redistest.Epoch

// env is one test's Roster on a private prefix with a fake clock at epoch.
type env struct {
	ctx    context.Context
	rdb    redis.UniversalClient
	prefix string
	roster *Roster
	clock  *redistest.Clock
}

func newEnv(t testing.TB) *env {
	t.Helper()
	rdb, prefix := redistest.New(t)
	clock := &redistest.Clock{}
	roster, err := New(rdb, Config{Prefix: prefix, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return &env{ctx: context.Background(), rdb: rdb, prefix: prefix, roster: roster, clock: clock}
}
