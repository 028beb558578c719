// Package migrate moves a stopped Sluice deployment from one Redis to
// another — typically from a single node to a Redis Cluster — by copying
// every key under its prefix (DUMP, PTTL, RESTORE), the meta hash last.
//
// It is an offline copy: every throttler, worker and sluicetask middleware
// of the deployment must be stopped first, and Copy refuses to start while
// any of them still holds a lease or an unexpired heartbeat in the source.
// What it does not copy, and why nothing is lost:
//
//   - asynq's keys (the hand-off queues and users' task queues): every job
//     handed to asynq is leased in Sluice's own keys, so once the copy runs
//     against the target, the dispatcher's sweep re-releases each such job
//     after its lease (send time + grace), with the same webhook-id;
//   - heartbeats and dispatch leases (<p>:workers, <p>:mw:*,
//     <p>:dispatch:*): they describe the processes that were stopped.
//
// Every shard's keys carry the hash tag {s<shard>}, so on a Cluster they
// land together in their shard's slot whichever node holds it.
package migrate

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/redisscript"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// ErrLive is wrapped by Copy's error when a process of the deployment still
// runs against the source; ErrTargetInUse when the target already holds a
// deployment under the prefix. In both cases nothing was written.
var (
	ErrLive        = errors.New("a Sluice process still runs against the source")
	ErrTargetInUse = errors.New("the target already holds a Sluice deployment under this prefix")
)

// scanCount is the COUNT of each SCAN and the keys copied per round trip.
const scanCount = 500

// Report is what Copy did (or, with DryRun, would do).
type Report struct {
	Meta   wire.Meta      // the deployment copied
	Keys   int            // keys copied (or found, with DryRun)
	ByKind map[string]int // keys by kind: "job", "tenant", "shard", "other"
	// Leased is the number of jobs released or running in the source (its
	// lease sets): the target's sweep re-releases each after its lease.
	Leased int
	// Skipped is the number of keys left behind on purpose (heartbeats,
	// dispatch leases) or gone between SCAN and DUMP (expired).
	Skipped int
}

// Options tune Copy. The zero value copies.
type Options struct {
	// DryRun checks both sides and counts the keys, writing nothing.
	DryRun bool
}

// Copy copies the deployment under prefix from src to dst. src and dst may
// be single nodes, Cluster or Sentinel clients.
//
// It refuses (ErrLive) while a dispatcher lease, a worker heartbeat or a
// task middleware heartbeat of the deployment is unexpired in src, and
// (ErrTargetInUse) when dst already has <prefix>:meta. Keys under the prefix
// in dst without a meta hash are an interrupted Copy's: they are replaced,
// so running Copy again after a failure is safe. The meta hash is written
// last, so no Sluice process accepts the target before the copy is whole.
func Copy(ctx context.Context, src, dst redis.UniversalClient, prefix string, o Options) (Report, error) {
	meta, found, err := store.ReadMeta(ctx, src, prefix)
	switch {
	case err != nil:
		return Report{}, fmt.Errorf("migrate: source: %w", err)
	case !found:
		return Report{}, fmt.Errorf("migrate: source has no %s: no Sluice deployment under prefix %q", wire.MetaKey(prefix), prefix)
	}
	rep := Report{Meta: meta, ByKind: map[string]int{}}
	if err := checkStopped(ctx, src, meta); err != nil {
		return rep, err
	}
	if _, found, err := store.ReadMeta(ctx, dst, prefix); err != nil && !errors.Is(err, wire.ErrMetaField) {
		return rep, fmt.Errorf("migrate: target: %w", err)
	} else if found || err != nil {
		return rep, fmt.Errorf("migrate: %w: %s exists in the target", ErrTargetInUse, wire.MetaKey(prefix))
	}
	if rep.Leased, err = countLeased(ctx, src, meta); err != nil {
		return rep, err
	}
	// A Cluster's masters are walked at once: each counts into its own
	// report, added to rep under mu when its walk ends.
	var mu sync.Mutex
	err = redisscript.ForEachMaster(ctx, src, func(ctx context.Context, node redis.UniversalClient) error {
		part := Report{ByKind: map[string]int{}}
		err := copyNode(ctx, node, dst, prefix, o, &part)
		mu.Lock()
		defer mu.Unlock()
		rep.Keys += part.Keys
		rep.Skipped += part.Skipped
		for k, n := range part.ByKind {
			rep.ByKind[k] += n
		}
		return err
	})
	if err != nil {
		return rep, err
	}
	if o.DryRun {
		return rep, nil
	}
	if err := copyKeys(ctx, src, dst, []string{wire.MetaKey(prefix)}); err != nil {
		return rep, fmt.Errorf("migrate: meta: %w", err)
	}
	rep.Keys++
	rep.ByKind["other"]++
	return rep, nil
}

// copyNode copies the keys under prefix that one source node holds, in
// batches of scanCount, the meta hash and process keys left out.
func copyNode(ctx context.Context, node redis.Cmdable, dst redis.UniversalClient, prefix string, o Options, rep *Report) error {
	iter := node.Scan(ctx, 0, prefix+":*", scanCount).Iterator()
	batch := make([]string, 0, scanCount)
	flush := func() error {
		if len(batch) == 0 || o.DryRun {
			batch = batch[:0]
			return nil
		}
		err := copyKeys(ctx, node, dst, batch)
		batch = batch[:0]
		return err
	}
	for iter.Next(ctx) {
		key := iter.Val()
		kind := kindOf(prefix, key)
		if kind == "" {
			rep.Skipped++
			continue
		}
		rep.Keys++
		rep.ByKind[kind]++
		if batch = append(batch, key); len(batch) == scanCount {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("migrate: scan the source: %w", err)
	}
	return flush()
}

// copyKeys dumps keys from src and restores them in dst with their
// remaining TTL, replacing what an interrupted copy left. A key that expired
// in between is skipped.
func copyKeys(ctx context.Context, src redis.Cmdable, dst redis.UniversalClient, keys []string) error {
	dumps := make([]*redis.StringCmd, len(keys))
	ttls := make([]*redis.DurationCmd, len(keys))
	_, err := src.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			dumps[i] = p.Dump(ctx, k)
			ttls[i] = p.PTTL(ctx, k)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("migrate: read the source: %w", err)
	}
	_, err = dst.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			data, err := dumps[i].Result()
			ttl := ttls[i].Val()
			if errors.Is(err, redis.Nil) || ttl == -2 { // expired meanwhile
				continue
			}
			if ttl < 0 {
				ttl = 0 // no TTL
			}
			p.RestoreReplace(ctx, k, ttl, data)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("migrate: write the target: %w", err)
	}
	return nil
}

// kindOf classifies a key of the deployment for the report; "" for the keys
// Copy leaves behind (process heartbeats and leases, and the meta hash,
// which Copy writes last).
func kindOf(prefix, key string) string {
	rest := strings.TrimPrefix(key, prefix+":")
	switch {
	case key == wire.MetaKey(prefix), rest == "workers",
		strings.HasPrefix(rest, "mw:"), strings.HasPrefix(rest, "dispatch:"):
		return ""
	case !strings.HasPrefix(rest, "{s"):
		return "other"
	}
	_, inShard, _ := strings.Cut(rest, "}:")
	switch {
	case strings.HasPrefix(inShard, "j:"):
		return "job"
	case strings.HasPrefix(inShard, "t:"), strings.HasPrefix(inShard, "idem:"):
		return "tenant"
	default:
		return "shard"
	}
}

// checkStopped fails with ErrLive while a dispatcher holds a shard lease, or
// a worker or task middleware has an unexpired heartbeat of a concurrency
// above 0 (a graceful stop announces 0; a killed process's heartbeat lives
// on for its TTL, 9 s by default).
func checkStopped(ctx context.Context, src redis.UniversalClient, meta wire.Meta) error {
	for shard := range meta.Shards {
		n, err := src.Exists(ctx, dispatch.LeaseKey(meta.Prefix, shard)).Result()
		if err != nil {
			return fmt.Errorf("migrate: read the dispatch leases: %w", err)
		}
		if n > 0 {
			return fmt.Errorf("migrate: %w: a dispatcher holds %s; stop every throttler first", ErrLive, dispatch.LeaseKey(meta.Prefix, shard))
		}
	}
	now, err := src.Time(ctx).Result()
	if err != nil {
		return fmt.Errorf("migrate: read the source's clock: %w", err)
	}
	live := func(key, value string) error {
		f := strings.Fields(value)
		if len(f) < 2 || f[0] == "0" { // a stopped process announces concurrency 0
			return nil
		}
		if exp, err := strconv.ParseInt(f[1], 10, 64); err == nil && exp > now.UnixMicro() {
			return fmt.Errorf("migrate: %w: an unexpired heartbeat in %s; stop every worker and task middleware first", ErrLive, key)
		}
		return nil
	}
	return redisscript.ForEachMaster(ctx, src, func(ctx context.Context, node redis.UniversalClient) error {
		iter := node.Scan(ctx, 0, meta.Prefix+":*", scanCount).Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			rest := strings.TrimPrefix(key, meta.Prefix+":")
			if rest != "workers" && !strings.HasPrefix(rest, "mw:") {
				continue
			}
			h, err := node.HGetAll(ctx, key).Result()
			if err != nil {
				return fmt.Errorf("migrate: read %s: %w", key, err)
			}
			for _, v := range h {
				if err := live(key, v); err != nil {
					return err
				}
			}
		}
		return iter.Err()
	})
}

// countLeased sums the shards' lease sets: jobs released or running.
func countLeased(ctx context.Context, src redis.UniversalClient, meta wire.Meta) (int, error) {
	total := 0
	for shard := range meta.Shards {
		n, err := src.ZCard(ctx, store.LeasesKey(meta.Prefix, shard)).Result()
		if err != nil {
			return 0, fmt.Errorf("migrate: count the leased jobs: %w", err)
		}
		total += int(n)
	}
	return total, nil
}
