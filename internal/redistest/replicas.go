package redistest

import (
	"context"
	"regexp"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
)

var connectedSlaves = regexp.MustCompile(`connected_slaves:(\d+)`)

// ConnectedReplicas is the number of replicas connected to the master that
// holds key (rdb's one Redis, its Sentinel primary, or the master of key's
// Cluster slot), from INFO replication. It fails t when it cannot tell.
func ConnectedReplicas(t testing.TB, rdb redis.UniversalClient, key string) int {
	t.Helper()
	ctx := context.Background()
	var node redis.UniversalClient = rdb
	if c, ok := rdb.(*redis.ClusterClient); ok {
		m, err := c.MasterForKey(ctx, key)
		if err != nil {
			t.Fatalf("the master of %q: %v", key, err)
		}
		node = m
	}
	info, err := node.Info(ctx, "replication").Result()
	if err != nil {
		t.Fatalf("INFO replication: %v", err)
	}
	m := connectedSlaves.FindStringSubmatch(info)
	if m == nil {
		t.Fatalf("no connected_slaves in INFO replication: %s", info)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
