package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/store"
)

// TestThreeDispatchersTwoWorkersKeepEveryRate: three throttlers, each
// passing shards of its own (the fast tenant's, the slow tenant's, the
// other two; see spreadLeases), and two workers deliver 100 jobs each of
// two tenants at 50/s with burst 1 and 20/s with burst 2. Every job arrives
// exactly once, and no window of Δ of a tenant's arrivals holds more than
// b + r·(Δ + 2ε_r) + 1 of them.
//
// Not parallel: it measures timing, so it runs before the parallel tests
// start their processes.
func TestThreeDispatchersTwoWorkersKeepEveryRate(t *testing.T) {
	const n = 100
	tenants := []struct {
		id    string
		rate  float64
		burst int
	}{{"fast", 50, 1}, {"slow", 20, 2}}
	policies := map[string]string{}
	for _, tn := range tenants {
		policies[tn.id] = fmt.Sprintf("{rate: %.0f/s, burst: %d, concurrency: 50}", tn.rate, tn.burst)
	}
	c := newCluster(t, options{tenants: policies})
	fast, slow := store.ShardOf("fast", c.shards), store.ShardOf("slow", c.shards)
	if fast == slow {
		t.Fatal("the two tenants share a shard: pick other ids")
	}
	var rest []int
	for s := range c.shards {
		if s != fast && s != slow {
			rest = append(rest, s)
		}
	}
	throttlers := c.spreadLeases([][]int{{fast}, {slow}, rest})
	t.Logf("%s passes shard %d (fast), %s shard %d (slow), %s shards %v",
		throttlers[0].name, fast, throttlers[1].name, slow, throttlers[2].name, rest)
	c.startWorker()
	c.startWorker()

	ids := map[string][]string{}
	var all []string
	for i, tn := range tenants {
		ids[tn.id] = c.enqueue(throttlers[i], tn.id, n)
		all = append(all, ids[tn.id]...)
	}
	c.recv.waitDistinct(t, all, 30*time.Second)
	c.waitSucceeded(throttlers[2], all, 15*time.Second)

	exactlyOnce(t, c.recv.arrivals(""), all)
	for _, tn := range tenants {
		got := c.recv.arrivals(tn.id)
		took := got[len(got)-1].at.Sub(got[0].at)
		t.Logf("%s: %d jobs over %s (%.1f/s; ideal %s)", tn.id, len(got), took.Round(time.Millisecond),
			float64(len(got)-1)/took.Seconds(), time.Duration(float64(n-tn.burst)/tn.rate*float64(time.Second)))
		checkRate(t, got, tn.rate, tn.burst)
	}
	for _, p := range throttlers {
		if lost := p.logged("shard lease lost"); len(lost) > 0 {
			t.Errorf("%s lost a shard lease during the run: %v", p.name, lost)
		}
	}
}

// spreadLeases starts one throttler per element of shards and makes each
// hold exactly those shards' dispatch leases: every lease is first taken by
// a stand-in owner; then each throttler in turn starts (holding nothing:
// the stand-in has every free shard), the ones started before it are
// paused (SIGSTOP), its shards' leases are freed, it takes them (a free
// lease is tried every LeaseTTL/10), and the paused ones resume — a pause
// of a few hundred ms, well within their leases' TTL (3s), which they then
// go on renewing.
func (c *cluster) spreadLeases(shards [][]int) []*proc {
	c.t.Helper()
	ctx := context.Background()
	for s := range c.shards {
		if err := c.rdb.Set(ctx, dispatch.LeaseKey(c.prefix, s), "e2e-stand-in", time.Minute).Err(); err != nil {
			c.t.Fatal(err)
		}
	}
	var started []*proc
	for _, mine := range shards {
		p := c.startThrottler()
		for _, q := range started {
			q.pause()
		}
		for _, s := range mine {
			if err := c.rdb.Del(ctx, dispatch.LeaseKey(c.prefix, s)).Err(); err != nil {
				c.t.Fatal(err)
			}
		}
		poll(c.t, startTimeout, func() (bool, string) {
			for _, s := range mine {
				if !tookShard(p, s) {
					return false, fmt.Sprintf("%s did not take shard %d", p.name, s)
				}
			}
			return true, ""
		})
		for _, q := range started {
			q.resume()
		}
		started = append(started, p)
	}
	for i, p := range started {
		for s := range c.shards {
			if tookShard(p, s) != slices.Contains(shards[i], s) {
				c.t.Fatalf("%s: took shard %d: %v, want shards %v", p.name, s, tookShard(p, s), shards[i])
			}
		}
	}
	return started
}
