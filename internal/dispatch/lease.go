package dispatch

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Keys and channels this package uses (DESIGN §3). The lease and meta keys
// have no hash tag: single-key scripts, fine in any Cluster slot.
//
//	<p>:meta                     HASH    the deployment's fixed parameters (meta.go)
//	<p>:dispatch:lease:<shard>   STRING  owner token of the shard's dispatcher, with a TTL
//	<p>:dispatch:members         HASH    owner token → expiry (ms): the dispatchers sharing
//	                                     the leases; each holds at most ⌈shards / members⌉
//	<p>:{s<shard>}:wake          channel the shard's new earliest time (µs), published by
//	                                     every script that moves it earlier
func leaseKey(prefix string, shard int) string {
	return prefix + ":dispatch:lease:" + strconv.Itoa(shard)
}

// wakeChannel mirrors the wake channel of internal/dispatch's key layout
// (keyspace.wake); the dispatcher tests publish through store.Store.Enqueue
// and would miss every wake-up if the two drifted apart.
func wakeChannel(prefix string, shard int) string {
	return prefix + ":{s" + strconv.Itoa(shard) + "}:wake"
}

var (
	//go:embed lua/hold.lua
	luaHold string
	//go:embed lua/release.lua
	luaRelease string
	//go:embed lua/members.lua
	luaMembers string

	scriptHold    = redis.NewScript(luaHold)
	scriptRelease = redis.NewScript(luaRelease)
	scriptMembers = redis.NewScript(luaMembers)
)

// leases takes, renews and gives up the shard leases of one Dispatcher, all
// under one random owner token.
type leases struct {
	rdb    redis.UniversalClient
	prefix string
	owner  string
	ttlMS  int64
}

func newLeases(rdb redis.UniversalClient, prefix string, ttlMS int64) (*leases, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("new lease owner token: %w", err)
	}
	return &leases{rdb: rdb, prefix: prefix, owner: hex.EncodeToString(b[:]), ttlMS: ttlMS}, nil
}

// hold takes shard's lease when it is free, or renews it when this owner
// holds it; false when another owner holds it.
func (l *leases) hold(ctx context.Context, shard int) (bool, error) {
	n, err := scriptHold.Run(ctx, l.rdb, []string{leaseKey(l.prefix, shard)}, l.owner, l.ttlMS).Int64()
	if err != nil {
		return false, fmt.Errorf("hold lease of shard %d: %w", shard, err)
	}
	return n == 1, nil
}

// release gives up shard's lease if this owner still holds it.
func (l *leases) release(ctx context.Context, shard int) error {
	if err := scriptRelease.Run(ctx, l.rdb, []string{leaseKey(l.prefix, shard)}, l.owner).Err(); err != nil {
		return fmt.Errorf("release lease of shard %d: %w", shard, err)
	}
	return nil
}

func membersKey(prefix string) string { return prefix + ":dispatch:members" }

// members records this owner as a live member until now + TTL and returns the
// number of live members; leave (beat false) removes it.
func (l *leases) members(ctx context.Context, beat bool) (int, error) {
	op := "leave"
	if beat {
		op = "beat"
	}
	n, err := scriptMembers.Run(ctx, l.rdb, []string{membersKey(l.prefix)}, l.owner, l.ttlMS, op).Int64()
	if err != nil {
		return 0, fmt.Errorf("dispatcher members (%s): %w", op, err)
	}
	return int(n), nil
}
