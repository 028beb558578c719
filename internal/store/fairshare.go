package store

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Fair shares of the workers' pool (docs/design.md §2.2 "Fair shares of the pool"):
// while the pool is contended, the dispatcher's budget gives every pass
// λ = capacity ÷ W (PassConfig.FairShare), W the weight of the tenants that
// hold worker slots or were left waiting without one, and a tenant holding
// max(1, ⌊weight·λ⌋) slots takes no more (lua/lib.lua FAIR, lua/pass.lua
// 3d).

// FairWeights are the weights λ is computed from, over every shard.
type FairWeights struct {
	// Held is the weight of the tenants holding worker slots (running +
	// released > 0): each tenant's policy weight, kept up to date by every
	// script that saves the tenant (field w of <p>:{sN}:fair).
	Held int64
	// Waiting is the weight of the tenants that each shard's last pass with
	// capacity left in its round without a slot and holding none when its
	// capacity ran out (field r).
	Waiting int64
}

// Total is the weight that shares the pool: Held + Waiting.
func (w FairWeights) Total() int64 { return w.Held + w.Waiting }

// FairWeights reads the shards' fair-share weights, one HMGET per shard
// pipelined in one round trip (in Cluster, one per master). Not a snapshot:
// shards are read one after the other.
func (s *Store) FairWeights(ctx context.Context) (FairWeights, error) {
	cmds := make([]*redis.SliceCmd, s.keys.shards)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for shard := range cmds {
			cmds[shard] = p.HMGet(ctx, s.keys.fair(shard), "w", "r")
		}
		return nil
	})
	if err != nil {
		return FairWeights{}, fmt.Errorf("read fair-share weights: %w", err)
	}
	var w FairWeights
	for shard, c := range cmds {
		v := c.Val()
		held, err1 := weightField(v[0])
		waiting, err2 := weightField(v[1])
		if err1 != nil || err2 != nil {
			return FairWeights{}, fmt.Errorf("read fair-share weights of shard %d: w %v, r %v: not counts", shard, v[0], v[1])
		}
		w.Held += held
		w.Waiting += waiting
	}
	return w, nil
}

// weightField parses one field of <p>:{sN}:fair: absent is 0; a negative
// sum (a tenant state older than the field, saved without its share) is 0.
func weightField(v any) (int64, error) {
	if v == nil {
		return 0, nil
	}
	str, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("field of type %T", v)
	}
	n, err := strconv.ParseInt(str, 10, 64)
	if err != nil {
		return 0, err
	}
	return max(n, 0), nil
}

// fairArg is pass.lua's λ argument: the share in thousandths, at least 1
// for any share above 0 (a share of 0 means none).
func fairArg(share float64) int64 {
	if share <= 0 {
		return 0
	}
	return max(int64(math.Floor(share*1000)), 1)
}
