package fleet

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redisscript"
)

// Worker capacity (docs/design.md §2.2, back-pressure). Workers heartbeat their
// concurrency into the plain (not shard-tagged) hash <p>:workers, field
// worker id → "<concurrency> <expiry µs>". The dispatcher computes the free
// capacity as Capacity − InFlight: released-but-unclaimed jobs occupy a
// worker (a worker goroutine waits for their slot) just as running ones do.

// Heartbeat records that worker workerID runs concurrency jobs at once,
// until ttl from now (Redis time). Call it again well within ttl. Its entry
// says that the process runs pre-claimed jobs (Preclaimable): every process
// of this version does — a worker runs them, the task middleware never
// gets any.
//
// Rolling upgrades: a worker of an earlier version heartbeats under its
// plain id, and while one is live no dispatcher pre-claims.
func (f *Roster) Heartbeat(ctx context.Context, workerID string, concurrency int, ttl time.Duration) error {
	var err error
	switch {
	case workerID == "" || len(workerID) > 256:
		err = invalidf("worker id %q: want 1–256 bytes", workerID)
	case concurrency < 0 || concurrency > 1_000_000:
		err = invalidf("concurrency %d: want 0 … 1000000", concurrency)
	case ttl < time.Millisecond || ttl > policy.MaxDuration:
		err = invalidf("ttl %s: want at least 1ms", ttl)
	}
	if err == nil {
		_, err = f.runKeys(ctx, scriptWorkers, []string{f.keys.workers()}, f.nowArg(), "beat",
			preclaimLevel+workerID, concurrency, ttl.Microseconds())
	}
	if err != nil {
		return fmt.Errorf("heartbeat of worker %q: %w", workerID, err)
	}
	return nil
}

// preclaimLevel begins the heartbeat field of a process that runs
// pre-claimed jobs (workers.lua); earlier versions read any field name.
const preclaimLevel = "@1:"

// Preclaimable reports whether at least one worker is live and every live
// one runs pre-claimed jobs (its heartbeat says so: Heartbeat), read as
// Capacity reads it. The dispatcher pre-claims only then (docs/design.md
// §2.2): a worker of an earlier version would claim a pre-claimed job, get
// stale and drop it.
func (f *Roster) Preclaimable(ctx context.Context) (bool, error) {
	d, err := f.runKeys(ctx, scriptWorkers, []string{f.keys.workers()}, f.nowArg(), "sum")
	if err != nil {
		return false, fmt.Errorf("workers' pre-claim level: %w", err)
	}
	live, capable := d.Int(2), d.Int(3)
	if err := d.Err(); err != nil {
		return false, fmt.Errorf("workers' pre-claim level: %w", err)
	}
	return live > 0 && capable == live, nil
}

// Capacity is the total concurrency of the workers whose heartbeat has not
// expired (Redis time); expired entries are deleted on the way.
func (f *Roster) Capacity(ctx context.Context) (int, error) {
	d, err := f.runKeys(ctx, scriptWorkers, []string{f.keys.workers()}, f.nowArg(), "sum")
	if err != nil {
		return 0, fmt.Errorf("worker capacity: %w", err)
	}
	total := d.Int(1)
	if err := d.Err(); err != nil {
		return 0, fmt.Errorf("worker capacity: %w", err)
	}
	return int(total), nil
}

// Workers is the number of workers whose heartbeat has not expired (Redis
// time) and their total concurrency, read as Capacity reads it.
func (f *Roster) Workers(ctx context.Context) (live, capacity int, err error) {
	d, err := f.runKeys(ctx, scriptWorkers, []string{f.keys.workers()}, f.nowArg(), "sum")
	if err != nil {
		return 0, 0, fmt.Errorf("workers: %w", err)
	}
	capacity, live = int(d.Int(1)), int(d.Int(2))
	if err := d.Err(); err != nil {
		return 0, 0, fmt.Errorf("workers: %w", err)
	}
	return live, capacity, nil
}

// CapacityLess is Capacity less the members of the sorted sets busy (one
// ZCARD each; at least 0), read in one round trip (one pipeline; in
// Cluster, one per master). store.FreeCapacity passes the shards' lease
// sets.
func (f *Roster) CapacityLess(ctx context.Context, busy []string) (int, error) {
	for try := 0; ; try++ {
		var sum *redisscript.Pending
		zcards := make([]*redis.IntCmd, len(busy))
		_, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			sum = f.runner.Queue(ctx, p, scriptWorkers, []string{f.keys.workers()}, f.nowArg(), "sum")
			for i, key := range busy {
				zcards[i] = p.ZCard(ctx, key)
			}
			return nil
		})
		if err != nil && sum.NoScript() && try == 0 {
			if err := f.runner.Load(ctx, scriptWorkers); err != nil {
				return 0, fmt.Errorf("free capacity: load script: %w", err)
			}
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("free capacity: %w", err)
		}
		r, err := sum.Result()
		if err != nil {
			return 0, fmt.Errorf("free capacity: %w", err)
		}
		d, err := r.Array()
		if err != nil {
			return 0, fmt.Errorf("free capacity: %w", err)
		}
		free := d.Int(1)
		if err := d.Err(); err != nil {
			return 0, fmt.Errorf("free capacity: %w", err)
		}
		for _, c := range zcards {
			free -= c.Val()
		}
		return int(max(free, 0)), nil
	}
}
