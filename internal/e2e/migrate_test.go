package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
)

// TestMigrateToAClusterLosesNothing moves a running deployment from one
// redis-server to a Redis Cluster the way docs/operations.md says: 300 webhooks
// over 3 tenants at 20/s on the single node; once about a third have
// arrived, the worker and the throttler are stopped with SIGTERM; `throttler
// migrate --from <single node>` copies the keys to the Cluster the
// configuration names; a throttler and a worker started on the Cluster
// deliver the rest. Every job arrives exactly once (the jobs handed to
// asynq on the single node come back by the sweep on the Cluster) and no
// tenant's arrivals exceed its bound across the switch.
func TestMigrateToAClusterLosesNothing(t *testing.T) {
	t.Parallel()
	const n, rate = 100, 20.0
	tenants := []string{"acme", "globex", "initech"}
	port := freePort(t)
	startRedisAOF(t, port, t.TempDir(), "everysec")
	source := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	target := redistest.NewCluster(t, redistest.ClusterConfig{NoReplicas: true})

	o := options{redisURL: source, tenants: map[string]string{}}
	for _, tn := range tenants {
		o.tenants[tn] = fmt.Sprintf("{rate: %.0f/s, burst: 1, concurrency: 50}", rate)
	}
	c := newCluster(t, o)
	srcStore := storeOn(t, c, redistest.NewClient(t, &redisOptions{Addrs: []string{fmt.Sprintf("127.0.0.1:%d", port)}}))
	dstStore := storeOn(t, c, target.Client())
	c.recv.jobs = eitherStore{dstStore, srcStore} // before any traffic

	th := c.startThrottler()
	w := c.startWorker()
	var ids []string
	for _, tn := range tenants {
		ids = append(ids, c.enqueue(th, tn, n)...)
	}
	c.recv.waitUntil(t, 60*time.Second, func() bool { return len(c.recv.arrivals("")) >= len(ids)/3 },
		func() string { return fmt.Sprintf("%d of %d jobs arrived", len(c.recv.arrivals("")), len(ids)) })
	w.term(15 * time.Second)
	th.term(15 * time.Second)
	before := len(c.recv.arrivals(""))

	m := startProc(t, "migrate", bin.throttler, []string{"migrate", "--from", source, "--config", c.cfgPath},
		map[string]string{"SLUICE_REDIS_URL": target.URL()})
	m.exit0(60 * time.Second)
	if out := m.logs.String(); !strings.Contains(out, "migrate: copied") {
		t.Fatalf("migrate printed no report:\n%s", out)
	}
	t.Logf("%d of %d jobs delivered before the switch; %s", before, len(ids), strings.TrimSpace(m.logs.String()))

	c.redisURL = target.URL()
	th = c.startThrottler()
	c.startWorker()
	c.recv.waitDistinct(t, ids, 90*time.Second)
	c.waitSucceeded(th, ids, 30*time.Second)
	exactlyOnce(t, c.recv.arrivals(""), ids)
	for _, tn := range tenants {
		checkRate(t, c.recv.arrivals(tn), rate, 1)
	}
}

// redisOptions is go-redis's universal options (an alias, so the test
// reads as what it builds).
type redisOptions = redis.UniversalOptions

// storeOn is a store of c's deployment on rdb, for the receiver's reads.
func storeOn(t *testing.T, c *cluster, rdb redis.UniversalClient) *store.Store {
	t.Helper()
	st, err := store.NewStore(rdb, store.Config{Prefix: c.prefix, Shards: c.shards})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// eitherStore reads a job from the first store that has it: the receiver
// of a migrated deployment reads the target once it holds the job, the
// source before.
type eitherStore []jobReader

func (s eitherStore) GetJob(ctx context.Context, id string) (store.Job, error) {
	var err error
	for _, r := range s {
		var j store.Job
		if j, err = r.GetJob(ctx, id); err == nil {
			return j, nil
		}
	}
	return store.Job{}, err
}
