package store

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redisscript"
)

// Worker capacity (docs/design.md §2.2, back-pressure). Workers heartbeat their
// concurrency into the plain (not shard-tagged) hash <p>:workers, field
// worker id → "<concurrency> <expiry µs>". The dispatcher computes the free
// capacity as Capacity − InFlight: released-but-unclaimed jobs occupy a
// worker (a worker goroutine waits for their slot) just as running ones do.

// Heartbeat records that worker workerID runs concurrency jobs at once,
// until ttl from now (Redis time). Call it again well within ttl.
func (s *Store) Heartbeat(ctx context.Context, workerID string, concurrency int, ttl time.Duration) error {
	var err error
	switch {
	case workerID == "" || len(workerID) > 256:
		err = invalidf("worker id %q: want 1–256 bytes", workerID)
	case concurrency < 0 || concurrency > 1_000_000:
		err = invalidf("concurrency %d: want 0 … 1000000", concurrency)
	case ttl < time.Millisecond || ttl > MaxDurationUS*time.Microsecond:
		err = invalidf("ttl %s: want at least 1ms", ttl)
	}
	if err == nil {
		_, err = s.runKeys(ctx, scriptWorkers, []string{s.keys.workers()}, s.nowArg(), "beat",
			workerID, concurrency, ttl.Microseconds())
	}
	if err != nil {
		return fmt.Errorf("heartbeat of worker %q: %w", workerID, err)
	}
	return nil
}

// Capacity is the total concurrency of the workers whose heartbeat has not
// expired (Redis time); expired entries are deleted on the way.
func (s *Store) Capacity(ctx context.Context) (int, error) {
	d, err := s.runKeys(ctx, scriptWorkers, []string{s.keys.workers()}, s.nowArg(), "sum")
	if err != nil {
		return 0, fmt.Errorf("worker capacity: %w", err)
	}
	total := d.int(1)
	if err := d.Err(); err != nil {
		return 0, fmt.Errorf("worker capacity: %w", err)
	}
	return int(total), nil
}

// FreeCapacity is Capacity − InFlight (at least 0) read in one round trip
// (one pipeline; in Cluster, one per master). The dispatcher's budget reads
// the two apart instead, Capacity only every second.
func (s *Store) FreeCapacity(ctx context.Context) (int, error) {
	for try := 0; ; try++ {
		var sum *redisscript.Pending
		zcards := make([]*redis.IntCmd, s.keys.shards)
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			sum = s.runner.Queue(ctx, p, scriptWorkers.eval, []string{s.keys.workers()}, s.nowArg(), "sum")
			for shard := range zcards {
				zcards[shard] = p.ZCard(ctx, s.keys.leases(shard))
			}
			return nil
		})
		if err != nil && sum.NoScript() && try == 0 {
			if err := s.runner.Load(ctx, scriptWorkers.eval); err != nil {
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
		a, err := r.Array()
		if err != nil {
			return 0, fmt.Errorf("free capacity: %w", err)
		}
		d := decoder{a}
		free := d.int(1)
		if err := d.Err(); err != nil {
			return 0, fmt.Errorf("free capacity: %w", err)
		}
		for _, c := range zcards {
			free -= c.Val()
		}
		return int(max(free, 0)), nil
	}
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
