package store

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Worker capacity (docs/design.md §2.2, back-pressure): the workers'
// heartbeats are the roster's (internal/fleet: Capacity); the jobs that
// occupy them are the shards' lease sets. The dispatcher computes the free
// capacity as Capacity − InFlight: released-but-unclaimed jobs occupy a
// worker (a worker goroutine waits for their slot) just as running ones do.

// FreeCapacity is Capacity − InFlight (at least 0) read in one round trip
// (one pipeline; in Cluster, one per master). The dispatcher's budget reads
// the two apart instead, Capacity only every second.
func (s *Store) FreeCapacity(ctx context.Context) (int, error) {
	leases := make([]string, s.keys.shards)
	for shard := range leases {
		leases[shard] = s.keys.leases(shard)
	}
	return s.CapacityLess(ctx, leases)
}

// InFlight is the number of jobs occupying a worker across all shards:
// released (handed to asynq, waiting for their slot) plus running. It is the
// sum of the shards' lease sets, which hold exactly those jobs — one ZCARD
// per shard, pipelined in one round trip (in Cluster, one per master). Not a
// snapshot: shards are read one after the other.
func (s *Store) InFlight(ctx context.Context) (int, error) {
	cmds := make([]*redis.IntCmd, s.keys.shards)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for shard := range cmds {
			cmds[shard] = p.ZCard(ctx, s.keys.leases(shard))
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("jobs in flight: %w", err)
	}
	var n int64
	for _, c := range cmds {
		n += c.Val()
	}
	return int(n), nil
}
