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
