package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/redisscript"
	"github.com/sluicehq/sluice/internal/wire"
)

// WithDefaults returns c with every zero duration and count set to its
// default (Capacity is kept: 0 is meaningful).
func (c PassConfig) WithDefaults() PassConfig {
	c.Lead = cmp.Or(c.Lead, LeadDefault)
	c.MinLead = cmp.Or(c.MinLead, MinLeadDefault)
	c.Grace = cmp.Or(c.Grace, GraceDefault)
	c.MaxPromotions = cmp.Or(c.MaxPromotions, MaxPromotionsDefault)
	c.MaxTenants = cmp.Or(c.MaxTenants, MaxTenantsDefault)
	c.DeadRetention = cmp.Or(c.DeadRetention, DeadRetentionDefault)
	c.DeadMaxPerTenant = cmp.Or(c.DeadMaxPerTenant, DeadMaxPerTenantDefault)
	c.AttemptLog = cmp.Or(c.AttemptLog, AttemptLogDefault)
	c.ClaimSpacing = cmp.Or(c.ClaimSpacing, ClaimSpacingDefault)
	return c
}

// ClaimSpacingDefault is PassConfig.ClaimSpacing when zero: about one claim
// script's Redis time, so the claim tolerance ε (6 ms by default) fits several claims.
const ClaimSpacingDefault = 250 * time.Microsecond

func (c PassConfig) validate() error {
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"lead", c.Lead}, {"grace", c.Grace}, {"dead retention", c.DeadRetention}} {
		if d.v < time.Microsecond || d.v > MaxDurationUS*time.Microsecond {
			errs = append(errs, invalidf("%s %s: want 1µs … %s", d.name, d.v, MaxDurationUS*time.Microsecond))
		}
	}
	if !(c.FairShare >= 0 && c.FairShare <= MaxFairShare) {
		errs = append(errs, invalidf("fair share %g: want 0 … %g", c.FairShare, float64(MaxFairShare)))
	}
	if c.MinLead > c.Lead {
		errs = append(errs, invalidf("min lead %s: want at most lead (%s)", c.MinLead, c.Lead))
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"max promotions", c.MaxPromotions}, {"max tenants", c.MaxTenants},
		{"dead letters per tenant", c.DeadMaxPerTenant}, {"attempt log", c.AttemptLog}} {
		if n.v < 1 || n.v > 1_000_000 {
			errs = append(errs, invalidf("%s %d: want 1 … 1000000", n.name, n.v))
		}
	}
	return errors.Join(errs...)
}

// Pass runs one dispatcher pass over shard in one script (docs/design.md §2.2):
//
//  1. promotes up to P delayed jobs due by now + D, by due time: scheduled
//     → the backlog's tail, retrying → the head lane (in head-sequence
//     order); one not yet due is promoted only when its tenant has no job
//     queued, and then keeps its due time as the earliest slot it may be
//     released at (it leaves at its run_at); else it waits for its due time;
//  2. sweeps up to P expired leases: a released job past its send time
//     (SendAt) + grace goes
//     back to the head lane with gen + 1 and no attempt used (the hand-off to
//     asynq failed or the task was lost); a running job past claim + timeout
//     + grace gets gen + 1, its attempt logged as lease_expired, and is
//     retried after the backoff, or is dead when no attempt is left;
//  3. releases jobs of the tenants whose ready score is ≤ now + D (up to K,
//     lowest score first) and of those touched by 1–2: per job, head lane
//     first (canceled tombstones dropped), while the tenant is not disabled
//     or paused past now + D, its earliest GCRA slot is ≤ now + D, its
//     released tokens stay within the release cap ⌈r·D⌉ + b, running +
//     released < concurrency, and the pass's Capacity lasts. A released job
//     gets slot = max(earliest slot, end of pause) (a slot ≥ now + L spaced
//     by ClaimSpacing from the others of the pass), TAT ← max(TAT, slot) +
//     cost·T, gen + 1, state released, SendAt (the slot plus the lateness
//     of the tenant's send schedule) and a lease until SendAt + grace;
//  4. with cfg.Preclaim > 0, claims the webhook and http jobs it released
//     whose send target is within Preclaim of now (not a task job, a body
//     over 16 KiB, a tenant disabled, paused or at its concurrency, a job
//     pre-claimed once and lost), as Claim at now right after the pass
//     would: such a release is running and carries the claim (Claimed,
//     SendAt its send instant);
//  5. reschedules every tenant it touched.
//
// The sweep (2.) returns a pre-claimed job whose lease (send + timeout +
// grace) expired as a lost release: gen + 1, the head lane, the attempt the
// pre-claim counted given back; its later releases are claimed by workers.
//
// Upstreams (issue #15; PassGranted, lua/lanes.lua): a tenant holding jobs
// that name upstreams releases the oldest eligible of its plain next job
// and its lanes' heads; a lane head also needs room in the shard's segment
// of each upstream it names at its slot (the latest of the tenant's and the
// upstreams' earliest), where all are charged. Heads waiting for room are
// reported as PassResult.Demand. A head naming several upstreams uses its
// set's aligned reservation first (segments of every upstream from one
// common start, AlignUpstreams), else the shard's segments when they give a
// common instant; when neither does it is reported as PassResult.Aligned.
//
// Fairness under overload (start-time fair queueing). Capacity goes one job
// at a time to the visited tenant with the smallest weighted virtual time vt
// (tenant field vt; each released job adds ⌊cost·VT_SCALE/weight⌋, with
// pass.lua's VT_SCALE = 10⁶). A tenant entering a pass starts no lower than
// the shard's virtual clock (key vclock: the largest vt a release started
// from), so idle or rate-limited time banks no credit and a newcomer starts
// level with the busiest tenant.
// Starvation bound: for two tenants i and j visited and backlogged over a
// run of passes, the released tokens S satisfy |Sᵢ/wᵢ − Sⱼ/wⱼ| ≤ cᵢ/wᵢ +
// cⱼ/wⱼ (c: the largest job cost), so between two releases of i each other
// visited tenant j releases at most ⌈wⱼ·cᵢ/(wᵢ·cⱼ)⌉ + 1 jobs, and i waits at
// most Σⱼ (⌈wⱼ/wᵢ⌉ + 1) releases (unit costs). A pass visits at most K
// tenants, the oldest ready scores first; serving a tenant moves its score
// to ≥ now, behind every tenant waiting with a score < now, so with E > K
// eligible tenants a waiting one is visited after at most E − K services of
// the tenants ahead of it. Without overload every due job goes; the order
// only decides which goes first.
//
// Released jobs are returned in slot order (ties by id). Errors: ErrInvalid
// for a bad shard or config; Redis errors wrapped.
func (s *Store) Pass(ctx context.Context, shard int, cfg PassConfig) (PassResult, error) {
	return s.PassGranted(ctx, shard, cfg, nil)
}

// PassGranted is Pass with the upstream grants for shard (GrantUpstreams)
// that the pass installs before it releases: their segments join the
// shard's upstream states and the tenants waiting on those upstreams are
// visited (lua/pass.lua 3b).
func (s *Store) PassGranted(ctx context.Context, shard int, cfg PassConfig, grants []quota.UpstreamGrant) (PassResult, error) {
	cfg = cfg.WithDefaults()
	err := cfg.validate()
	if shard < 0 || shard >= s.keys.shards {
		err = errors.Join(err, invalidf("shard %d: want 0 … %d", shard, s.keys.shards-1))
	}
	for _, g := range grants {
		err = errors.Join(err, quota.CheckName(g.Upstream))
	}
	if err != nil {
		return PassResult{}, fmt.Errorf("pass on shard %d: %w", shard, err)
	}
	if s.planGo && len(grants) == 0 {
		res, ok, err := s.planPass(ctx, shard, cfg)
		switch {
		case err != nil:
			return PassResult{}, err
		case ok && res.skipped:
			// A tenant moved between the plan's read and its apply (a
			// claim, finish, enqueue or cancel): pass.lua, atomic, goes on
			// with the capacity left, so a tenant that moves all the time
			// is not passed over.
			return s.passAfterPlan(ctx, shard, cfg, res)
		case ok:
			return res, nil
		}
	}
	return s.passScript(ctx, shard, cfg, grants)
}

// passAfterPlan runs pass.lua after a planned pass that skipped a tenant,
// with the capacity the plan left, and returns both passes' releases.
func (s *Store) passAfterPlan(ctx context.Context, shard int, cfg PassConfig, planned PassResult) (PassResult, error) {
	if cfg.Capacity > 0 {
		cfg.Capacity -= len(planned.Released)
		if cfg.Capacity <= 0 {
			planned.CapacityReached, planned.NextWake = true, planned.Now
			return planned, nil
		}
	}
	res, err := s.passScript(ctx, shard, cfg, nil)
	if err != nil {
		return PassResult{}, err
	}
	res.Released, res.Planned = append(planned.Released, res.Released...), true
	sortReleases(res.Released)
	return res, nil
}

// sortReleases orders a pass's releases as PassResult.Released promises:
// by slot, then id.
func sortReleases(rs []wire.Release) {
	slices.SortStableFunc(rs, func(a, b wire.Release) int {
		return cmp.Or(a.Slot.Compare(b.Slot), cmp.Compare(a.ID, b.ID))
	})
}

// passScript is PassGranted by pass.lua.
func (s *Store) passScript(ctx context.Context, shard int, cfg PassConfig, grants []quota.UpstreamGrant) (PassResult, error) {
	capacity := max(cfg.Capacity, -1)
	args := append([]any{cfg.Lead.Microseconds(), max(cfg.MinLead, 0).Microseconds(), cfg.Grace.Microseconds(),
		cfg.MaxPromotions, cfg.MaxTenants, capacity, s.seedArg(),
		cfg.DeadRetention.Microseconds(), cfg.DeadMaxPerTenant, cfg.AttemptLog,
		max(cfg.ClaimSpacing, 0).Microseconds()}, grantArgs(grants)...)
	args = append(args, fairArg(cfg.FairShare), preclaimArg(cfg.Preclaim))
	d, err := s.run(ctx, scriptPass, shard, args...)
	if err != nil {
		return PassResult{}, fmt.Errorf("pass on shard %d: %w", shard, err)
	}
	res := PassResult{
		Now: redisscript.MicrosTime(d.int(1)), More: d.int(2) == 1, CapacityReached: d.int(3) == 1,
		NextWake: redisscript.MicrosTime(d.int(4)), Promoted: int(d.int(5)), Swept: int(d.int(6)),
		Tenants: int(d.int(7)),
	}
	res.Demand = decodeDemand(d.list(8))
	res.Aligned = decodeAligned(d.list(9))
	const head = 10
	if n := d.Len() - head; n > 0 {
		res.Released = make([]wire.Release, n)
	}
	for i := range res.Released {
		r := d.list(head + i)
		res.Released[i] = wire.Release{
			ID: r.str(0), Tenant: r.str(1), Type: r.str(2), Cost: r.int(3), Gen: r.int(4),
			Slot: redisscript.MicrosTime(r.int(5)), Timeout: redisscript.Micros(r.int(6)), Queue: r.str(7), TaskType: r.str(8),
			SendAt: redisscript.MicrosTime(r.int(9)),
		}
		if r.Len() > 10 {
			res.Released[i].Claimed = decodePreclaimed(r, res.Released[i])
		}
	}
	if err := d.Err(); err != nil {
		return PassResult{}, fmt.Errorf("pass on shard %d: %w", shard, err)
	}
	sortReleases(res.Released)
	return res, nil
}

// preclaimArg is pass.lua's ε of the pre-claim: -1 (none) for a
// tolerance ≤ 0.
func preclaimArg(tolerance time.Duration) int64 {
	if tolerance <= 0 {
		return -1
	}
	return tolerance.Microseconds()
}

// decodePreclaimed reads a pre-claimed release's claim from its row d
// (pass.lua 3e: after the release's 10 values, attempt, body, created µs,
// upstreams, then the signing state's values, none for a job that is not
// a webhook) into the wire form the hand-off carries, with the release's
// own fields.
func decodePreclaimed(d decoder, r wire.Release) *wire.Claimed {
	c := &wire.Claimed{Tenant: r.Tenant, Type: r.Type, Attempt: d.int(10), Body: d.str(11),
		TimeoutUS: r.Timeout.Microseconds(), SlotUS: r.Slot.UnixMicro(), CreatedUS: d.int(12), Cost: r.Cost,
		Upstreams: splitUpstreams(d.str(13))}
	if d.Len() > 14 {
		c.Signing = signingWire(decodeSecretSet(d, 14))
	}
	return c
}

// seedArg is a fresh jitter seed for one script call.
func (s *Store) seedArg() string { return strconv.FormatUint(s.seed(), 10) }
