package store

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/wire"
)

// TestStoreOnRedisCluster runs the Store against a real Redis Cluster of
// three masters (no replicas) started by the test. It proves that:
//
//   - every shard's keys hash to one slot, so each script (FCALL with the
//     shard's ready key, touching job, tenant, lease and policy keys built
//     from the shard base) runs on a cluster: enqueue, pass, claim and finish
//     of one job per tenant for 40 tenants covering all 16 shards, spread
//     over all three masters, end with every job succeeded;
//   - the Functions library is loaded lazily on EVERY master (from an empty
//     cluster), and loaded again when one master lost it ("Function not
//     found" on that master only);
//   - Heartbeat and FreeCapacity — one pipeline of the workers script and
//     one ZCARD per shard, across the masters — give capacity minus the jobs
//     in flight, also after the master of the workers key lost its scripts;
//   - a shard's ready, leases, policy and tenant keys and its job records share
//     one hash slot (CLUSTER KEYSLOT).
func TestStoreOnRedisCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := redistest.NewCluster(t, redistest.ClusterConfig{NoReplicas: true})
	addrs := cl.Addrs()

	cc := cl.Client()
	t.Cleanup(func() { _ = cc.Close() })
	clock := &fakeClock{t: epoch}
	store, err := NewStore(cc, Config{Prefix: redistest.Prefix(t), Shards: 16, Clock: clock.Now, Planner: testPlanner})
	if err != nil {
		t.Fatal(err)
	}
	version, _ := library()
	libName := "sluice_" + version

	// libraries reports, per master address, whether the library is loaded.
	libraries := func() map[string]bool {
		t.Helper()
		var mu sync.Mutex
		got := map[string]bool{}
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			libs, err := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: libName}).Result()
			if err != nil {
				return fmt.Errorf("function list on %s: %w", c.Options().Addr, err)
			}
			mu.Lock()
			defer mu.Unlock()
			got[c.Options().Addr] = len(libs) == 1 && libs[0].Name == libName
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(addrs) {
			t.Fatalf("FUNCTION LIST answered by %d masters, want %d: %v", len(got), len(addrs), got)
		}
		return got
	}
	for addr, loaded := range libraries() {
		if loaded {
			t.Fatalf("library %s on master %s before the Store's first call", libName, addr)
		}
	}

	// The shards' masters: the three masters must all own work.
	masterOf := make([]string, store.Shards())
	owners := map[string]int{}
	for shard := range masterOf {
		m, err := cc.MasterForKey(ctx, store.keys.ready(shard))
		if err != nil {
			t.Fatal(err)
		}
		masterOf[shard] = m.Options().Addr
		owners[masterOf[shard]]++
	}
	if len(owners) != len(addrs) {
		t.Fatalf("the 16 shards live on %d masters, want %d: %v", len(owners), len(addrs), owners)
	}

	// The first script call (policy_put) finds no function and loads the
	// library on every master.
	if err := store.SeedDefaults(ctx, params(func(p *Params) { p.Burst = 2 })); err != nil {
		t.Fatalf("seed defaults: %v", err)
	}

	tenants := make([]string, 40)
	shardsHit := map[int]bool{}
	for i := range tenants {
		tenants[i] = fmt.Sprintf("tenant-%02d", i)
		shardsHit[store.keys.shardOf(tenants[i])] = true
	}
	if len(shardsHit) != store.Shards() {
		t.Fatalf("the tenants cover %d shards, want %d", len(shardsHit), store.Shards())
	}

	// round enqueues one job per tenant, passes every shard, claims every
	// release at its slot and finishes it with success; it returns the ids
	// by tenant.
	round := func(n int) map[string]string {
		t.Helper()
		idOf := map[string]string{}     // tenant → job id
		tenantOf := map[string]string{} // job id → tenant
		for _, tenant := range tenants {
			rs, err := store.Enqueue(ctx, tenant, []Item{item(fmt.Sprintf(`{"round":%d,"tenant":%q}`, n, tenant))})
			if err != nil {
				t.Fatalf("round %d: enqueue for %s: %v", n, tenant, err)
			}
			if len(rs) != 1 || rs[0].Outcome != Accepted {
				t.Fatalf("round %d: enqueue for %s: want accepted, got %+v", n, tenant, rs)
			}
			idOf[tenant], tenantOf[rs[0].ID] = rs[0].ID, tenant
		}
		var released []wire.Release
		for shard := range store.Shards() {
			res, err := store.Pass(ctx, shard, PassConfig{Lead: time.Second, MinLead: -1, Grace: time.Second, Capacity: -1})
			if err != nil {
				t.Fatalf("round %d: pass on shard %d: %v", n, shard, err)
			}
			released = append(released, res.Released...)
		}
		if len(released) != len(tenants) {
			t.Fatalf("round %d: %d jobs released, want %d", n, len(released), len(tenants))
		}
		// The clock only moves forward: claim in slot order across shards.
		slices.SortFunc(released, func(a, b wire.Release) int { return a.Slot.Compare(b.Slot) })
		succeeded := 0
		for _, r := range released {
			if tenantOf[r.ID] != r.Tenant {
				t.Fatalf("round %d: released %s of %s, not a job enqueued for it", n, r.ID, r.Tenant)
			}
			clock.Set(r.Slot)
			c, err := store.Claim(ctx, r.ID, r.Gen, 2*time.Millisecond)
			if err != nil {
				t.Fatalf("round %d: claim %s@%d: %v", n, r.ID, r.Gen, err)
			}
			if c.Outcome != ClaimOK {
				t.Fatalf("round %d: claim %s@%d at its slot: %+v", n, r.ID, r.Gen, c)
			}
			st, err := store.Finish(ctx, r.ID, r.Gen, wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200}, FinishConfig{})
			if err != nil {
				t.Fatalf("round %d: finish %s@%d: %v", n, r.ID, r.Gen, err)
			}
			if st != StateSucceeded {
				t.Fatalf("round %d: finish %s: state %s, want %s", n, r.ID, st, StateSucceeded)
			}
			succeeded++
		}
		if succeeded != len(tenants) {
			t.Fatalf("round %d: %d jobs succeeded, want %d", n, succeeded, len(tenants))
		}
		for tenant, id := range idOf {
			j, err := store.GetJob(ctx, id)
			if err != nil {
				t.Fatalf("round %d: %v", n, err)
			}
			if j.State != StateSucceeded || j.Tenant != tenant || j.Attempt != 1 {
				t.Fatalf("round %d: job %s: state %s, tenant %s, attempt %d; want succeeded, %s, 1",
					n, id, j.State, j.Tenant, j.Attempt, tenant)
			}
			st, err := store.TenantState(ctx, tenant)
			if err != nil {
				t.Fatalf("round %d: %v", n, err)
			}
			if st.Backlog != 0 || st.Queued != 0 || st.Running != 0 || st.Released != 0 {
				t.Fatalf("round %d: tenant %s after its job succeeded: %+v", n, tenant, st)
			}
		}
		return idOf
	}

	first := round(1)
	for addr, loaded := range libraries() {
		if !loaded {
			t.Fatalf("library %s not on master %s after the first round", libName, addr)
		}
	}

	// One master loses the library (as after a restart without persistence):
	// the next call routed to it finds no function, and the Store loads the
	// library again.
	lost, err := cc.MasterForKey(ctx, store.keys.ready(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := lost.FunctionDelete(ctx, libName).Err(); err != nil {
		t.Fatalf("function delete on %s: %v", lost.Options().Addr, err)
	}
	for addr, loaded := range libraries() {
		if loaded == (addr == lost.Options().Addr) {
			t.Fatalf("after FUNCTION DELETE on %s only: library on %s is %v", lost.Options().Addr, addr, loaded)
		}
	}
	clock.Advance(time.Minute)
	second := round(2)
	for addr, loaded := range libraries() {
		if !loaded {
			t.Fatalf("library %s not loaded again on master %s", libName, addr)
		}
	}
	if !store.runner.UsesFunctions() {
		t.Fatal("store fell back to EVAL on a cluster with Functions")
	}

	// Capacity: a worker of concurrency 10, and one job in flight per master
	// (released, one of them claimed and running).
	clock.Advance(time.Minute)
	if err := store.Heartbeat(ctx, "worker-1", 10, time.Hour); err != nil {
		t.Fatal(err)
	}
	freeIs := func(want int, when string) {
		t.Helper()
		free, err := store.FreeCapacity(ctx)
		if err != nil {
			t.Fatalf("free capacity %s: %v", when, err)
		}
		if free != want {
			t.Fatalf("free capacity %s: %d, want %d", when, free, want)
		}
	}
	freeIs(10, "with nothing in flight")
	var inflight []wire.Release
	perMaster := map[string]bool{}
	for _, tenant := range tenants {
		shard := store.keys.shardOf(tenant)
		if perMaster[masterOf[shard]] {
			continue
		}
		perMaster[masterOf[shard]] = true
		rs, err := store.Enqueue(ctx, tenant, []Item{item(`{"inflight":true}`)})
		if err != nil || rs[0].Outcome != Accepted {
			t.Fatalf("enqueue for %s: %+v, %v", tenant, rs, err)
		}
		res, err := store.Pass(ctx, shard, PassConfig{Lead: time.Second, MinLead: -1, Grace: time.Minute, Capacity: -1})
		if err != nil {
			t.Fatalf("pass on shard %d: %v", shard, err)
		}
		if len(res.Released) != 1 || res.Released[0].ID != rs[0].ID {
			t.Fatalf("pass on shard %d: released %+v, want %s", shard, res.Released, rs[0].ID)
		}
		inflight = append(inflight, res.Released[0])
	}
	if len(inflight) != len(addrs) {
		t.Fatalf("%d jobs in flight, want one per master (%d)", len(inflight), len(addrs))
	}
	slices.SortFunc(inflight, func(a, b wire.Release) int { return a.Slot.Compare(b.Slot) })
	clock.Set(inflight[0].Slot)
	if c, err := store.Claim(ctx, inflight[0].ID, inflight[0].Gen, 2*time.Millisecond); err != nil || c.Outcome != ClaimOK {
		t.Fatalf("claim %s: %+v, %v", inflight[0].ID, c, err)
	}
	if n, err := store.InFlight(ctx); err != nil || n != len(inflight) {
		t.Fatalf("in flight: %d, %v; want %d", n, err, len(inflight))
	}
	freeIs(10-len(inflight), "with jobs released and running")
	// The master of the workers key loses its scripts: FreeCapacity's
	// pipelined EVALSHA gets NOSCRIPT and loads the script again.
	wm, err := cc.MasterForKey(ctx, store.WorkersKey())
	if err != nil {
		t.Fatal(err)
	}
	if err := wm.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	freeIs(10-len(inflight), "after SCRIPT FLUSH on the workers key's master")
	for _, r := range inflight[1:] {
		clock.Set(r.Slot)
		if c, err := store.Claim(ctx, r.ID, r.Gen, 2*time.Millisecond); err != nil || c.Outcome != ClaimOK {
			t.Fatalf("claim %s: %+v, %v", r.ID, c, err)
		}
	}
	for _, r := range inflight {
		if st, err := store.Finish(ctx, r.ID, r.Gen, wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200}, FinishConfig{}); err != nil || st != StateSucceeded {
			t.Fatalf("finish %s: %s, %v", r.ID, st, err)
		}
	}
	freeIs(10, "after the jobs in flight finished")

	// Co-location: each shard's keys and its jobs' records share one slot.
	slot := func(key string) int64 {
		t.Helper()
		s, err := cc.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatalf("cluster keyslot %s: %v", key, err)
		}
		return s
	}
	slots := map[int64]int{}
	for _, idOf := range []map[string]string{first, second} {
		for tenant, id := range idOf {
			shard, err := ShardOfJobID(id)
			if err != nil {
				t.Fatal(err)
			}
			if shard != store.keys.shardOf(tenant) {
				t.Fatalf("job %s of %s: shard %d, want the tenant's %d", id, tenant, shard, store.keys.shardOf(tenant))
			}
			jobKey, err := store.keys.job(id)
			if err != nil {
				t.Fatal(err)
			}
			want := slot(store.keys.ready(shard))
			for _, key := range []string{jobKey, store.keys.leases(shard), store.keys.policy(shard), store.keys.tenant(tenant)} {
				if got := slot(key); got != want {
					t.Fatalf("slot of %s is %d, slot of %s is %d: not co-located", key, got, store.keys.ready(shard), want)
				}
			}
			slots[want] = shard
		}
	}
	if len(slots) != store.Shards() {
		t.Fatalf("the 16 shards use %d slots, want 16", len(slots))
	}
}
