package redistest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestClusterServesEverySlotAndFailsOver: NewCluster gives 3 masters with a
// replica each; a client seeded from URL's addresses reaches keys on every
// master; MasterOf names the master of a key's slot; after Kill of that
// master its replica is promoted and the key (written before the kill and
// replicated) is read through the same client.
func TestClusterServesEverySlotAndFailsOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := NewCluster(t, ClusterConfig{})
	if n := len(c.Addrs()); n != 6 {
		t.Fatalf("%d nodes, want 6", n)
	}
	masters, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(masters) != 3 {
		t.Fatalf("masters %v, want 3", masters)
	}
	rdb := c.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	owners := map[string]bool{}
	for i := range 30 {
		key := fmt.Sprintf("{k%d}", i)
		if err := rdb.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("set %s: %v", key, err)
		}
		m, err := c.MasterOf(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		owners[m] = true
	}
	if len(owners) != 3 {
		t.Fatalf("30 keys on %d masters, want 3: %v", len(owners), owners)
	}

	victim, err := c.MasterOf(ctx, "{k0}")
	if err != nil {
		t.Fatal(err)
	}
	// WAIT counts the writes of its own connection, on its own node: write
	// {k0} again and wait on one connection to {k0}'s master (through the
	// Cluster client a keyless WAIT goes to any node and proves nothing).
	node, err := rdb.MasterForKey(ctx, "{k0}")
	if err != nil {
		t.Fatal(err)
	}
	conn := node.Conn()
	defer conn.Close()
	if err := conn.Set(ctx, "{k0}", 0, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := conn.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n < 1 {
		t.Fatalf("WAIT 1 on {k0}'s master: %d replicas, %v", n, err)
	}
	if err := c.Kill(victim); err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(victim); err == nil {
		t.Fatal("a second Kill of the same node did not fail")
	}
	PollMsg(t, 30*time.Second, func() (bool, string) {
		m, err := c.MasterOf(ctx, "{k0}")
		return err == nil && m != victim, fmt.Sprintf("master of {k0} is %s (%v), the killed %s", m, err, victim)
	})
	PollMsg(t, 30*time.Second, func() (bool, string) {
		got, err := rdb.Get(ctx, "{k0}").Result()
		return err == nil && got == "0", fmt.Sprintf("GET {k0} = %q, %v", got, err)
	})
	now, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(now) != 3 || slices.Contains(now, victim) {
		t.Fatalf("masters after the failover %v: want 3 without %s", now, victim)
	}
}

// TestSentinelFollowsTheFailover: NewSentinel gives a primary, a replica and
// 3 sentinels; the failover client writes to the primary Master names; after
// Kill of the primary the sentinels promote the replica and the same client
// reads the key (replicated before the kill) from it.
func TestSentinelFollowsTheFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := NewSentinel(t)
	primary, err := s.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := s.DataAddrs()[0]; primary != want {
		t.Fatalf("master %s, want the first data node %s", primary, want)
	}
	rdb := s.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1: %d, %v", n, err)
	}
	if err := s.Kill(primary); err != nil {
		t.Fatal(err)
	}
	PollMsg(t, 60*time.Second, func() (bool, string) {
		m, err := s.Master(ctx)
		return err == nil && m == s.DataAddrs()[1], fmt.Sprintf("master %s (%v), want the replica %s", m, err, s.DataAddrs()[1])
	})
	PollMsg(t, 30*time.Second, func() (bool, string) {
		got, err := rdb.Get(ctx, "k").Result()
		return err == nil && got == "v", fmt.Sprintf("GET k = %q, %v", got, err)
	})
}

// TestURLMatchesTheMode: URL and New describe the same Redis: a client
// of the kind the mode implies.
func TestURLMatchesTheMode(t *testing.T) {
	t.Parallel()
	rdb, _ := New(t)
	want := map[Mode][]string{ModeSingle: {"redis", "rediss", "unix"}, ModeCluster: {"redis+cluster"}, ModeSentinel: {"redis+sentinel"}}[CurrentMode()]
	scheme, _, _ := strings.Cut(URL(), "://")
	if !slices.Contains(want, scheme) {
		t.Fatalf("URL() = %q in mode %s, want scheme in %v", URL(), CurrentMode(), want)
	}
	_, isCluster := rdb.(*redis.ClusterClient)
	if isCluster != (CurrentMode() == ModeCluster) {
		t.Fatalf("New gave a %T in mode %s", rdb, CurrentMode())
	}
}
