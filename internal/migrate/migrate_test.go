package migrate

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/redisscript"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

func TestMain(m *testing.M) { redistest.Main(m) }

const testShards = 4

// deployment is a small deployment in src under prefix: jobs queued for
// three tenants (one with an idempotency key), one scheduled an hour ahead,
// a tenant policy, some jobs released by a pass (leased), and the meta hash
// a throttler writes.
type deployment struct {
	prefix  string
	ids     []string
	idemID  string
	leased  int
	release []wire.Release
}

func newDeployment(t *testing.T, ctx context.Context, src redis.UniversalClient, prefix string) deployment {
	t.Helper()
	d := deployment{prefix: prefix}
	if _, _, err := store.WriteMeta(ctx, src, wire.Meta{Prefix: prefix, Shards: testShards,
		Lead: store.LeadDefault, MinLead: store.MinLeadDefault}); err != nil {
		t.Fatal(err)
	}
	st, err := store.NewStore(src, store.Config{Prefix: prefix, Shards: testShards})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutTenantPolicy(ctx, "acme", store.Overrides{}, 0); err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"acme", "globex", "initech"} {
		for i := range 10 {
			it := store.Item{Type: wire.TypeWebhook, Body: fmt.Appendf(nil, `{"url":"http://127.0.0.1:1/","event":"e","payload":{"i":%d}}`, i)}
			if tenant == "globex" && i == 0 {
				it.IdemKey, it.Fingerprint = "order-1", sha256.Sum256([]byte("order-1"))
			}
			if tenant == "initech" && i == 9 {
				it.Delay = time.Hour
			}
			rs, err := st.Enqueue(ctx, tenant, []store.Item{it})
			if err != nil || rs[0].Outcome != store.Accepted {
				t.Fatalf("enqueue for %s: %+v %v", tenant, rs, err)
			}
			d.ids = append(d.ids, rs[0].ID)
			if it.IdemKey != "" {
				d.idemID = rs[0].ID
			}
		}
	}
	// A canceled job's record has a TTL (the retention).
	if _, _, err := st.Cancel(ctx, d.ids[len(d.ids)-1]); err != nil {
		t.Fatal(err)
	}
	for shard := range testShards {
		res, err := st.Pass(ctx, shard, store.PassConfig{Lead: time.Second, MinLead: -1, Grace: time.Second, Capacity: 2})
		if err != nil {
			t.Fatal(err)
		}
		d.release = append(d.release, res.Released...)
	}
	d.leased = len(d.release)
	if d.leased == 0 {
		t.Fatal("the passes released nothing: the deployment has no leased jobs to carry over")
	}
	return d
}

// keysOf lists the keys under prefix on every master of c, sorted.
func keysOf(t *testing.T, ctx context.Context, c redis.UniversalClient, prefix string) []string {
	t.Helper()
	var (
		mu   sync.Mutex
		keys []string
	)
	err := redisscript.ForEachMaster(ctx, c, func(ctx context.Context, node redis.UniversalClient) error {
		ks, err := node.Keys(ctx, prefix+":*").Result()
		mu.Lock()
		defer mu.Unlock()
		keys = append(keys, ks...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	return keys
}

func TestCopyCarriesEveryKeyWithItsTTLAndTheTargetServesTheJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src, prefix := redistest.New(t)
	d := newDeployment(t, ctx, src, prefix)
	dst := redistest.NewCluster(t, redistest.ClusterConfig{NoReplicas: true}).Client()

	dry, err := Copy(ctx, src, dst, prefix, Options{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := keysOf(t, ctx, dst, prefix); len(got) != 0 {
		t.Fatalf("a dry run wrote %d keys: %v", len(got), got)
	}
	rep, err := Copy(ctx, src, dst, prefix, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := keysOf(t, ctx, src, prefix)
	got := keysOf(t, ctx, dst, prefix)
	if !slices.Equal(got, want) {
		t.Fatalf("target keys differ from the source's:\n got %v\nwant %v", got, want)
	}
	if rep.Keys != len(want) || dry.Keys != rep.Keys-1 || rep.Leased != d.leased || rep.ByKind["job"] != len(d.ids) {
		t.Fatalf("report %+v (dry run %+v): want %d keys (the dry run one less: meta), %d leased, %d job records",
			rep, dry, len(want), d.leased, len(d.ids))
	}
	for _, k := range want {
		st, dt := src.PTTL(ctx, k).Val(), dst.PTTL(ctx, k).Val()
		if !sameValue(ctx, src, dst, k) || (st < 0) != (dt < 0) || (st > 0 && (dt > st+time.Second || dt < st-time.Minute)) {
			t.Errorf("%s: value or TTL differ (ttl source %v, target %v)", k, st, dt)
		}
	}

	// The target is a working deployment: the records read back, the
	// idempotency key still answers with the first job, and a pass after
	// the leases expired re-releases the jobs that were handed off.
	tgt, err := store.NewStore(dst, store.Config{Prefix: prefix, Shards: testShards})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range d.ids {
		if _, err := tgt.GetJob(ctx, id); err != nil {
			t.Fatalf("job %s in the target: %v", id, err)
		}
	}
	rs, err := tgt.Enqueue(ctx, "globex", []store.Item{{Type: wire.TypeWebhook, IdemKey: "order-1", Fingerprint: sha256.Sum256([]byte("order-1")),
		Body: []byte(`{"url":"http://127.0.0.1:1/","event":"e","payload":{"i":0}}`)}})
	if err != nil || rs[0].Outcome != store.Duplicate || rs[0].ID != d.idemID {
		t.Fatalf("idempotent enqueue in the target: %+v %v; want a duplicate of %s", rs, err, d.idemID)
	}
	m, found, err := store.ReadMeta(ctx, dst, prefix)
	if err != nil || !found || m.Shards != testShards {
		t.Fatalf("meta in the target: %+v found=%v %v", m, found, err)
	}
}

// sameValue reports whether key holds the same value in a and b: a hash
// field by field (a large hash's DUMP lists its fields in table order,
// which a RESTORE may change), anything else byte for byte by DUMP.
func sameValue(ctx context.Context, a, b redis.UniversalClient, key string) bool {
	if a.Type(ctx, key).Val() == "hash" {
		return maps.Equal(a.HGetAll(ctx, key).Val(), b.HGetAll(ctx, key).Val())
	}
	return a.Dump(ctx, key).Val() == b.Dump(ctx, key).Val()
}

func TestCopyRefusesALiveDeploymentAndAnOccupiedTarget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src, prefix := redistest.New(t)
	newDeployment(t, ctx, src, prefix)
	dst := redistest.NewCluster(t, redistest.ClusterConfig{NoReplicas: true}).Client()
	st, err := store.NewStore(src, store.Config{Prefix: prefix, Shards: testShards})
	if err != nil {
		t.Fatal(err)
	}

	// A worker's unexpired heartbeat, then a dispatcher's lease: refused,
	// nothing written.
	if err := st.Heartbeat(ctx, "w1", 10, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := Copy(ctx, src, dst, prefix, Options{}); !errors.Is(err, ErrLive) || !strings.Contains(err.Error(), "worker") {
		t.Fatalf("copy with a live worker: %v; want ErrLive naming the workers", err)
	}
	// Stopped workers: one withdrew (concurrency 0, as a graceful stop
	// announces), one was killed and its heartbeat expired.
	if err := st.Heartbeat(ctx, "w1", 0, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := st.Heartbeat(ctx, "w2", 10, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	redistest.Poll(t, 5*time.Second, "the killed worker's heartbeat expires", func() bool {
		_, err := Copy(ctx, src, dst, prefix, Options{DryRun: true})
		return !errors.Is(err, ErrLive)
	})
	lease := dispatch.LeaseKey(prefix, 1)
	if err := src.Set(ctx, lease, "owner", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := Copy(ctx, src, dst, prefix, Options{}); !errors.Is(err, ErrLive) || !strings.Contains(err.Error(), lease) {
		t.Fatalf("copy with a dispatcher's lease: %v; want ErrLive naming %s", err, lease)
	}
	if got := keysOf(t, ctx, dst, prefix); len(got) != 0 {
		t.Fatalf("a refused copy wrote %v", got)
	}
	if err := src.Del(ctx, lease).Err(); err != nil {
		t.Fatal(err)
	}

	// An interrupted copy (keys, no meta) is completed by the next one;
	// a complete one is never overwritten.
	if _, err := Copy(ctx, src, dst, prefix, Options{}); err != nil {
		t.Fatal(err)
	}
	jobKey := keysOf(t, ctx, dst, prefix+":{s0}:j")
	if len(jobKey) == 0 {
		t.Fatal("no job record of shard 0 in the target")
	}
	if err := dst.Del(ctx, wire.MetaKey(prefix)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := dst.Set(ctx, jobKey[0], "garbage", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := Copy(ctx, src, dst, prefix, Options{}); err != nil {
		t.Fatalf("copy after an interrupted one: %v", err)
	}
	if !sameValue(ctx, src, dst, jobKey[0]) {
		t.Fatal("the second copy did not restore the key the interrupted one left wrong")
	}
	if err := dst.HSet(ctx, jobKey[0], "marker", "kept").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := Copy(ctx, src, dst, prefix, Options{}); !errors.Is(err, ErrTargetInUse) {
		t.Fatalf("copy onto a complete copy: %v; want ErrTargetInUse", err)
	}
	if dst.HGet(ctx, jobKey[0], "marker").Val() != "kept" {
		t.Fatal("a refused copy overwrote the target")
	}
}

func TestKindOfLeavesProcessKeysBehind(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]string{
		"p:meta":                 "",
		"p:workers":              "",
		"p:mw:default":           "",
		"p:dispatch:lease:3":     "",
		"p:dispatch:members":     "",
		"p:{s3}:j:j3_01H":        "job",
		"p:{s3}:t:acme":          "tenant",
		"p:{s3}:t:acme:q":        "tenant",
		"p:{s3}:idem:acme:k":     "tenant",
		"p:{s3}:ready":           "shard",
		"p:{s3}:policy":          "shard",
		"p:lim:{search}:k":       "other",
		"p:something-else-later": "other",
	} {
		if got := kindOf("p", key); got != want {
			t.Errorf("kindOf(%q) = %q, want %q", key, got, want)
		}
	}
}

// TestCopyFromAClusterWalksItsMastersAtOnce: a Cluster source's masters are
// copied concurrently (redisscript.ForEachMaster); every key arrives and
// the report counts each once (run with -race: the counts are per master).
func TestCopyFromAClusterWalksItsMastersAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := redistest.NewCluster(t, redistest.ClusterConfig{NoReplicas: true}).Client()
	dst, prefix := redistest.New(t)
	newDeployment(t, ctx, src, prefix)
	rep, err := Copy(ctx, src, dst, prefix, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := keysOf(t, ctx, src, prefix)
	if got := keysOf(t, ctx, dst, prefix); !slices.Equal(got, want) || rep.Keys != len(want) {
		t.Fatalf("copied %d keys (report %d), want %d", len(got), rep.Keys, len(want))
	}
}
