package dispatch

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// A Dispatcher asks the coordinator for the upstream its passes found
// waiting and hands the grants to the next passes: the jobs of tenants on
// two shards that name an upstream at 50/s are all handed off, their send
// times obeying the upstream's bound B + R·Δ + 1 across both shards.
func TestDispatcherGrantsUpstreamSegments(t *testing.T) {
	t.Parallel()
	rdb, prefix, st := realStore(t, 2, 10_000)
	ctx := context.Background()
	const iv = 20 * time.Millisecond
	if err := rdb.HSet(ctx, store.UpstreamHashKey(prefix, "shared"), "p", `{"iv":20000,"b":1,"c":0,"a":0,"s":0}`, "v", 1).Err(); err != nil {
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
	start(t, Config{Store: st, Asynq: asynq.NewClientFromRedisClient(rdb), Redis: rdb, Prefix: prefix,
		Pass: store.PassConfig{Grace: time.Minute}, Registerer: prometheus.NewRegistry()})
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
}
