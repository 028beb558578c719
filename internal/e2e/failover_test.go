package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
)

// The failover tests: 1 000 webhooks over 3 tenants (25/s each, burst 1)
// through a throttler and two workers on a Redis Cluster (3 masters, 3
// replicas) or a Sentinel setup (primary, replica, 3 sentinels); when a
// quarter have arrived, the master holding the first tenant's shard is
// killed with SIGKILL and its replica promoted. Nothing is restarted.
// Each test checks that /readyz goes 503 and back to 200, that every job
// acknowledged (202) is delivered or — counted, logged and bounded — lost
// with the master, that a job arrives twice only when its first attempt
// ran before Sluice was ready again, and that each tenant's arrivals keep
// its rate bound. With redis.wait_replicas 1, no acknowledged job is lost.

func TestFailoverClusterMaster(t *testing.T) {
	t.Parallel()
	runFailover(t, clusterTarget(t), 0)
}

func TestFailoverClusterMasterWaitReplicas(t *testing.T) {
	t.Parallel()
	runFailover(t, clusterTarget(t), 1)
}

func TestFailoverSentinelPrimary(t *testing.T) {
	t.Parallel()
	runFailover(t, sentinelTarget(t), 0)
}

func TestFailoverSentinelPrimaryWaitReplicas(t *testing.T) {
	t.Parallel()
	runFailover(t, sentinelTarget(t), 1)
}

// failoverTarget is the Redis setup a failover test kills a master of.
type failoverTarget struct {
	name   string
	url    string // for SLUICE_REDIS_URL
	client redis.UniversalClient
	// master is the address of the master that serves key now, as the
	// setup itself says (CLUSTER SLOTS of a live node, or the sentinels).
	master func(ctx context.Context, key string) (string, error)
	kill   func(addr string) error
	// cluster is set for a Cluster: a promoted master must also report
	// cluster_state:ok.
	cluster bool
}

func clusterTarget(t *testing.T) failoverTarget {
	rc := redistest.NewCluster(t, redistest.ClusterConfig{})
	client := rc.Client()
	t.Cleanup(func() { _ = client.Close() })
	return failoverTarget{name: "cluster", url: rc.URL(), client: client, master: rc.MasterOf, kill: rc.Kill, cluster: true}
}

func sentinelTarget(t *testing.T) failoverTarget {
	s := redistest.NewSentinel(t)
	client := s.Client()
	t.Cleanup(func() { _ = client.Close() })
	return failoverTarget{name: "sentinel", url: s.URL(), client: client,
		master: func(ctx context.Context, _ string) (string, error) { return s.Master(ctx) }, kill: s.Kill}
}

// promoted reports whether a master other than killed serves key, answers
// ROLE as a master and, on a Cluster, reports cluster_state:ok.
func (ft failoverTarget) promoted(key, killed string) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	addr, err := ft.master(ctx, key)
	if err != nil || addr == killed {
		return false, fmt.Sprintf("master of %s: %q, %v (killed %s)", key, addr, err, killed)
	}
	rc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rc.Close()
	role, err := rc.Do(ctx, "ROLE").Slice()
	if err != nil || len(role) == 0 || role[0] != "master" {
		return false, fmt.Sprintf("ROLE of %s: %v, %v", addr, role, err)
	}
	if ft.cluster {
		info, err := rc.ClusterInfo(ctx).Result()
		if err != nil || !strings.Contains(info, "cluster_state:ok") {
			return false, fmt.Sprintf("CLUSTER INFO of %s: %v", addr, err)
		}
	}
	return true, ""
}

// Shape of a failover run.
const (
	failoverJobs    = 1000
	failoverRate    = 25 // per tenant, per second; burst 1
	failoverEnqueue = 40 // enqueue requests per tenant per second
	// failoverGiveUp is how long one job's enqueue is retried (503s of the
	// outage, replication timeouts) before its tenant's enqueuer stops.
	failoverGiveUp = 8 * time.Second
	// lossWindow: a job is lost only when the master acknowledged it and
	// died before its replica had it. The master writes a script's effects
	// to the replica's link in the same event-loop turn as the reply (on
	// loopback the replica has them well under a millisecond later), so
	// the jobs acknowledged in the last second before the kill bound the
	// loss far above what the lag allows.
	lossWindow = time.Second
)

var failoverTenants = []string{"fa", "fb", "fc"}

func runFailover(t *testing.T, ft failoverTarget, waitReplicas int) {
	policies := map[string]string{}
	for _, tn := range failoverTenants {
		policies[tn] = fmt.Sprintf("{rate: %d/s, burst: 1, concurrency: 50}", failoverRate)
	}
	c := newCluster(t, options{redisURL: ft.url, client: ft.client, tenants: policies,
		redisExtra: ", wait_replicas: " + strconv.Itoa(waitReplicas)})
	th := c.startThrottler()
	workers := []*proc{c.startWorker(), c.startWorker()}
	key := c.prefix + ":{s" + strconv.Itoa(store.ShardOf(failoverTenants[0], c.shards)) + "}:ready"
	victim, err := ft.master(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	acks := &ackLog{}
	enqueued := make(chan struct{})
	go func() { defer close(enqueued); c.enqueueAll(th, acks) }()

	c.recv.waitUntil(t, 30*time.Second, func() bool { return len(c.recv.arrivals("")) >= failoverJobs/4 },
		func() string { return fmt.Sprintf("%d of %d jobs arrived", len(c.recv.arrivals("")), failoverJobs/4) })
	killedAt := time.Now()
	if err := ft.kill(victim); err != nil {
		t.Fatal(err)
	}
	th.waitReadyz(http.StatusServiceUnavailable, 15*time.Second)
	unready := time.Since(killedAt)
	th.waitReadyz(http.StatusOK, 40*time.Second)
	readyAt := time.Now()
	poll(t, 15*time.Second, func() (bool, string) { return ft.promoted(key, victim) })
	select {
	case <-enqueued:
	case <-time.After(60 * time.Second):
		t.Fatal("the enqueuers did not finish within 60s")
	}
	f := c.checkFailover(th, acks, killedAt, readyAt)
	t.Logf("%s, wait_replicas %d: killed master %s; /readyz 503 %s after the kill, 200 again %s after; "+
		"acknowledged %d (%d in the %s before the kill), not acknowledged %d (%d replication_timeout answers); lost %d; duplicates %d",
		ft.name, waitReplicas, victim, unready.Round(time.Millisecond), readyAt.Sub(killedAt).Round(time.Millisecond),
		len(acks.acked()), f.window, lossWindow, acks.notAcked(), acks.replTimeouts(), len(f.lost), f.dups)
	if len(f.lost) > f.window {
		t.Errorf("%d acknowledged jobs lost, more than the %d acknowledged in the %s before the kill", len(f.lost), f.window, lossWindow)
	}
	if waitReplicas > 0 && len(f.lost) > 0 {
		t.Errorf("wait_replicas %d: %d acknowledged jobs lost, e.g. %v", waitReplicas, len(f.lost), f.lost[:min(5, len(f.lost))])
	}
	for _, p := range append(workers, th) {
		if !p.running() {
			t.Errorf("%s ended (%s): the processes must recover by themselves", p.name, p.status)
		}
	}
	for _, tn := range failoverTenants {
		checkRate(t, c.recv.arrivals(tn), failoverRate, 1)
	}
}
