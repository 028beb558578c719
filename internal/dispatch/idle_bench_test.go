package dispatch

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// BenchmarkIdleCommands measures what an idle throttler costs Redis: one
// Dispatcher on the real store with 16 shards and no jobs, one live worker
// heartbeat (concurrency 100, as cmd/worker writes it), for idleWindow from
// idleSettle after every shard is owned. It reports Redis commands per second from INFO
// commandstats deltas (every command counts once, a script's inner calls
// too; the INFO calls of the measurement are left out) and the busiest
// commands.
//
//	go test -run '^$' -bench IdleCommands -benchtime 1x ./internal/dispatch/
//
// Run it alone: the counters are the test binary's Redis server's.
func BenchmarkIdleCommands(b *testing.B) {
	for range b.N {
		benchIdleCommands(b)
	}
}

// idleSettle is the time left to the start before measuring, idleWindow
// the time measured.
const idleSettle, idleWindow = time.Second, 4 * time.Second

func benchIdleCommands(b *testing.B) {
	rdb, prefix, st := realStore(b, 16, 100)
	ctx := context.Background()
	d, err := New(Config{Store: st, Asynq: &fakeAsynq{}, Redis: rdb, Prefix: prefix, Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer d.Stop()
	redistest.Poll(b, 5*time.Second, "every shard owned", func() bool { return d.owned.Load() == 16 })
	// Past the start (first passes, first capacity reading, script loads).
	redistest.Hold(b, idleSettle, "every shard stays owned", func() bool { return d.owned.Load() == 16 })
	before, passes := commandStats(b, rdb), testutil.ToFloat64(d.metrics.passes)
	t0 := time.Now()
	redistest.Hold(b, idleWindow, "every shard stays owned", func() bool { return d.owned.Load() == 16 })
	secs := time.Since(t0).Seconds()
	after := commandStats(b, rdb)
	var total float64
	var top []string
	for cmd, n := range after {
		delta := float64(n - before[cmd])
		if cmd == "info" || delta == 0 {
			continue
		}
		total += delta
		top = append(top, cmd+"="+strconv.FormatFloat(delta/secs, 'f', 1, 64))
	}
	b.ReportMetric(total/secs, "redis-cmds/s")
	b.ReportMetric((testutil.ToFloat64(d.metrics.passes)-passes)/secs, "passes/s")
	b.Logf("idle commands/s by command: %s", strings.Join(top, " "))
}

// commandStats is INFO commandstats: calls per command (lower case, with
// subcommands as "config|get").
func commandStats(tb testing.TB, rdb redis.UniversalClient) map[string]int64 {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(fields, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				out[name] = n
			}
		}
	}
	return out
}
