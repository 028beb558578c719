package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/redisscript"
)

// ErrNotReplicated: a write was made on the master but fewer replicas than
// Config.WaitReplicas confirmed it within Config.WaitTimeout. The write
// stands (a failover before the replicas catch up may lose it). Returned
// as a *NotReplicatedError, beside the call's results.
var ErrNotReplicated = errors.New("not confirmed by enough replicas")

// NotReplicatedError says how many replicas confirmed a write, of how many
// asked for, within Timeout.
type NotReplicatedError struct {
	Want, Got int
	Timeout   time.Duration
}

func (e *NotReplicatedError) Error() string {
	return fmt.Sprintf("stored on the master, but %d of %d replicas confirmed it within %s", e.Got, e.Want, e.Timeout)
}

// Is makes errors.Is(err, ErrNotReplicated) true.
func (e *NotReplicatedError) Is(target error) bool { return target == ErrNotReplicated }

// waitMark is shard's replication marker, "<p>:{s7}:waitmark" (a STRING of
// "1" living one minute): Confirm writes it so that a WAIT covers writes
// made before, on other connections.
func (k keyspace) waitMark(shard int) string { return k.base(shard) + "waitmark" }

// waiting reports whether writes must be confirmed by replicas
// (Config.WaitReplicas > 0).
func (s *Store) waiting() bool { return s.wait.Replicas > 0 }

// runWaited is run (sc on shard with the conventional arguments) followed
// by WAIT on the same connection: it also returns how many replicas
// confirmed the call's writes. Only for scripts built on lib.lua. When
// writes need no confirmation (not waiting) it is run, with 0 acked.
func (s *Store) runWaited(ctx context.Context, sc *script, shard int, args ...any) (decoder, int, error) {
	if !s.waiting() {
		d, err := s.run(ctx, sc, shard, args...)
		return d, 0, err
	}
	version, _ := library()
	r, acked, err := s.runner.RunFunctionWait(ctx, s.wait, qualified(version, sc.name), sc.eval,
		[]string{s.keys.ready(shard)}, s.argv(shard, args...)...)
	if err != nil {
		return decoder{}, 0, err
	}
	d, err := r.Status(redisscript.Refused)
	return decoder{d}, acked, err
}

// confirm asks the replicas to confirm every write shard's master made so
// far (for a call that found its work done by an earlier one: an
// idempotent replay); nil when WaitReplicas confirmed in time, else a
// *NotReplicatedError.
func (s *Store) confirm(ctx context.Context, shard int) error {
	acked, err := s.runner.Confirm(ctx, s.wait, s.keys.waitMark(shard))
	if err != nil {
		return err
	}
	return s.checkAcked(acked)
}

// checkAcked is nil when acked replicas are enough, else a
// *NotReplicatedError.
func (s *Store) checkAcked(acked int) error {
	if acked >= s.wait.Replicas {
		return nil
	}
	return &NotReplicatedError{Want: s.wait.Replicas, Got: acked, Timeout: s.wait.Timeout}
}

// waitConfig is the Wait of cfg (validated by Config.validate).
func waitConfig(cfg Config) redisscript.Wait {
	return redisscript.Wait{Replicas: cfg.WaitReplicas, Timeout: cfg.WaitTimeout}
}
