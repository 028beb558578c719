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
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/procstat"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/internal/worker"
)

// BenchmarkDeliverCPU is the worker's CPU per delivered job on the
// throughput benchmark's path (scripts/bench-dispatch -parts throughput):
// each round enqueues 2 unsigned webhook jobs (as the benchmark's tenants
// are) for each of 50 tenants, as many as the Worker's concurrency (100),
// a pass per shard releases and pre-claims them (as the dispatcher does
// while every worker runs pre-claimed jobs), and the round's batches (at
// most 16 jobs, a shard each) go to the Worker's ProcessTask side by side,
// as asynq's fetchers hand them over: decode, schedule, POST to a local
// no-op receiver, classify, finish through the Coalescer. Only the
// deliveries are measured: process CPU (user + system, getrusage: the
// receiver's share included, Redis's not) and heap allocations per job, as
// cpu-µs/job and allocs/job; wall time is noise on a shared machine. Run
// it alone, the same sitting before and after a change (side by side
// when the machine is busy: both see the same load):
//
//	go test -run '^$' -bench DeliverCPU -benchtime 100x -count 5 ./internal/worker/
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
		mallocs, used := ms.Mallocs, procstat.SelfCPU()
		var wg sync.WaitGroup
		for _, t := range tasks {
			wg.Go(func() {
				if err := w.ProcessTask(ctx, t); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		cpu += procstat.SelfCPU() - used
		runtime.ReadMemStats(&ms)
		allocs += ms.Mallocs - mallocs
	}
	if n := delivered.Load(); n != int64(jobs) {
		b.Fatalf("%d of %d jobs delivered", n, jobs)
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(jobs), "cpu-µs/job")
	b.ReportMetric(float64(allocs)/float64(jobs), "allocs/job")
}

// BenchmarkExecuteCPU is the in-process part of BenchmarkDeliverCPU, the
// network and Redis aside, so that a change of it shows above the noise of
// a shared machine: per op, one batch of 16 pre-claimed unsigned webhook
// jobs decoded (wire.DecodeBatch, store.PreClaimed) and each executed
// (WebhookExecutor.Execute: parse, circuit, request, classify) through a
// transport that answers 204 at once. cpu-ns/job: process CPU time (GC
// included); compare it before and after, alternately:
//
//	go test -run '^$' -bench ExecuteCPU -benchtime 20000x -cpu 1 ./internal/worker/
func BenchmarkExecuteCPU(b *testing.B) {
	rdb, prefix := redistest.New(b)
	st, err := store.NewStore(rdb, store.Config{Prefix: prefix, Shards: 16})
	if err != nil {
		b.Fatal(err)
	}
	exec := &worker.WebhookExecutor{Client: &http.Client{Transport: answer204{}}}
	reg := prometheus.NewRegistry()
	if exec.Costs, err = worker.NewCostReader(worker.NewUpstreamCache(st), reg, slog.New(slog.DiscardHandler)); err != nil {
		b.Fatal(err)
	}
	if exec.Circuits, err = worker.NewCircuits(worker.CircuitsConfig{Store: st, Registerer: reg}); err != nil {
		b.Fatal(err)
	}
	bt := wire.Batch{Shard: 3}
	for i := range 16 {
		spec := job.Spec{Type: wire.TypeWebhook, URL: fmt.Sprintf("http://127.0.0.1:8080/hooks/t%03d", i), Event: "invoice.paid",
			Payload: json.RawMessage(`{"id":"evt_1","amount":1200,"currency":"eur","customer":"cus_42"}`)}
		bt.Jobs = append(bt.Jobs, wire.Payload{ID: fmt.Sprintf("3-01JZ%020d", i), Gen: 2, SlotUS: 1_765_000_000_000_000 + int64(i),
			Claimed: &wire.Claimed{Tenant: fmt.Sprintf("t%03d", i), Type: wire.TypeWebhook, Body: string(spec.Canonical()), Attempt: 1,
				TimeoutUS: 30_000_000, SlotUS: 1_765_000_000_000_000, CreatedUS: 1_764_999_999_000_000, Cost: 1,
				Signing: &wire.Signing{NowUS: 1_765_000_000_000_000, Unsigned: true}}})
	}
	raw := wire.EncodeBatch(bt)
	ctx := context.Background()
	b.ReportAllocs()
	used := procstat.SelfCPU()
	for b.Loop() {
		got, err := wire.DecodeBatch(raw)
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range got.Jobs {
			cj, _ := store.PreClaimed(p)
			if o := exec.Execute(ctx, cj); o.Kind != wire.FinishSuccess {
				b.Fatalf("outcome %+v", o)
			}
		}
	}
	b.ReportMetric(float64((procstat.SelfCPU()-used).Nanoseconds())/float64(b.N*len(bt.Jobs)), "cpu-ns/job")
}

// answer204 is a transport whose every request gets a 204 at once, its body
// read and closed as net/http's transport would.
type answer204 struct{}

func (answer204) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return &http.Response{StatusCode: http.StatusNoContent, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Date": {"Sun, 06 Dec 2026 13:00:00 GMT"}}, Body: http.NoBody, Request: r}, nil
}
