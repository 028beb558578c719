package store

import (
	"context"
	"fmt"
	"time"
)

// MaxFinishedWindow is the longest window Finished counts over: the seconds
// each shard's finished-jobs counter keeps (lua/finish.lua keep) — a
// little over the console's 10 s, so the key expires soon after the last
// finish (an idle deployment keeps no key of it).
const MaxFinishedWindow = 11 * time.Second

// Finished returns how many jobs ended by an attempt — succeeded, or
// dead-lettered by a finish — in the whole seconds of window before now's
// second (the script's now: Redis TIME, or Config.Clock), over every shard,
// one HMGET script per shard (lua/finished.lua). Every finish adds its ended
// jobs to its shard's counter, whichever process calls it, so the count is
// the deployment's, not one throttler's. Not counted: a job a pass's sweep
// dead-letters when its lease expired with no finish (a worker lost), and
// cancels. window is 1 s … MaxFinishedWindow in whole seconds; else the
// error wraps ErrInvalid.
func (s *Store) Finished(ctx context.Context, window time.Duration) (int64, error) {
	if window < time.Second || window > MaxFinishedWindow || window%time.Second != 0 {
		return 0, fmt.Errorf("count finished jobs: %w", invalidf("window %s: want whole seconds of 1s … %s", window, MaxFinishedWindow))
	}
	var n int64
	err := s.finishedByShard(ctx, int64(window/time.Second), func(_, whole, _ int64) { n += whole })
	return n, err
}

// FinishRate is the jobs per second that ended by an attempt lately, over
// every shard (what Finished counts): those of the last whole second and of
// the current one so far, over the time they span — 1 s and the current
// second's elapsed part, by each shard's script clock. It follows a start
// within a fraction of a second, where Finished's whole seconds lag by up
// to two: the dispatcher's budget lends the workers headroom by it.
func (s *Store) FinishRate(ctx context.Context) (float64, error) {
	var rate float64
	err := s.finishedByShard(ctx, 1, func(nowUS, whole, current int64) {
		elapsed := float64(nowUS%1_000_000) / 1e6
		rate += float64(whole+current) / (1 + elapsed)
	})
	return rate, err
}

// finishedByShard runs lua/finished.lua over w whole seconds on every
// shard, one call each, and gives each reply (the script's now µs, the
// count of the whole seconds, that of the current one) to f.
func (s *Store) finishedByShard(ctx context.Context, w int64, f func(nowUS, whole, current int64)) error {
	for shard := range s.keys.shards {
		d, err := s.run(ctx, scriptFinished, shard, w)
		if err != nil {
			return fmt.Errorf("count finished jobs of shard %d: %w", shard, err)
		}
		nowUS, whole, current := d.int(1), d.int(2), d.int(3)
		if err := d.Err(); err != nil {
			return fmt.Errorf("count finished jobs of shard %d: %w", shard, err)
		}
		f(nowUS, whole, current)
	}
	return nil
}
