package store

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/wire"
)

// BenchmarkManyTenants measures what the number of tenants costs Redis,
// at the store alone (no dispatcher, worker or asynq; the million part of
// bench/dispatch measures them all, in many more minutes): T tenants × 2
// webhook jobs with 1 KiB payloads, enqueued pipelined into a private Redis
// (16 shards, hash-max-listpack-value 2048, rate 1000/s, burst 2), then
// drained on a fake clock by passes of up to 100 jobs per shard, each
// followed by a ClaimBatch and a FinishBatch of its jobs (the dispatcher's
// and the Coalescer's shapes). Reported:
//
//	mem-B/job         used_memory growth over the enqueue ÷ jobs: a queued
//	                  job with its share of its tenant's state
//	cmds/job          Redis commands per delivered job (INFO commandstats)
//	redis-cpu-µs/job  the server's CPU time per delivered job (INFO cpu)
//	vm-functions-B    the Functions VM's heap after the drain
//
// SLUICE_BENCH_TENANTS lists the tenant counts (default 1000,100000);
// SLUICE_BENCH_PAD=N first stores N more tenants × 2 jobs under another
// prefix that nothing touches again: the keyspace of a larger run without
// its tenants' work, which tells the cache misses of a larger keyspace
// from the cost of the tenants themselves. Run it alone (-run '^$' -bench
// ManyTenants -benchtime 1x): one op is one whole drain.
func BenchmarkManyTenants(b *testing.B) {
	counts := []int{1000, 100_000}
	if v := os.Getenv("SLUICE_BENCH_TENANTS"); v != "" {
		counts = counts[:0]
		for _, s := range strings.Split(v, ",") {
			n, err := strconv.Atoi(s)
			if err != nil {
				b.Fatalf("SLUICE_BENCH_TENANTS: %v", err)
			}
			counts = append(counts, n)
		}
	}
	pad, _ := strconv.Atoi(os.Getenv("SLUICE_BENCH_PAD"))
	for _, n := range counts {
		b.Run(fmt.Sprintf("tenants=%d/pad=%d", n, pad), func(b *testing.B) { benchmarkManyTenants(b, n, pad) })
	}
}

const manyTenantsShards = 16

func benchmarkManyTenants(b *testing.B, tenants, pad int) {
	rdb := redistest.NewPrivate(b, "--hash-max-listpack-value", strconv.Itoa(HashListpackValueWant)).Client(b)
	body := kibJob(b)
	if pad > 0 {
		manyTenantsEnv(b, rdb, "pad").enqueueTwo("p", pad, body)
	}
	e := manyTenantsEnv(b, rdb, "sluice")
	mem0 := redistest.UsedMemory(b, rdb)
	e.enqueueTwo("m", tenants, body)
	jobs := 2 * tenants
	memPerJob := float64(redistest.UsedMemory(b, rdb)-mem0) / float64(jobs)
	cfg := PassConfig{Lead: 90 * ms, MinLead: 50 * ms, Grace: time.Second, Capacity: 100}
	var stats commandStats
	b.ResetTimer()
	for range b.N {
		before := e.commandStats()
		for done := 0; done < jobs; {
			n := 0
			for shard := range manyTenantsShards {
				n += e.deliverPass(shard, cfg)
			}
			if n == 0 {
				e.clock.Advance(ms)
			}
			done += n
		}
		stats.add(e.commandStats().minus(before))
	}
	b.ReportMetric(memPerJob, "mem-B/job")
	b.ReportMetric(float64(stats.calls)/float64(jobs*b.N), "cmds/job")
	b.ReportMetric(float64(stats.cpu)/float64(jobs*b.N), "redis-cpu-µs/job")
	b.ReportMetric(float64(infoInt(b, rdb, "memory", "used_memory_vm_functions")), "vm-functions-B")
}

// kibJob is the canonical body of a webhook job with a 1 KiB payload, as
// bench/dispatch's million part sends.
func kibJob(t testing.TB) []byte {
	t.Helper()
	spec, err := job.Parse([]byte(`{"type":"webhook","url":"http://127.0.0.1:40000/million","event":"bench.million",` +
		`"payload":{"pad":"` + strings.Repeat("x", 1024-len(`{"pad":""}`)) + `"}}`))
	if err != nil {
		t.Fatal(err)
	}
	return spec.Canonical()
}

// manyTenantsEnv is a Store on rdb under prefix with 16 shards and a fake
// clock, its defaults seeded at 1000/s, burst 2.
func manyTenantsEnv(t testing.TB, rdb *redis.Client, prefix string) *env {
	t.Helper()
	clock := &fakeClock{t: epoch}
	st, err := NewStore(rdb, Config{Prefix: prefix, Shards: manyTenantsShards, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ctx: t.Context(), rdb: rdb, prefix: prefix, store: st, clock: clock}
	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Concurrency = 1000, 2, 1000 }))
	return e
}

// enqueueTwo stores two jobs of body for each of n tenants named
// <name><7 digits>, pipelined.
func (e *env) enqueueTwo(name string, n int, body []byte) {
	e.t.Helper()
	it := Item{Type: wire.TypeWebhook, Cost: 1, Body: body}
	e.pipelined(scriptEnqueue, n, func(i int) (int, []any) {
		tn := fmt.Sprintf("%s%07d", name, i)
		shard := e.store.keys.shardOf(tn)
		args, err := e.store.enqueueArgs(tn, shard, []Item{it, it})
		if err != nil {
			e.t.Fatal(err)
		}
		return shard, enqueueArgv([]*enqueueReq{{args: args}})
	})
}

// deliverPass runs one pass on shard, claims what it released at the last
// send time and finishes it with a success, each in one batch; it returns
// the jobs delivered.
func (e *env) deliverPass(shard int, cfg PassConfig) int {
	e.t.Helper()
	rel := e.pass(shard, cfg).Released
	if len(rel) == 0 {
		return 0
	}
	e.clock.Set(rel[len(rel)-1].SendAt)
	for _, c := range e.claimBatch(shard, claimReqs(rel...)...) {
		if c.Outcome != ClaimOK {
			e.t.Fatalf("claim: %+v", c)
		}
	}
	reqs := make([]FinishRequest, len(rel))
	for i, r := range rel {
		reqs[i] = FinishRequest{ID: r.ID, Gen: r.Gen, Outcome: benchOK}
	}
	rs, err := e.store.FinishBatch(e.ctx, shard, reqs, FinishConfig{})
	if err != nil {
		e.t.Fatal(err)
	}
	for i, r := range rs {
		if r.State != StateSucceeded {
			e.t.Fatalf("finish %s: %+v", rel[i].ID, r)
		}
	}
	return len(rel)
}

// infoInt is one integer field of rdb's INFO section.
func infoInt(t testing.TB, rdb *redis.Client, section, field string) int64 {
	t.Helper()
	info, err := rdb.Info(t.Context(), section).Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("INFO %s %s: %v", section, field, err)
			}
			return n
		}
	}
	t.Fatalf("INFO %s: no %s", section, field)
	return 0
}
