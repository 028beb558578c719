package dispatch

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// ShardOwners reads which dispatcher holds each shard's lease: the owner
// token per shard (its first 8 hex digits: enough to tell dispatchers apart,
// too little to forge a lease), "" for a shard no one holds now. One GET
// per shard, pipelined (on a Cluster, one pipeline per master). Read-only;
// the console's overview shows it.
func ShardOwners(ctx context.Context, rdb redis.UniversalClient, prefix string, shards int) ([]string, error) {
	cmds := make([]*redis.StringCmd, shards)
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for shard := range cmds {
			cmds[shard] = p.Get(ctx, LeaseKey(prefix, shard))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("shard owners: %w", err)
	}
	out := make([]string, shards)
	for shard, c := range cmds {
		owner := c.Val()
		out[shard] = owner[:min(len(owner), 8)]
	}
	return out, nil
}
