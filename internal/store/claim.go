package store

import (
	"context"
	"fmt"
	"time"
)

// Claim is a worker's go-check at a released job's slot, in one script
// (DESIGN §2.3 step 3). The job goes released(gen) → running(gen) only when
// gen is current, the job is not canceled, its tenant is neither disabled
// nor paused (admin or upstream) and has fewer running jobs than its
// concurrency, now ≥ slot − tolerance (ε) in Redis time, and the tenant's
// send schedule allows it. Outcomes:
//
//   - ClaimOK: Job is set (body, attempt number = attempts used + 1,
//     timeout, creation time). The job counts toward concurrency as running from now on;
//     its lease deadline becomes now + timeout + grace, with the grace the
//     pass gave the release (record field grace).
//   - ClaimEarly: now < slot − ε, or the send schedule does not allow the
//     job yet; Wait says how long. Sleep and claim again.
//   - ClaimStale: gen is not current, the job is not released, or its record
//     is gone: a duplicate task; drop it.
//   - ClaimCanceled: drop it.
//   - ClaimReturned: back to the head lane unsent (gen + 1, no attempt used)
//     because the tenant is disabled, paused or at its concurrency cap
//     (Reason).
//
// The send schedule is a GCRA over claim instants (tenant field stat, with
// the tenant's rate, burst and effective interval): a late claim (the task
// waited in asynq, Redis was slow) goes out at once unless a later job of
// the tenant went out first, in which case it waits its turn. Late jobs thus
// never go out in a clump, and a late claim forfeits no slot.
//
// Every change ends with reschedule(tenant); Claim publishes no wake-up (the
// dispatcher passes at least every D/2). tolerance must be ≥ 0.
// ErrNotFound for an id that cannot exist in this Store; other errors are
// Redis's, wrapped.
func (s *Store) Claim(ctx context.Context, id string, gen int64, tolerance time.Duration) (Claim, error) {
	shard, err := s.jobShard(id)
	if err == nil && tolerance < 0 {
		err = invalidf("tolerance %s: want ≥ 0", tolerance)
	}
	if err != nil {
		return Claim{}, fmt.Errorf("claim job %q: %w", id, err)
	}
	d, err := s.run(ctx, scriptClaim, shard, claimArgs(id, gen, tolerance)...)
	if err != nil {
		return Claim{}, fmt.Errorf("claim job %q: %w", id, err)
	}
	var c Claim
	switch kind := d.str(1); kind {
	case "claimed":
		c.Outcome = ClaimOK
		c.Job = ClaimedJob{ID: id, Tenant: d.str(2), Type: d.str(3), Body: []byte(d.str(4)),
			Gen: d.int(5), Attempt: d.int(6), Timeout: us(d.int(7)), Slot: microsTime(d.int(8)),
			Created: microsTime(d.int(9))}
	case "early":
		c.Outcome, c.Wait = ClaimEarly, us(d.int(2))
	case "stale":
		c.Outcome, c.State = ClaimStale, State(d.str(2))
	case "canceled":
		c.Outcome = ClaimCanceled
	case "returned":
		c.Outcome, c.Reason = ClaimReturned, d.str(2)
	default:
		d.fail("claim outcome %q", kind)
	}
	if err := d.Err(); err != nil {
		return Claim{}, fmt.Errorf("claim job %q: %w", id, err)
	}
	return c, nil
}

// claimArgs is ARGV[3…] of claim.lua.
func claimArgs(id string, gen int64, tolerance time.Duration) []any {
	return []any{id, gen, tolerance.Microseconds()}
}
