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
	for shard := range s.keys.shards {
		d, err := s.run(ctx, scriptFinished, shard, int64(window/time.Second))
		if err != nil {
			return 0, fmt.Errorf("count finished jobs of shard %d: %w", shard, err)
		}
		n += d.int(2)
		if err := d.Err(); err != nil {
			return 0, fmt.Errorf("count finished jobs of shard %d: %w", shard, err)
		}
	}
	return n, nil
}
