package api

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
)

// waitFixture serves the API with its store on the primary of a Sentinel
// setup (one replica) and redis.wait_replicas 1; it returns the fixture,
// a client of the replica, and the prefix.
func waitFixture(t *testing.T) (*fixture, *redis.Client, string) {
	t.Helper()
	sen := redistest.NewSentinel(t)
	primary := sen.Client()
	t.Cleanup(func() { _ = primary.Close() })
	replica := redis.NewClient(&redis.Options{Addr: sen.DataAddrs()[1]})
	t.Cleanup(func() { _ = replica.Close() })
	var prefix string
	f := newFixture(t, func(o *Options, _ redis.UniversalClient, p string) {
		prefix = p
		st, err := store.NewStore(primary, store.Config{Prefix: p, Shards: 4, WaitReplicas: 1, WaitTimeout: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		o.Store, o.Redis, o.FileSigned = st, primary, fileSigned
	})
	return f, replica, prefix
}

// onReplica reports whether job id's record is on the replica.
func onReplica(t *testing.T, replica *redis.Client, prefix, id string) bool {
	t.Helper()
	key := prefix + ":{s" + strconv.Itoa(mustShard(t, id)) + "}:j:" + id
	n, err := replica.Exists(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// requireNotReplicated checks a 503 replication_timeout naming job id (any
// id when id is "") and returns the id it names.
func requireNotReplicated(t *testing.T, r response, id string) string {
	t.Helper()
	e, _ := r.body["error"].(map[string]any)
	got, _ := e["job_id"].(string)
	msg, _ := e["message"].(string)
	if r.status != http.StatusServiceUnavailable || e["code"] != CodeReplicationTimeout || got == "" ||
		(id != "" && got != id) || !strings.Contains(msg, "possibly stored") || !strings.Contains(msg, got) ||
		r.header.Get("Retry-After") != "1" {
		t.Fatalf("got %d %v (Retry-After %q), want 503 replication_timeout naming job %q", r.status, r.body, r.header.Get("Retry-After"), id)
	}
	return got
}

// With wait_replicas 1: a 202 means the job is on the replica; with the
// replica paused (CLIENT PAUSE WRITE: it stops applying the primary's
// stream) an enqueue, a batch and a replay answer 503 replication_timeout
// with the job id, and the retries with the same idempotency keys once the
// replica is back answer 202 with the same jobs — none stored twice.
func TestWaitReplicasOverHTTP(t *testing.T) {
	t.Parallel()
	f, replica, prefix := waitFixture(t)
	ctx := context.Background()
	const tenant = "acme-w"
	path := "/v1/tenants/" + tenant + "/jobs"

	id1 := requireAccepted(t, f.post(t, path, producerToken, hook(1), HeaderIdempotencyKey, "k1"), tenant, "queued")
	if !onReplica(t, replica, prefix, id1) {
		t.Fatalf("job %s answered 202 but is not on the replica", id1)
	}
	dead := killJob(t, f.srv.opts.Store, mustShard(t, id1))

	if err := replica.Do(ctx, "CLIENT", "PAUSE", 60_000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	unpaused := false
	unpause := func() {
		if !unpaused {
			unpaused = true
			if err := replica.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(unpause)

	id2 := requireNotReplicated(t, f.post(t, path, producerToken, hook(2), HeaderIdempotencyKey, "k2"), "")
	if r := f.get(t, "/v1/jobs/"+id2, producerToken); r.status != 200 || r.body["state"] != "queued" {
		t.Fatalf("the possibly stored job on the primary: %d %v", r.status, r.body)
	}
	requireNotReplicated(t, f.post(t, path, producerToken, hook(2), HeaderIdempotencyKey, "k2"), id2) // still paused
	b := f.post(t, path+":batch", producerToken, batch(`{"type":"webhook","url":"https://example.com/hook","event":"e","idempotency_key":"b1"}`))
	items := results(t, b)
	idB, _ := items[0]["id"].(string)
	if b.status != http.StatusServiceUnavailable || errorCode(b) != CodeReplicationTimeout || items[0]["status"] != 503.0 || idB == "" ||
		b.header.Get("Retry-After") != "1" {
		t.Fatalf("batch: %d %v, want 503 replication_timeout with the item's job id", b.status, b.body)
	}
	requireNotReplicated(t, f.post(t, "/v1/jobs/"+dead+"/replay", producerToken, ""), dead)
	if got := testutil.ToFloat64(f.metrics.ReplicationTimeouts.WithLabelValues("enqueue")); got != 2 {
		t.Errorf("replication timeouts of enqueue: %v, want 2", got)
	}
	for _, id := range []string{id2, idB, dead} {
		if r := f.get(t, "/v1/jobs/"+id, producerToken); r.status != 200 || r.body["state"] != "queued" {
			t.Fatalf("job %s on the primary: %d %v", id, r.status, r.body)
		}
	}

	unpause()
	r := f.post(t, path, producerToken, hook(2), HeaderIdempotencyKey, "k2")
	if requireAccepted(t, r, tenant, "queued") != id2 || r.header.Get(HeaderReplayed) != "true" {
		t.Fatalf("retry after the replica is back: %v, want job %s replayed", r.body, id2)
	}
	b = f.post(t, path+":batch", producerToken, batch(`{"type":"webhook","url":"https://example.com/hook","event":"e","idempotency_key":"b1"}`))
	if items := results(t, b); b.status != 202 || items[0]["id"] != idB || items[0]["idempotent_replayed"] != true {
		t.Fatalf("batch retry: %d %v, want job %s replayed", b.status, b.body, idB)
	}
	for _, id := range []string{id2, idB, dead} {
		if !onReplica(t, replica, prefix, id) {
			t.Fatalf("job %s confirmed but not on the replica", id)
		}
	}
	if r := f.get(t, "/v1/tenants/"+tenant, producerToken); r.body["backlog"] != 3.0 {
		t.Fatalf("tenant: %v, want a backlog of 3 (k2, b1, the replayed job): nothing stored twice", r.body)
	}
}

func mustShard(t *testing.T, id string) int {
	t.Helper()
	shard, err := store.ShardOfJobID(id)
	if err != nil {
		t.Fatal(err)
	}
	return shard
}
