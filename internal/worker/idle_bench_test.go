package worker_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/internal/worker"
)

// BenchmarkIdleCommands measures the Redis commands per second of one idle
// worker process — its Worker's loops (heartbeat, clock, settings) and its
// asynq servers with all their background work — side by side:
//
//   - fetchers4-ungated: the earlier layout, four asynq servers polling the
//     two per-job queues every TaskCheckInterval;
//   - fetchers1-gated: worker.Serve's default now, one server on the eight
//     hand-off queues and the two per-job ones through a dequeue gate
//     (defaults: idle_poll 500 ms, per-job queues gated after 10 s quiet).
//
// Each runs for a warm-up (past the gate's legacy quiet time), then counts
// every command its clients send for a window (cmds/s) and every command
// Redis ran, inside scripts included (redis-calls/s, INFO commandstats;
// the way of counting). Run it alone:
//
//	go test -run '^$' -bench IdleCommands -benchtime 1x ./internal/worker/
func BenchmarkIdleCommands(b *testing.B) {
	const warmup, window = 11 * time.Second, 10 * time.Second
	for _, tc := range []struct {
		name  string
		serve func(ctx context.Context, b *testing.B, h *benchWorker) func()
	}{
		{"fetchers4-ungated", serveUngated},
		{"fetchers1-gated", serveGated},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				h := newBenchWorker(b)
				ctx, cancel := context.WithCancel(context.Background())
				stop := tc.serve(ctx, b, h)
				warm := time.NewTimer(warmup)
				<-warm.C
				before, redisBefore := h.counted.n.Load(), h.redisCalls()
				start := time.Now()
				end := time.NewTimer(window)
				<-end.C
				sent, redisSent, elapsed := h.counted.n.Load()-before, h.redisCalls()-redisBefore, time.Since(start)
				cancel()
				stop()
				b.ReportMetric(float64(sent)/elapsed.Seconds(), "cmds/s")
				b.ReportMetric(float64(redisSent)/elapsed.Seconds(), "redis-calls/s")
			}
		})
	}
}

// benchWorker is a started Worker whose Redis clients all count their
// commands into counted.
type benchWorker struct {
	b       *testing.B
	prefix  string
	w       *worker.Worker
	st      *store.Store
	counted *commandCounter
	rdb     redis.UniversalClient // uncounted: reads INFO
}

func newBenchWorker(b *testing.B) *benchWorker {
	rdb, prefix := redistest.New(b)
	counted := &commandCounter{}
	rdb.AddHook(counted)
	st, err := store.NewStore(rdb, store.Config{Prefix: prefix, Shards: 16})
	if err != nil {
		b.Fatal(err)
	}
	w, err := worker.New(worker.Config{Store: st, Redis: rdb, Executor: &sentExecutor{}, Prefix: prefix, Concurrency: 100})
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.Stop)
	info, _ := redistest.New(b)
	return &benchWorker{b: b, prefix: prefix, w: w, st: st, counted: counted, rdb: info}
}

// redisCalls is the sum of INFO commandstats' calls: every command Redis
// ran, those scripts run included (as the issue counts them). Meaningful
// only when nothing else uses the test Redis: run the benchmark alone.
func (h *benchWorker) redisCalls() int64 {
	info, err := h.rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		h.b.Fatal(err)
	}
	var sum int64
	for line := range strings.Lines(info) {
		_, stats, ok := strings.Cut(line, ":calls=")
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(stats, ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			h.b.Fatalf("INFO commandstats line %q: %v", line, err)
		}
		sum += n
	}
	return sum
}

// serveUngated runs the earlier layout: four servers of concurrency 25 on
// the per-job queues, no gate.
func serveUngated(_ context.Context, b *testing.B, h *benchWorker) func() {
	client, _ := redistest.New(b)
	client.AddHook(h.counted)
	var servers []*asynq.Server
	for range 4 {
		srv := asynq.NewServerFromRedisClient(client, asynq.Config{Concurrency: 25,
			TaskCheckInterval: worker.TaskCheckIntervalDefault, ShutdownTimeout: time.Second, Logger: quietLogger{},
			LogLevel: asynq.FatalLevel,
			Queues:   map[string]int{wire.WebhookQueue(h.prefix): 1, wire.HTTPQueue(h.prefix): 1}})
		if err := srv.Start(h.w); err != nil {
			b.Fatal(err)
		}
		servers = append(servers, srv)
	}
	return func() {
		var wg sync.WaitGroup
		for _, srv := range servers {
			wg.Go(srv.Shutdown)
		}
		wg.Wait()
	}
}

// serveGated runs worker.Serve with its defaults through a gated client.
func serveGated(ctx context.Context, b *testing.B, h *benchWorker) func() {
	rdb, _ := redistest.New(b)
	rdb.AddHook(h.counted) // the subscription's connection
	client, _ := redistest.New(b)
	stopGate, err := h.w.StartGate(ctx, rdb, client, 0)
	if err != nil {
		b.Fatal(err)
	}
	client.AddHook(h.counted) // after the gate: what reaches Redis
	done := make(chan error, 1)
	go func() {
		done <- worker.Serve(ctx, client, h.w, worker.ServersConfig{Concurrency: 100, Fetchers: 1,
			TaskCheckInterval: worker.TaskCheckIntervalDefault, ShutdownTimeout: time.Second,
			Logger: slog.New(slog.DiscardHandler), AsynqLogLevel: slog.LevelError}, nil)
	}()
	return func() {
		if err := <-done; err != nil {
			b.Error(err)
		}
		stopGate()
	}
}
