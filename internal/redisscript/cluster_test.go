package redisscript

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// A Cluster client learns a dead master's successor from its first call
// that got no answer. go-redis alone sends the slot's calls to the dead
// address until its map of slots is 10s old (or a node answers MOVED):
// a worker's finishes would fail for seconds after the rest of the fleet
// was back, and the sweep would send those jobs again.
func TestRunnerLearnsTheSuccessorOfADeadClusterMaster(t *testing.T) {
	t.Parallel()
	rc := redistest.NewCluster(t, redistest.ClusterConfig{NodeTimeout: 500 * time.Millisecond})
	rdb := rc.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	key := "{learn}:k"
	s := fresh("learn", "redis.call('SET', KEYS[1], ARGV[1]) return tonumber(ARGV[1])")
	r := NewRunner(rdb, nil)
	if _, err := r.Run(ctx, s, []string{key}, 1); err != nil {
		t.Fatal(err) // the client reads its map of slots here
	}
	victim, err := rc.MasterOf(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Kill(victim); err != nil {
		t.Fatal(err)
	}
	var successor string
	redistest.Poll(t, 15*time.Second, "a replica took the dead master's slots", func() bool {
		successor, err = rc.MasterOf(ctx, key)
		return err == nil && successor != victim
	})
	// The first call goes to the dead address; the ones after it, within
	// far less than go-redis's own 10s, to the successor.
	v := 2
	redistest.Poll(t, 3*time.Second, "a call after the failover reached the successor", func() bool {
		v++
		_, err := r.Run(ctx, s, []string{key}, v)
		return err == nil
	})
	direct := redis.NewClient(&redis.Options{Addr: successor})
	t.Cleanup(func() { _ = direct.Close() })
	if got, err := direct.Get(ctx, key).Int(); err != nil || got != v {
		t.Fatalf("%s on the successor %s: %d, %v; want the last call's %d", key, successor, got, err, v)
	}
}
