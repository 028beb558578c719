package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/internal/worker"
)

// BenchmarkDeliverCPU is the worker's CPU per delivered job on the
// throughput benchmark's path (scripts/bench-dispatch -parts throughput):
// each round enqueues 2 unsigned webhook jobs for each of 50 tenants (the concurrency: 100), a pass
// per shard releases and pre-claims them (as the dispatcher does while
// every worker runs pre-claimed jobs), and the rounds' batches (at most 16
// jobs, a shard each) go to the Worker's ProcessTask side by side, as
// asynq's fetchers hand them over: decode, schedule, sign, POST to a local
// no-op receiver, classify, finish through the Coalescer. Only the
// deliveries are measured: process CPU (user + system, getrusage: the
// receiver's share included, Redis's not) and heap allocations per job, as
// cpu-µs/job and allocs/job; wall time is noise on a shared machine. Run
// it alone, the same sitting before and after a change:
//
//	go test -run '^$' -bench DeliverCPU -benchtime 40x -count 5 ./internal/worker/
func BenchmarkDeliverCPU(b *testing.B) {
	const tenants, perTenant, batchMax = 50, 2, 16
	rdb, prefix := redistest.New(b)
	st, err := store.NewStore(rdb, store.Config{Prefix: prefix, Shards: 16})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var delivered atomic.Int64
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		delivered.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(rcv.Close)
	// cmd/worker's wiring (newWorker), its secrets aside: the throughput
	// benchmark's tenants are unsigned.
	exec, _, err := worker.NewWebhookExecutor([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, policy.Overrides{}, nil, st, nil, 100)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(exec.Close)
	ups := worker.NewUpstreamCache(st)
	reg := prometheus.NewRegistry()
	if exec.Costs, err = worker.NewCostReader(ups, reg, slog.New(slog.DiscardHandler)); err != nil {
		b.Fatal(err)
	}
	var w *worker.Worker
	if exec.Circuits, err = worker.NewCircuits(worker.CircuitsConfig{Store: st, Settings: func() wire.Settings { return w.Settings() },
		Registerer: reg, Logger: slog.New(slog.DiscardHandler)}); err != nil {
		b.Fatal(err)
	}
	w, err = worker.New(worker.Config{Store: store.NewCoalescer(st, 0), Redis: rdb, Executor: exec, Prefix: prefix, Concurrency: 100,
		Settings: wire.Settings{Grace: 3 * time.Second}, Registerer: reg, Logger: slog.New(slog.DiscardHandler),
		Upstreams: st, UpstreamRates: st, UpstreamCache: ups})
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.Stop)
	names := make([]string, tenants)
	for i := range names {
		names[i] = fmt.Sprintf("t%03d", i)
		if _, err := st.PutTenantPolicy(ctx, names[i], store.Overrides{RateUS: ptr(100), Burst: ptr(1000), Concurrency: ptr(1000), Unsigned: ptr(1)}, 0); err != nil {
			b.Fatal(err)
		}
	}
	pass := store.PassConfig{Capacity: -1, Lead: time.Second, Grace: 3 * time.Second, ClaimSpacing: -1, Preclaim: store.ToleranceDefault}
	var cpu time.Duration
	var allocs uint64
	jobs := 0
	for b.Loop() {
		b.StopTimer()
		for _, tenant := range names {
			spec := job.Spec{Type: wire.TypeWebhook, URL: rcv.URL + "/hooks/" + tenant, Event: "invoice.paid",
				Payload: json.RawMessage(`{"id":"evt_1","amount":1200,"currency":"eur","customer":"cus_42"}`)}
			items := slices.Repeat([]store.Item{{Type: wire.TypeWebhook, Body: spec.Canonical()}}, perTenant)
			if _, err := st.Enqueue(ctx, tenant, items); err != nil {
				b.Fatal(err)
			}
		}
		var tasks []*asynq.Task
		for shard := range 16 {
			res, err := st.Pass(ctx, shard, pass)
			if err != nil {
				b.Fatal(err)
			}
			for chunk := range slices.Chunk(res.Released, batchMax) {
				bt := wire.Batch{Shard: shard}
				for _, r := range chunk {
					if r.Claimed == nil {
						b.Fatalf("job %s not pre-claimed", r.ID)
					}
					bt.Jobs = append(bt.Jobs, wire.Payload{ID: r.ID, Gen: r.Gen, SlotUS: r.SendAt.UnixMicro(), Claimed: r.Claimed})
				}
				jobs += len(bt.Jobs)
				tasks = append(tasks, asynq.NewTask(wire.TaskTypeBatch, wire.EncodeBatch(bt)))
			}
		}
		b.StartTimer()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		mallocs, used := ms.Mallocs, processCPU(b)
		var wg sync.WaitGroup
		for _, t := range tasks {
			wg.Go(func() {
				if err := w.ProcessTask(ctx, t); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		cpu += processCPU(b) - used
		runtime.ReadMemStats(&ms)
		allocs += ms.Mallocs - mallocs
	}
	if n := delivered.Load(); n != int64(jobs) {
		b.Fatalf("%d of %d jobs delivered", n, jobs)
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(jobs), "cpu-µs/job")
	b.ReportMetric(float64(allocs)/float64(jobs), "allocs/job")
}

// processCPU is this process's CPU time so far, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
