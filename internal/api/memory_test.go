package api

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redisscript"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestMemoryHighWater: with redis.memory_high_water 0.5, enqueue is refused
// (507 storage_full, Retry-After, counted, nothing stored) once Redis uses
// half its maxmemory — while Redis itself still has room —, a reading
// serves for a second, enqueue is accepted again by itself once memory is
// freed (here by cancels, which drop the bodies), and a burst between two
// readings stops at the mark.
func TestMemoryHighWater(t *testing.T) {
	t.Parallel()
	red := startPrivateRedis(t)
	f, rdb, _ := newPrivateFixture(t, red, func(o *Options, _ redis.UniversalClient, _ string) { o.MemoryHighWater = 0.5 })
	clock := &testClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	f.srv.memory.now = clock.Now
	ctx := context.Background()
	big := `{"type":"webhook","url":"https://example.com/hook","event":"e","payload":{"pad":"` + strings.Repeat("x", 100_000) + `"}}`

	if r := f.post(t, "/v1/tenants/acme-1/jobs", producerToken, hook(1)); r.status != 202 { // loads the functions
		t.Fatalf("first enqueue: %d %v", r.status, r.body)
	}
	mark := memoryOf(t, rdb).used + 1<<20
	maxmemory := 2 * mark
	if err := rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(maxmemory, 10)).Err(); err != nil {
		t.Fatal(err)
	}

	var ids []string
	var full response
	var before int64
	for i := 0; ; i++ {
		if i == 40 {
			t.Fatalf("no 507 after %d enqueues of 100 kB, high-water mark at %d B", i, mark)
		}
		clock.Advance(memoryReadEvery) // a fresh reading for each
		before = rdb.DBSize(ctx).Val()
		r := f.post(t, "/v1/tenants/acme-1/jobs", producerToken, big, HeaderIdempotencyKey, fmt.Sprint("fill-", i))
		if r.status != http.StatusAccepted {
			full = r
			break
		}
		ids = append(ids, r.body["id"].(string))
	}
	m := memoryOf(t, rdb)
	msg, _ := full.body["error"].(map[string]any)["message"].(string)
	if full.status != http.StatusInsufficientStorage || errorCode(full) != CodeStorageFull ||
		full.header.Get("Retry-After") != strconv.Itoa(StorageFullRetryAfter) || !strings.Contains(msg, "high-water") {
		t.Errorf("enqueue above the mark: %d %q Retry-After %q message %q, want 507 %s Retry-After %d naming the high-water mark",
			full.status, errorCode(full), full.header.Get("Retry-After"), msg, CodeStorageFull, StorageFullRetryAfter)
	}
	if m.used < mark || m.used >= maxmemory {
		t.Errorf("refused at used_memory %d B, want from the mark %d B to below maxmemory %d B", m.used, mark, maxmemory)
	}
	if after := rdb.DBSize(ctx).Val(); after != before {
		t.Errorf("the refused enqueue changed the number of keys: %d → %d", before, after)
	}
	batch := f.post(t, "/v1/tenants/acme-1/jobs:batch", producerToken, `{"jobs":[`+hook(7)+`]}`)
	if batch.status != http.StatusInsufficientStorage || errorCode(batch) != CodeStorageFull {
		t.Errorf("batch above the mark: %d %q, want 507 %s", batch.status, errorCode(batch), CodeStorageFull)
	}
	if n := testutil.ToFloat64(f.metrics.StorageFull); n != 2 {
		t.Errorf("sluice_api_storage_full_total = %v, want 2", n)
	}

	// Memory freed: the reading of the same second still refuses; the next
	// second's accepts.
	for _, id := range ids {
		if r := f.send(t, "DELETE", "/v1/jobs/"+id, producerToken, nil); r.status != http.StatusOK {
			t.Fatalf("cancel %s: %d %v", id, r.status, r.body)
		}
	}
	if m := memoryOf(t, rdb); m.used >= mark {
		t.Fatalf("used_memory %d B after canceling every job, still above the mark %d B", m.used, mark)
	}
	if r := f.post(t, "/v1/tenants/acme-1/jobs", producerToken, hook(8)); r.status != http.StatusInsufficientStorage {
		t.Errorf("enqueue within a second of the reading: %d, want 507 (a reading serves for a second)", r.status)
	}
	clock.Advance(memoryReadEvery)
	if r := f.post(t, "/v1/tenants/acme-1/jobs", producerToken, hook(9)); r.status != http.StatusAccepted {
		t.Errorf("enqueue a second later, memory freed: %d %v, want 202", r.status, r.body)
	}

	// Within one reading's second, the jobs this process stores count: a
	// burst stops near the mark, not a second's worth of enqueues past it.
	room := mark - memoryOf(t, rdb).used
	for i := 0; ; i++ {
		if int64(i) > room/100_000+2 {
			t.Fatalf("%d enqueues of 100 kB within one reading, %d B under the mark, and no 507", i, room)
		}
		if r := f.post(t, "/v1/tenants/acme-1/jobs", producerToken, big); r.status == http.StatusInsufficientStorage {
			break
		}
	}
	if m := memoryOf(t, rdb); m.used >= mark+150_000 {
		t.Errorf("a burst within one reading stopped at used_memory %d B, want about the mark %d B", m.used, mark)
	}
}

// memoryOf reads used_memory and maxmemory of rdb.
func memoryOf(t *testing.T, rdb redis.UniversalClient) (m struct{ used, max int64 }) {
	t.Helper()
	used, max, err := redisscript.ReadMemory(context.Background(), rdb)
	if err != nil {
		t.Fatal(err)
	}
	m.used, m.max = used, max
	return m
}

func TestMemoryRetryAfter(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		m    nodeMemory
		mark int64
		want int64
	}{
		{"first reading", nodeMemory{used: 1000, at: at}, 900, StorageFullRetryAfter},
		{"growing", nodeMemory{used: 1000, at: at, prevUsed: 950, prevAt: at.Add(-time.Second)}, 900, StorageFullRetryAfter},
		{"flat", nodeMemory{used: 1000, at: at, prevUsed: 1000, prevAt: at.Add(-time.Second)}, 900, StorageFullRetryAfter},
		{"100 B/s, 100 B over", nodeMemory{used: 1000, at: at, prevUsed: 1100, prevAt: at.Add(-time.Second)}, 900, 1},
		{"50 B/s, 100 B over", nodeMemory{used: 1000, at: at, prevUsed: 1100, prevAt: at.Add(-2 * time.Second)}, 900, 2},
		{"10 B/s, 250 B over: rounded up", nodeMemory{used: 1150, at: at, prevUsed: 1160, prevAt: at.Add(-time.Second)}, 900, 25},
		{"1 B/s, 1000 B over: capped", nodeMemory{used: 1900, at: at, prevUsed: 1901, prevAt: at.Add(-time.Second)}, 900, maxMemoryRetryAfter},
	} {
		if got := tc.m.retryAfter(tc.mark); got != tc.want {
			t.Errorf("%s: retryAfter = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// The guard reads the master that holds the key's slot — on a Cluster,
// each shard's own — and never refuses a Redis without maxmemory.
func TestMemoryGuardReadsTheShardsMaster(t *testing.T) {
	t.Parallel()
	rdb, prefix := redistest.New(t)
	ctx := context.Background()
	g := newMemoryGuard(rdb, 0.9, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for shard := range 8 {
		key := fmt.Sprintf("%s:{s%d}:t:acme:q", prefix, shard)
		node, refusal := g.admit(ctx, key)
		if refusal != nil {
			t.Fatalf("%s: refused by a Redis without maxmemory: %v", key, refusal)
		}
		g.mu.Lock()
		m := g.nodes[node]
		g.mu.Unlock()
		if m == nil || m.at.IsZero() || m.used <= 0 || m.max != 0 {
			t.Fatalf("%s: reading of node %q = %+v, want used_memory > 0 and no maxmemory", key, node, m)
		}
		if want := slotMaster(t, rdb, key); node != want {
			t.Errorf("%s: read node %q, want the master of its slot %q", key, node, want)
		}
	}
}

// slotMaster is the address of the master holding key's slot on a
// Cluster, "" for any other client.
func slotMaster(t *testing.T, rdb redis.UniversalClient, key string) string {
	t.Helper()
	c, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return ""
	}
	ctx := context.Background()
	slot, err := c.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	slots, err := c.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slots {
		if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
			return s.Nodes[0].Addr
		}
	}
	t.Fatalf("no master holds slot %d of %s", slot, key)
	return ""
}
