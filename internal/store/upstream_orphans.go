package store

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/quota"
)

// DeadReasonUnknownUpstream is Job.DeadReason of a job dead because an
// upstream it names no longer exists (DeadLetterUnknownUpstream).
const DeadReasonUnknownUpstream = "unknown_upstream"

// UnknownUpstreamLimitDefault is OrphanConfig.Limit when zero.
const UnknownUpstreamLimitDefault = 100

// OrphanConfig tunes DeadLetterUnknownUpstream.
type OrphanConfig struct {
	// Before: only jobs created at or before it die. Pass a time read
	// before the coordinator answered that the upstream does not exist
	// (the pass's Now), so that a job enqueued after the upstream was
	// created again is left alone. Required.
	Before time.Time
	// Limit is the most jobs dead-lettered by one call, 1 … 1000. Default
	// UnknownUpstreamLimitDefault.
	Limit int
	// DeadRetention and DeadMaxPerTenant are the pass's (PassConfig):
	// how long a dead letter is kept, and how many per tenant.
	DeadRetention    time.Duration
	DeadMaxPerTenant int
}

// DeadLetterUnknownUpstream dead-letters the jobs of shard's lanes that
// name upstream name, after its coordinator answered that it does not
// exist (a *quota.UpstreamNotFoundError; issue #15): jobs that were delayed
// (run_at, a retry's backoff) when it was deleted, or enqueued while the
// API's cache still knew it. In one script in the shard's slot
// (lua/upstream_orphans.lua): each queued job of a lane naming it (a
// multi-upstream lane too) created at or before cfg.Before becomes a dead
// letter with DeadReason DeadReasonUnknownUpstream, no attempt used; a
// replay after the upstream is created again queues it as usual. The
// shard's segments of the upstream and the aligned reservations of sets
// naming it are dropped (a new upstream of that name starts a new
// calendar). At most cfg.Limit jobs per call: more reports that some may
// be left (call again, e.g. at the next pass). Errors: ErrInvalid for a
// bad shard, name or config; Redis errors wrapped.
func (s *Store) DeadLetterUnknownUpstream(ctx context.Context, shard int, name string, cfg OrphanConfig) (n int, more bool, err error) {
	cfg.Limit = cmp.Or(cfg.Limit, UnknownUpstreamLimitDefault)
	cfg.DeadRetention = cmp.Or(cfg.DeadRetention, DeadRetentionDefault)
	cfg.DeadMaxPerTenant = cmp.Or(cfg.DeadMaxPerTenant, DeadMaxPerTenantDefault)
	if err = errors.Join(quota.CheckName(name), cfg.validate(shard, s.keys.shards)); err != nil {
		return 0, false, fmt.Errorf("dead-letter jobs naming unknown upstream %q on shard %d: %w", name, shard, err)
	}
	d, err := s.run(ctx, scriptUpstreamOrphans, shard, name, cfg.Before.UnixMicro(), cfg.Limit,
		cfg.DeadRetention.Microseconds(), cfg.DeadMaxPerTenant)
	if err == nil {
		n, more = int(d.int(1)), d.int(2) == 1
		err = d.Err()
	}
	if err != nil {
		return 0, false, fmt.Errorf("dead-letter jobs naming unknown upstream %q on shard %d: %w", name, shard, err)
	}
	return n, more, nil
}

// validate lists every problem of cfg for shard of shards.
func (c OrphanConfig) validate(shard, shards int) error {
	var errs []error
	if shard < 0 || shard >= shards {
		errs = append(errs, invalidf("shard %d: want 0 … %d", shard, shards-1))
	}
	if c.Before.IsZero() {
		errs = append(errs, invalidf("before: required"))
	}
	if c.Limit < 1 || c.Limit > 1000 {
		errs = append(errs, invalidf("limit %d: want 1 … 1000", c.Limit))
	}
	if c.DeadRetention < time.Microsecond || c.DeadMaxPerTenant < 1 {
		errs = append(errs, invalidf("dead retention %s, dead letters per tenant %d: want ≥ 1µs, ≥ 1",
			c.DeadRetention, c.DeadMaxPerTenant))
	}
	return errors.Join(errs...)
}
