package store

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/wire"
)

// Past Redis's maxmemory (noeviction) the functions delivery needs still
// run — the pass releases, claim and finish deliver, and finish frees the
// succeeded jobs' bodies — while the ones that add state are refused by
// Redis before they run and change nothing (issue #18).
func TestFunctionsPastMaxmemory(t *testing.T) {
	t.Parallel()
	rdb := redistest.NewPrivate(t).Client(t)
	clock := &fakeClock{t: epoch}
	st, err := NewStore(rdb, Config{Prefix: redistest.Prefix(t), Shards: 1, Clock: clock.Now, Planner: testPlanner})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ctx: context.Background(), rdb: rdb, store: st, clock: clock}
	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Concurrency = 1000, 100, 100 }))
	body := `{"url":"https://example.com/hook","payload":"` + strings.Repeat("x", 20_000) + `"}`
	// One delivery first: it creates the shard's finished-jobs counter (a
	// key of its own, a few KB of used_memory here), so the figure below is
	// what the 40 deliveries free.
	e.enqueueOne("warm", item(`{}`))
	warm := e.passTenant("warm", time.Second, -1)
	e.claimAt(warm[0])
	e.finish(warm[0].ID, warm[0].Gen, wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 204}, FinishConfig{})
	var jobs []string
	for range 40 {
		jobs = append(jobs, e.enqueueOne("acme", item(body)).ID)
	}
	// maxmemory is set margin below the memory used now. Redis's figure
	// moves by the clients' buffers (a 20 kB command's query buffer, kept
	// or shrunk by clientsCron) between here and the refused calls: with
	// 100 kB the pause once ran under a loaded suite (used had dropped below
	// maxmemory). The 40 deliveries free ~800 kB, so the drain still ends
	// below it.
	const margin = 300_000
	used := redistest.UsedMemory(t, rdb)
	if err := rdb.ConfigSet(e.ctx, "maxmemory", strconv.FormatInt(used-margin, 10)).Err(); err != nil {
		t.Fatal(err)
	}

	keys := rdb.DBSize(e.ctx).Val()
	if _, err := st.Enqueue(e.ctx, "acme", []Item{item(body)}); !redis.IsOOMError(err) {
		t.Fatalf("enqueue past maxmemory: %v, want Redis's OOM refusal", err)
	}
	if err := st.Pause(e.ctx, "acme", time.Time{}); !redis.IsOOMError(err) {
		t.Errorf("pause past maxmemory: %v, want Redis's OOM refusal", err)
	}
	if n := rdb.DBSize(e.ctx).Val(); n != keys {
		t.Errorf("the refused enqueue and pause changed the number of keys: %d → %d", keys, n)
	}

	rel := e.passTenant("acme", time.Second, -1)
	if len(rel) != len(jobs) {
		t.Fatalf("the pass past maxmemory released %d jobs, want %d", len(rel), len(jobs))
	}
	ok := wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 204, Latency: time.Millisecond}
	for _, r := range rel {
		e.claimAt(r)
		if s := e.finish(r.ID, r.Gen, ok, FinishConfig{}); s != StateSucceeded {
			t.Fatalf("finish %s past maxmemory: %s, want succeeded", r.ID, s)
		}
	}
	if got := e.state("acme"); got.Backlog != 0 {
		t.Errorf("backlog after delivering every job: %d, want 0", got.Backlog)
	}
	after := redistest.UsedMemory(t, rdb)
	if freed := used - after; freed < int64(len(jobs))*10_000 {
		t.Errorf("delivering %d jobs of 20 kB freed %d bytes (used %d → %d), want ≥ %d (their bodies)",
			len(jobs), freed, used, after, len(jobs)*10_000)
	}
	if after >= used-margin {
		t.Fatalf("still past maxmemory after the drain: used %d", after)
	}
	if _, err := st.Enqueue(e.ctx, "acme", []Item{item(body)}); err != nil {
		t.Errorf("enqueue once delivery freed memory: %v", err)
	}
}
