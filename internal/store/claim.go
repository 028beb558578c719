package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/redisscript"
	"github.com/sluicehq/sluice/internal/wire"
)

// Claim is a worker's go-check at a released job's slot, in one script
// (docs/design.md §2.3 step 3). The job goes released(gen) → running(gen) only when
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
// A job given back ends with reschedule(tenant), and so does a claim that
// may have freed its tenant from the release cap; when that made the
// shard's earliest time earlier, Claim publishes it on the shard's wake
// channel. tolerance must be ≥ 0.
// ErrNotFound for an id that cannot exist in this Store; other errors are
// Redis's, wrapped.
func (s *Store) Claim(ctx context.Context, id string, gen int64, tolerance time.Duration) (Claim, error) {
	shard, err := s.jobShard(id)
	if err != nil {
		return Claim{}, fmt.Errorf("claim job %q: %w", id, err)
	}
	cs, err := s.claim(ctx, shard, []ClaimRequest{{ID: id, Gen: gen}}, tolerance)
	if err != nil {
		return Claim{}, fmt.Errorf("claim job %q: %w", id, err)
	}
	return cs[0], nil
}

// ClaimRequest is one job of a ClaimBatch: its id and the gen its task
// carries.
type ClaimRequest struct {
	ID  string
	Gen int64
}

// ClaimBatch claims the jobs of reqs, all of one shard, in one script: each
// exactly as Claim would, one after the other in request order, at one
// Redis now (a job twice in reqs: the second is ClaimStale). Each tenant's
// policy and state are read and saved once; one job's outcome (stale,
// canceled, early, returned) never changes another's. The claims are in
// request order. An id that cannot exist in this Store or is not of shard
// is ErrInvalid (ErrNotFound for a malformed id) and nothing is claimed;
// other errors are Redis's, wrapped, and then none or all of the claims
// happened. An empty reqs claims nothing and returns nil.
func (s *Store) ClaimBatch(ctx context.Context, shard int, reqs []ClaimRequest, tolerance time.Duration) ([]Claim, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	for _, r := range reqs {
		if err := s.checkShard(r.ID, shard); err != nil {
			return nil, fmt.Errorf("claim %d jobs on shard %d: %w", len(reqs), shard, err)
		}
	}
	cs, err := s.claim(ctx, shard, reqs, tolerance)
	if err != nil {
		return nil, fmt.Errorf("claim %d jobs on shard %d: %w", len(reqs), shard, err)
	}
	return cs, nil
}

// checkShard requires id to be a job id of shard.
func (s *Store) checkShard(id string, shard int) error {
	got, err := s.jobShard(id)
	if err != nil {
		return fmt.Errorf("job %q: %w", id, err)
	}
	if got != shard {
		return fmt.Errorf("job %q is of shard %d: %w", id, got, invalidf("not of shard %d", shard))
	}
	return nil
}

// claim runs claim.lua for reqs, all of shard, and decodes its replies.
func (s *Store) claim(ctx context.Context, shard int, reqs []ClaimRequest, tolerance time.Duration) ([]Claim, error) {
	if tolerance < 0 {
		return nil, invalidf("tolerance %s: want ≥ 0", tolerance)
	}
	d, err := s.run(ctx, scriptClaim, shard, claimArgs(reqs, tolerance)...)
	if err != nil {
		return nil, err
	}
	if d.Len() != 1+len(reqs) {
		d.fail("%d claims for %d jobs", d.Len()-1, len(reqs))
	}
	cs := make([]Claim, len(reqs))
	for i := range reqs {
		if i+1 < d.Len() {
			cs[i] = decodeClaim(d.list(i+1), reqs[i].ID)
		}
	}
	if err := d.Err(); err != nil {
		return nil, err
	}
	return cs, nil
}

// decodeClaim reads one job's reply of claim.lua.
func decodeClaim(d decoder, id string) Claim {
	var c Claim
	switch kind := d.str(0); kind {
	case "claimed":
		c.Outcome = ClaimOK
		c.Job = ClaimedJob{ID: id, Tenant: d.str(1), Type: d.str(2), Body: []byte(d.str(3)),
			Gen: d.int(4), Attempt: d.int(5), Timeout: redisscript.Micros(d.int(6)), Slot: redisscript.MicrosTime(d.int(7)),
			Created: redisscript.MicrosTime(d.int(8)), Cost: d.int(9), Upstreams: splitUpstreams(d.str(10))}
		if sign := d.list(11); sign.Len() > 0 {
			set := decodeSecretSet(sign, 0)
			c.Job.Signing = &set
		}
		c.Job.SendAt = redisscript.MicrosTime(d.int(12))
	case "early":
		c.Outcome, c.Wait = ClaimEarly, redisscript.Micros(d.int(1))
	case "stale":
		c.Outcome, c.State = ClaimStale, State(d.str(1))
	case "canceled":
		c.Outcome = ClaimCanceled
	case "returned":
		c.Outcome, c.Reason = ClaimReturned, d.str(1)
	default:
		d.fail("claim outcome %q", kind)
	}
	return c
}

// claimArgs is ARGV[3…] of claim.lua.
func claimArgs(reqs []ClaimRequest, tolerance time.Duration) []any {
	args := make([]any, 0, 1+2*len(reqs))
	args = append(args, tolerance.Microseconds())
	for _, r := range reqs {
		args = append(args, r.ID, r.Gen)
	}
	return args
}

// splitUpstreams reads record field ups: upstream names joined by ','
// ("" = none).
func splitUpstreams(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// PreClaimed is the claimed job a pre-claimed hand-off entry carries (the
// pass claimed it: docs/design.md §2.2, wire.Claimed), as Claim would have
// returned it; ok is false for an entry left to the claim.
func PreClaimed(p wire.Payload) (job ClaimedJob, ok bool) {
	c := p.Claimed
	if c == nil {
		return ClaimedJob{}, false
	}
	job = ClaimedJob{ID: p.ID, Tenant: c.Tenant, Type: c.Type, Body: []byte(c.Body), Gen: p.Gen, Attempt: c.Attempt,
		Timeout: redisscript.Micros(c.TimeoutUS), Slot: redisscript.MicrosTime(c.SlotUS), SendAt: p.Slot(),
		Created: redisscript.MicrosTime(c.CreatedUS), Cost: c.Cost, Upstreams: c.Upstreams}
	if s := c.Signing; s != nil {
		set := SecretSet{Now: redisscript.MicrosTime(s.NowUS), Unsigned: s.Unsigned}
		for _, sec := range s.Secrets {
			st := StoredSecret{ID: sec.ID, Created: redisscript.MicrosTime(sec.CreatedUS), Sealed: sec.Sealed}
			if sec.ExpiresUS > 0 {
				st.Expires = redisscript.MicrosTime(sec.ExpiresUS)
			}
			set.Secrets = append(set.Secrets, st)
		}
		job.Signing = &set
	}
	return job, true
}

// signingWire is set as a hand-off carries it (wire.Signing).
func signingWire(set SecretSet) *wire.Signing {
	out := &wire.Signing{NowUS: set.Now.UnixMicro(), Unsigned: set.Unsigned}
	for _, sec := range set.Secrets {
		ws := wire.SigningSecret{ID: sec.ID, CreatedUS: sec.Created.UnixMicro(), Sealed: sec.Sealed}
		if !sec.Expires.IsZero() {
			ws.ExpiresUS = sec.Expires.UnixMicro()
		}
		out.Secrets = append(out.Secrets, ws)
	}
	return out
}

// Confirm reports whether job id is running at gen on the Redis this Store
// talks to: the fence a worker puts before sending a pre-claimed job (the
// pass claimed it, PreClaimed) while its own calls to Redis have been
// failing. After a failover the new master may lack the pass that claimed
// the job — it is queued or released there again, and another worker may
// get it — and a worker whose connection still fails would not record the
// attempt either; sending it then could repeat it. One HMGET, no script.
func (s *Store) Confirm(ctx context.Context, id string, gen int64) (bool, error) {
	key, err := s.keys.job(id)
	if err != nil {
		return false, fmt.Errorf("confirm job %q: %w", id, err)
	}
	v, err := s.rdb.HMGet(ctx, key, "state", "gen").Result()
	if err != nil {
		return false, fmt.Errorf("confirm job %q: %w", id, err)
	}
	state, _ := v[0].(string)
	g, _ := v[1].(string)
	return state == string(StateRunning) && g == strconv.FormatInt(gen, 10), nil
}
