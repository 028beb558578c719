package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redisscript"
)

// backfillBatch is the most tenants one tenant_backfill.lua call adds.
const backfillBatch = 500

// BackfillTenantIndex adds the tenants whose state predates the tenant index
// (a release before it) to their shard's index and name set, once per
// deployment: a shard whose marker <p>:{sN}:tenants_backfilled exists is
// skipped. For the others it SCANs every master for the shard's tenant keys
// (<p>:{sN}:t:<tenant>, its :q, :head and :dead keys name the same
// tenant) and reads the policy hash's tenants (HSCAN), then adds those with
// state as the scripts would (lua/tenant_backfill.lua: index_check's check
// time, ZADD NX: an entry already there is left as it is), at most
// backfillBatch tenants per script; the shard's last script sets its marker.
// Safe to run from several processes at once and to interrupt (the next run
// does the rest); idempotent. It returns how many tenants it added. Its
// cost grows with the keys of the deployment (one SCAN over them), so run
// it in the background.
func (s *Store) BackfillTenantIndex(ctx context.Context) (added int, err error) {
	b := &backfill{s: s, pending: map[int]bool{}, seen: map[int]map[string]bool{}, batch: map[int][]any{}}
	for shard := range s.keys.shards {
		n, err := s.rdb.Exists(ctx, s.keys.backfilled(shard)).Result()
		if err != nil {
			return 0, fmt.Errorf("backfill the tenant index: marker of shard %d: %w", shard, err)
		}
		if n == 0 {
			b.pending[shard], b.seen[shard] = true, map[string]bool{}
		}
	}
	if len(b.pending) == 0 {
		return 0, nil
	}
	pattern := globEscape(s.keys.prefix) + ":{s*}:t:*"
	err = redisscript.ForEachMaster(ctx, s.rdb, func(ctx context.Context, node redis.UniversalClient) error {
		iter := node.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			if shard, tn, ok := s.keys.tenantOfKey(iter.Val()); ok {
				if err := b.add(ctx, shard, tn); err != nil {
					return err
				}
			}
		}
		return iter.Err()
	})
	for shard := range b.pending {
		if err == nil {
			err = b.policyTenants(ctx, shard)
		}
		if err == nil {
			err = b.flush(ctx, shard, true)
		}
	}
	if err != nil {
		return b.added, fmt.Errorf("backfill the tenant index: %w", err)
	}
	return b.added, nil
}

// backfill is one BackfillTenantIndex run: the tenants met per pending
// shard, and the batch not yet sent. Safe for concurrent use.
type backfill struct {
	s       *Store
	pending map[int]bool // read-only after the start
	mu      sync.Mutex
	seen    map[int]map[string]bool
	batch   map[int][]any
	added   int
}

// add queues tenant tn of shard, and sends the shard's batch when full.
func (b *backfill) add(ctx context.Context, shard int, tn string) error {
	b.mu.Lock()
	if !b.pending[shard] || b.seen[shard][tn] {
		b.mu.Unlock()
		return nil
	}
	b.seen[shard][tn] = true
	b.batch[shard] = append(b.batch[shard], tn)
	full := len(b.batch[shard]) >= backfillBatch
	b.mu.Unlock()
	if !full {
		return nil
	}
	return b.flush(ctx, shard, false)
}

// flush sends shard's queued tenants; done marks the shard backfilled.
func (b *backfill) flush(ctx context.Context, shard int, done bool) error {
	b.mu.Lock()
	names := b.batch[shard]
	b.batch[shard] = nil
	b.mu.Unlock()
	if len(names) == 0 && !done {
		return nil
	}
	flag := "0"
	if done {
		flag = "1"
	}
	d, err := b.s.run(ctx, scriptBackfill, shard, append([]any{flag}, names...)...)
	if err == nil {
		err = d.Err()
	}
	if err != nil {
		return fmt.Errorf("shard %d: %w", shard, err)
	}
	b.mu.Lock()
	b.added += int(d.int(2))
	b.mu.Unlock()
	return nil
}

// policyTenants queues the tenants with overrides in shard's policy hash.
func (b *backfill) policyTenants(ctx context.Context, shard int) error {
	iter := b.s.rdb.HScan(ctx, b.s.keys.policy(shard), 0, "", 1000).Iterator()
	for i := 0; iter.Next(ctx); i++ {
		if i%2 == 1 {
			continue // a value
		}
		if field := iter.Val(); checkTenant(field) == nil {
			if err := b.add(ctx, shard, field); err != nil {
				return err
			}
		}
	}
	if err := iter.Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("policy tenants of shard %d: %w", shard, err)
	}
	return nil
}

// tenantOfKey parses a key of a tenant — "<p>:{s<shard>}:t:<tenant>" or one
// of its sub-keys (:q, :head, :dead) — into its shard and tenant; ok is
// false for any other key.
func (k keyspace) tenantOfKey(key string) (shard int, tenant string, ok bool) {
	rest, ok := strings.CutPrefix(key, k.prefix+":{s")
	if !ok {
		return 0, "", false
	}
	num, rest, ok := strings.Cut(rest, "}:t:")
	if !ok {
		return 0, "", false
	}
	shard, err := strconv.Atoi(num)
	tenant, _, _ = strings.Cut(rest, ":") // a tenant id holds no ':' (checkTenant)
	if err != nil || shard < 0 || shard >= k.shards || checkTenant(tenant) != nil || k.shardOf(tenant) != shard {
		return 0, "", false
	}
	return shard, tenant, true
}

// globEscape escapes the characters a SCAN MATCH pattern treats specially.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
