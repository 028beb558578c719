package dispatch

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/upstream"
	"github.com/sluicehq/sluice/internal/wire"
)

// countingStore counts the coordinator calls of a real store.
type countingStore struct {
	*store.Store
	grants atomic.Int64
}

func (c *countingStore) GrantUpstreams(ctx context.Context, shard int, demand []store.UpstreamDemand, cfg store.GrantConfig) ([]store.UpstreamGrant, error) {
	c.grants.Add(1)
	return c.Store.GrantUpstreams(ctx, shard, demand, cfg)
}

// A Dispatcher asks the coordinator for the upstream its passes found
// waiting and hands the grants to the next passes: the jobs of tenants on
// two shards that name an upstream at 50/s are all handed off, their send
// times obeying the upstream's bound B + R·Δ + 1 across both shards. Once
// nothing waits, passes go on without asking (an idle upstream costs
// nothing).
func TestDispatcherGrantsUpstreamSegments(t *testing.T) {
	t.Parallel()
	rdb, prefix, st := realStore(t, 2, 10_000)
	ctx := context.Background()
	const iv = 20 * time.Millisecond
	rate, err := bucket.ParseRate("50/s")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutUpstream(ctx, "shared", upstream.Config{Rate: rate, Burst: 1}, store.SourceAPI, ""); err != nil {
		t.Fatal(err)
	}
	var tenants []string
	for i := 0; len(tenants) < 2; i++ {
		if tn := fmt.Sprintf("t%d", i); store.ShardOf(tn, 2) == len(tenants) {
			tenants = append(tenants, tn)
		}
	}
	for _, tn := range tenants {
		if _, err := st.PutTenantPolicy(ctx, tn, store.Overrides{RateUS: ptrInt(1000), Burst: ptrInt(10), Concurrency: ptrInt(1000)}, 0); err != nil {
			t.Fatal(err)
		}
		items := make([]store.Item, 15)
		for j := range items {
			items[j] = store.Item{Type: wire.TypeWebhook, Body: []byte(`{}`), Upstreams: []string{"shared"}}
		}
		if _, err := st.Enqueue(ctx, tn, items); err != nil {
			t.Fatal(err)
		}
	}
	cs := &countingStore{Store: st}
	d := start(t, Config{Store: cs, Asynq: asynq.NewClientFromRedisClient(rdb), Redis: rdb, Prefix: prefix,
		Pass: store.PassConfig{Grace: time.Minute}, MaxSleep: 20 * time.Millisecond, Registerer: prometheus.NewRegistry()})
	in := asynq.NewInspectorFromRedisClient(rdb)
	var sends []int64
	redistest.PollMsg(t, 10*time.Second, func() (bool, string) {
		sends = nil
		for shard := range 2 {
			for _, ti := range pending(t, in, wire.HandoffQueueOf(prefix, shard)) {
				b, err := wire.DecodeBatch(ti.Payload)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range b.Jobs {
					sends = append(sends, p.SlotUS)
				}
			}
		}
		return len(sends) == 30, fmt.Sprintf("%d of 30 jobs handed off", len(sends))
	})
	slices.Sort(sends)
	for i := range sends {
		for j := i; j < len(sends); j++ {
			window := time.Duration(sends[j]-sends[i]) * time.Microsecond
			if n := j - i + 1; time.Duration(n)*iv > 2*iv+window { // n ≤ B + Δ/T + 1, B = 1
				t.Fatalf("%d jobs sent within %v: above the upstream's bound", n, window)
			}
		}
	}
	if span := time.Duration(sends[29]-sends[0]) * time.Microsecond; span < 28*iv {
		t.Fatalf("30 jobs over %v at 50/s, want ≥ %v", span, 28*iv)
	}
	asked := cs.grants.Load()
	if asked == 0 {
		t.Fatal("no coordinator call")
	}
	passes := testutil.ToFloat64(d.metrics.passes)
	redistest.Poll(t, 5*time.Second, "ten more passes", func() bool { return testutil.ToFloat64(d.metrics.passes) >= passes+10 })
	if n := cs.grants.Load(); n != asked {
		t.Fatalf("%d coordinator calls after the last job left (%d before): an idle upstream must cost nothing", n-asked, asked)
	}
	t.Logf("30 jobs: %d coordinator calls", asked)
}

// Jobs naming two upstreams while other shards saturate each (issue #15):
// shard 1's tenant keeps u1 busy and shard 2's keeps u2 busy (150 jobs each,
// 3 s at 50/s), and shard 0's tenant has 10 jobs naming both. The
// Dispatcher asks for aligned segments: all 10 are handed off before
// either other shard handed off 50 (a second of its upstream; on main,
// without aligned grants, they had handed off 110 each, 3.4 s), and the send
// times of the jobs naming each upstream obey its bound B + R·Δ + 1.
func TestDispatcherAlignsMultiUpstreamJobs(t *testing.T) {
	t.Parallel()
	rdb, prefix, st := realStore(t, 3, 10_000)
	ctx := context.Background()
	const iv = 20 * time.Millisecond
	rate, err := bucket.ParseRate("50/s")
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"u1", "u2"} {
		if _, err := st.PutUpstream(ctx, u, upstream.Config{Rate: rate, Burst: 1}, store.SourceAPI, ""); err != nil {
			t.Fatal(err)
		}
	}
	tenants := make([]string, 3) // tenants[i] on shard i
	for i := 0; tenants[0] == "" || tenants[1] == "" || tenants[2] == ""; i++ {
		tn := fmt.Sprintf("t%d", i)
		if sh := store.ShardOf(tn, 3); tenants[sh] == "" {
			tenants[sh] = tn
		}
	}
	enqueue := func(tn string, n int, ups ...string) {
		if _, err := st.PutTenantPolicy(ctx, tn, store.Overrides{RateUS: ptrInt(1000), Burst: ptrInt(10), Concurrency: ptrInt(1000)}, 0); err != nil {
			t.Fatal(err)
		}
		items := make([]store.Item, n)
		for j := range items {
			items[j] = store.Item{Type: wire.TypeWebhook, Body: []byte(`{}`), Upstreams: ups}
		}
		if _, err := st.Enqueue(ctx, tn, items); err != nil {
			t.Fatal(err)
		}
	}
	enqueue(tenants[1], 150, "u1")
	enqueue(tenants[2], 150, "u2")
	enqueue(tenants[0], 10, "u1", "u2")
	start(t, Config{Store: st, Asynq: asynq.NewClientFromRedisClient(rdb), Redis: rdb, Prefix: prefix,
		Pass: store.PassConfig{Grace: time.Minute}, MaxSleep: 20 * time.Millisecond, Registerer: prometheus.NewRegistry()})
	in := asynq.NewInspectorFromRedisClient(rdb)
	var sends [3][]int64 // by shard
	redistest.PollMsg(t, 10*time.Second, func() (bool, string) {
		for shard := range 3 {
			sends[shard] = nil
			for _, ti := range pending(t, in, wire.HandoffQueueOf(prefix, shard)) {
				b, err := wire.DecodeBatch(ti.Payload)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range b.Jobs {
					sends[shard] = append(sends[shard], p.SlotUS)
				}
			}
		}
		return len(sends[0]) == 10, fmt.Sprintf("%d of shard 0's 10 jobs naming u1 and u2 handed off", len(sends[0]))
	})
	for shard := 1; shard < 3; shard++ { // about a second of its upstream: shard 0 shared it
		if n := len(sends[shard]); n > 50 {
			t.Fatalf("shard %d handed off %d jobs before shard 0's 10 naming both upstreams left, want ≤ 50", shard, n)
		}
	}
	for u, shard := range []int{1, 2} { // u1: shards 0 and 1; u2: shards 0 and 2
		all := slices.Concat(sends[0], sends[shard])
		slices.Sort(all)
		for i := range all {
			for j := i; j < len(all); j++ {
				window := time.Duration(all[j]-all[i]) * time.Microsecond
				if n := j - i + 1; time.Duration(n)*iv > 2*iv+window { // n ≤ B + Δ/T + 1, B = 1
					t.Fatalf("u%d: %d jobs sent within %v: above the upstream's bound", u+1, n, window)
				}
			}
		}
	}
	slices.Sort(sends[0])
	t.Logf("shard 0's 10 jobs sent over %v; meanwhile shard 1 handed off %d, shard 2 %d",
		time.Duration(sends[0][9]-sends[0][0])*time.Microsecond, len(sends[1]), len(sends[2]))
}
