package quota

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/upstream"
)

// TestMain runs the package's tests against a real Redis.
func TestMain(m *testing.M) { redistest.Main(m) }

const ms = time.Millisecond

// epoch is the fake clock's start.
var epoch = redistest.Epoch

// env is one test's Registry on a private prefix with a fake clock at
// epoch, over 4 shards.
type env struct {
	t      testing.TB
	ctx    context.Context
	rdb    redis.UniversalClient
	prefix string
	reg    *Registry
	clock  *redistest.Clock
}

func newEnv(t testing.TB) *env {
	t.Helper()
	rdb, prefix := redistest.New(t)
	clock := &redistest.Clock{}
	reg, err := New(rdb, Config{Prefix: prefix, Shards: 4, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, ctx: context.Background(), rdb: rdb, prefix: prefix, reg: reg, clock: clock}
}

func upCfg(n int64, burst int64) upstream.Config {
	return upstream.Config{Rate: bucket.Rate{Tokens: n, Per: time.Second}, Burst: burst}
}

func (e *env) upstream(name string) UpstreamRecord {
	e.t.Helper()
	rec, err := e.reg.Upstream(e.ctx, name)
	if err != nil {
		e.t.Fatalf("get upstream %q: %v", name, err)
	}
	return rec
}

// putUpstream configures upstream name (PutUpstream) at one cost unit per
// interval (a whole number of µs dividing a minute) with burst.
func (e *env) putUpstream(name string, interval time.Duration, burst int64) {
	e.t.Helper()
	rate, err := bucket.ParseRate(fmt.Sprintf("%d/m", time.Minute/interval))
	if err != nil || time.Minute%interval != 0 {
		e.t.Fatalf("interval %v: %v", interval, err)
	}
	if _, err := e.reg.PutUpstream(e.ctx, name, upstream.Config{Rate: rate, Burst: burst}, SourceAPI, ""); err != nil {
		e.t.Fatal(err)
	}
}

// seedUpstream writes an upstream hash as the registry and the coordinator
// do (fields cfg, p, tat), for the cost-correction functions to read.
func (e *env) seedUpstream(name, cfg string, intervalUS int64, tat time.Time) {
	e.t.Helper()
	fields := []any{"cfg", cfg, "p", `{"iv":` + strconv.FormatInt(intervalUS, 10) + `,"b":1,"c":0,"a":0,"s":0}`, "v", 1}
	if !tat.IsZero() {
		fields = append(fields, "tat", tat.UnixMicro())
	}
	if err := e.rdb.HSet(e.ctx, e.reg.UpstreamKey(name), fields...).Err(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) upstreamTAT(name string) time.Time {
	e.t.Helper()
	v, err := e.rdb.HGet(e.ctx, e.reg.UpstreamKey(name), "tat").Int64()
	if err != nil {
		e.t.Fatal(err)
	}
	return time.UnixMicro(v).UTC()
}
