package dispatch

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redisscript"
)

// The lease scripts (keys.go: leaseKey, membersKey). Each file opens with its
// KEYS/ARGV/reply contract.
var (
	//go:embed lua/hold.lua
	luaHold string
	//go:embed lua/release.lua
	luaRelease string
	//go:embed lua/members.lua
	luaMembers string

	scriptHold    = redisscript.New("hold", luaHold)
	scriptRelease = redisscript.New("release", luaRelease)
	scriptMembers = redisscript.New("members", luaMembers)
)

// leases takes, renews and gives up the shard leases of one Dispatcher, all
// under one random owner token.
type leases struct {
	run    *redisscript.Runner
	prefix string
	owner  string
	ttlMS  int64
}

func newLeases(rdb redis.UniversalClient, prefix string, ttlMS int64) (*leases, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("new lease owner token: %w", err)
	}
	return &leases{run: redisscript.NewRunner(rdb, nil), prefix: prefix, owner: hex.EncodeToString(b[:]), ttlMS: ttlMS}, nil
}

// hold takes shard's lease when it is free, or renews it when this owner
// holds it; false when another owner holds it.
func (l *leases) hold(ctx context.Context, shard int) (bool, error) {
	n, err := l.runInt(ctx, scriptHold, LeaseKey(l.prefix, shard), l.owner, l.ttlMS)
	if err != nil {
		return false, fmt.Errorf("hold lease of shard %d: %w", shard, err)
	}
	return n == 1, nil
}

// release gives up shard's lease if this owner still holds it.
func (l *leases) release(ctx context.Context, shard int) error {
	if _, err := l.runInt(ctx, scriptRelease, LeaseKey(l.prefix, shard), l.owner); err != nil {
		return fmt.Errorf("release lease of shard %d: %w", shard, err)
	}
	return nil
}

// members records this owner as a live member until now + TTL and returns the
// number of live members; leave (beat false) removes it.
func (l *leases) members(ctx context.Context, beat bool) (int, error) {
	op := "leave"
	if beat {
		op = "beat"
	}
	n, err := l.runInt(ctx, scriptMembers, membersKey(l.prefix), l.owner, l.ttlMS, op)
	if err != nil {
		return 0, fmt.Errorf("dispatcher members (%s): %w", op, err)
	}
	return int(n), nil
}

// runInt runs s on key with args; its reply is an integer.
func (l *leases) runInt(ctx context.Context, s *redisscript.Script, key string, args ...any) (int64, error) {
	r, err := l.run.Run(ctx, s, []string{key}, args...)
	if err != nil {
		return 0, err
	}
	return r.Int()
}
