package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/store"
)

// workerConcurrency is worker.concurrency in the base configuration.
const workerConcurrency = 20

// TestKill9OfAWorkerLosesNothing: two workers deliver 120 webhooks at 40/s
// to a receiver that holds each request 400ms; when a third have arrived
// one worker is killed with SIGKILL while it holds requests, and a
// replacement starts. Every job still succeeds. Only attempts in flight on
// the killed worker arrive twice (same webhook-id): each duplicate's first
// request was cut off by the kill (so it was the killed worker's, even if
// the receiver saw it a moment after the signal) or began before the kill
// and was answered just before the worker could record it; every request the kill cut off is
// retried, and there are no more duplicates than the worker's concurrency.
// The running leases come back after claim + timeout (2s) + grace (500ms).
func TestKill9OfAWorkerLosesNothing(t *testing.T) {
	t.Parallel()
	const tenant, n = "acme", 120
	c := newCluster(t, options{tenants: map[string]string{
		tenant: "{rate: 40/s, burst: 1, concurrency: 60}",
	}})
	c.recv.setHold(400 * time.Millisecond)
	th := c.startThrottler()
	victim := c.startWorker()
	c.startWorker()
	ids := c.enqueue(th, tenant, n)

	c.recv.waitUntil(t, 30*time.Second, func() bool {
		return len(c.recv.arrivals(tenant)) >= n/3 && c.recv.held() >= 4
	}, func() string {
		return fmt.Sprintf("%d of %d jobs arrived, %d held", len(c.recv.arrivals(tenant)), n, c.recv.held())
	})
	held := c.recv.held()
	killedAt := time.Now()
	victim.kill9()
	c.startWorker()

	c.recv.waitDistinct(t, ids, 30*time.Second)
	c.waitSucceeded(th, ids, 15*time.Second)
	got := c.recv.arrivals(tenant)
	seen := count(got)
	first, aborted := map[string]arrival{}, map[string]bool{}
	for _, a := range got {
		if _, ok := first[a.id]; !ok {
			first[a.id] = a
		}
		if a.aborted {
			aborted[a.id] = true
		}
	}
	var dups []string
	for id, k := range seen {
		if k > 1 {
			dups = append(dups, id)
		}
		switch {
		case !slices.Contains(ids, id):
			t.Errorf("unexpected job %s arrived %d times", id, k)
		case k > 2:
			t.Errorf("job %s arrived %d times: one kill can repeat an attempt once", id, k)
		case k == 2 && !first[id].at.Before(killedAt) && !first[id].aborted:
			// A first request cut off by the kill came from the killed
			// worker, even when the receiver saw it a moment after the
			// signal (written just before, in transit on a busy machine).
			t.Errorf("job %s arrived twice, but its first attempt began %s after the kill and was answered",
				id, first[id].at.Sub(killedAt).Round(time.Microsecond))
		case k == 2 && !aborted[id]:
			// Answered, but the worker died before its finish.
			t.Logf("job %s arrived twice: its first request was answered at the kill %+v, the worker dying before its finish",
				id, first[id].answered.Sub(killedAt).Round(time.Microsecond))
		}
	}
	for id := range aborted {
		if seen[id] < 2 {
			t.Errorf("job %s: its request was cut off by the kill but never retried", id)
		}
	}
	if len(aborted) == 0 {
		t.Errorf("the killed worker held none of the %d requests in flight at the kill: the test did not test", held)
	}
	if len(dups) > workerConcurrency {
		t.Errorf("%d jobs arrived twice, more than the killed worker's concurrency %d", len(dups), workerConcurrency)
	}
	t.Logf("duplicates: %d (requests cut off by the kill: %d; held at the kill, on both workers: %d); %d arrivals over %s",
		len(dups), len(aborted), held, len(got), got[len(got)-1].at.Sub(got[0].at).Round(time.Millisecond))
	checkRate(t, got, 40, 1)
}

// TestKill9OfADispatcherLosesNothing: two throttlers dispatch (the shard
// leases decide which passes the tenant's shard) to one worker; when a
// third of 120 jobs at 40/s have arrived, the throttler owning the
// tenant's shard is killed with SIGKILL. The other takes the shard over
// once the lease expires (3s), and every job arrives exactly once: nothing
// was in flight on a dispatcher, and what it had released but not handed
// to asynq comes back through the sweep unsent.
func TestKill9OfADispatcherLosesNothing(t *testing.T) {
	t.Parallel()
	const tenant, n = "acme", 120
	c := newCluster(t, options{tenants: map[string]string{
		tenant: "{rate: 40/s, burst: 1, concurrency: 60}",
	}})
	shard := store.ShardOf(tenant, c.shards)
	a, b := c.startThrottler(), c.startThrottler()
	c.startWorker()
	poll(t, 10*time.Second, func() (bool, string) {
		return tookShard(a, shard) || tookShard(b, shard), fmt.Sprintf("no throttler took shard %d", shard)
	})
	owner, survivor := a, b
	if tookShard(b, shard) {
		owner, survivor = b, a
	}
	token := c.leaseOwner(shard)
	ids := c.enqueue(survivor, tenant, n)

	c.recv.waitUntil(t, 30*time.Second, func() bool { return len(c.recv.arrivals(tenant)) >= n/3 },
		func() string { return fmt.Sprintf("%d of %d jobs arrived", len(c.recv.arrivals(tenant)), n) })
	killedAt := time.Now()
	owner.kill9()
	poll(t, 10*time.Second, func() (bool, string) {
		now := c.leaseOwner(shard)
		return tookShard(survivor, shard) && now != "" && now != token,
			fmt.Sprintf("%s did not take shard %d over (lease owner %q, the killed one's %q)", survivor.name, shard, now, token)
	})
	tookOver := time.Since(killedAt)

	c.recv.waitDistinct(t, ids, 30*time.Second)
	c.waitSucceeded(survivor, ids, 15*time.Second)
	got := c.recv.arrivals(tenant)
	exactlyOnce(t, got, ids)
	var gap time.Duration
	for i := 1; i < len(got); i++ {
		gap = max(gap, got[i].at.Sub(got[i-1].at))
	}
	t.Logf("%s killed; %s took shard %d over %s later; longest pause between arrivals %s; duplicates: %d",
		owner.name, survivor.name, shard, tookOver.Round(time.Millisecond), gap.Round(time.Millisecond), len(got)-len(ids))
	checkRate(t, got, 40, 1)
}
