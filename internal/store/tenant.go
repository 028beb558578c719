package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/redisscript"
	"github.com/sluicehq/sluice/internal/wire"
)

// TenantState is a snapshot of one tenant, as its next decision would see it.
//
// Tenant hash t:<tenant> fields (docs/design.md §3), all integers, µs for times,
// all but rs and ra stored packed in the hash's field s: their values in lib.lua T_FIELDS' order,
// each a little-endian IEEE 754 double (exact: every value is an integer
// below 2⁵³; lib.lua load_tenant). A field stored under its own
// name (as before s existed) is read over s and folded into it at the next
// save, so a tenant written field by field is migrated on its first change:
//
//	tat, tat_t, tat_b   GCRA TAT of the plan (release slots) and the T and b it was computed with
//	slast, sslot, stat  the send schedule (claim.lua): when the last job was claimed,
//	                    its planned slot, and a GCRA TAT over claim instants
//	atok, ats           admission tokens, and the time of the last whole-token refill
//	live, bytes         jobs counting toward the backlog (scheduled, queued,
//	                    released, retrying) and their body bytes
//	qtok                tokens (sum of costs) of the queued jobs
//	running, released   jobs in those states
//	rtok                tokens of the released jobs (the release cap counts them)
//	hseq                head-lane sequence: the score of the last job put in the head lane
//	hlen                jobs in the head lane (spares reading an empty lane)
//	paused_until        upstream pause (throttled outcomes): no slot before it
//	admin_paused        1: paused by an operator until Resume (out of ready)
//	admin_until         timed operator pause: no slot before it
//	disabled            1: an upstream answered 410; out of ready until Resume
//	vt                  weighted virtual time (Pass: fairness under overload)
//	lead                D of the last pass that released a job of the tenant:
//	                    the release cap ⌈D/T⌉ + b every script's reschedule applies
//	rf                  adaptive rate factor f, ppm of the policy rate; 0 (absent)
//	                    = RateFactorFull. Every GCRA computation (slots, TAT, the
//	                    release cap, eta) uses T_eff = ⌈T·10⁶ / f⌉ for T; tat_t
//	                    holds the T_eff the TAT was computed with
//	cut_until           end of the current adaptive episode: congestion signals
//	                    from attempts slotted before it do not cut f again, and
//	                    their successes do not recover it (see Store.Finish).
//	                    rf and cut_until expire with the hash: an idle tenant
//	                    starts again at its full rate
//	rs                  what the last reschedule decided the ready score on
//	                    (lib.lua sched_sig: the values packed, a string; "held":
//	                    held out by the release cap): a claim or finish that
//	                    leaves it equal keeps the score. Stored beside s, as
//	                    its own field (not packed)
//	ra                  (an earlier release's) the ring of the tenant's last
//	                    attempts, now the key t:<tenant>:ra (lua/recent.lua);
//	                    read by RecentAttempts while that key is absent,
//	                    deleted by the tenant's next save
//	c1                  1: every job of the tenant costs 1 (set by an enqueue
//	                    into a tenant holding no job, cleared by a costlier
//	                    enqueue or replay), so its next job's cost needs no read
//	dz                  1: the tenant's dead set is known empty (a trim found it
//	                    so; to_dead clears it), so a finish's trim needs no read
//	in_m, in_c, in_p    inflow: the minute (since the epoch, Redis time) of the
//	                    last admission, the tokens admitted in it and in the
//	                    minute before (enqueue.lua; see InflowPerSecond);
//	                    they go with the hash when an idle tenant expires
//	uq, useq            jobs queued in the tenant's upstream lanes (lua/lanes.lua;
//	                    counted in qtok too), and the lanes' enqueue sequence
//	q_unit, q_rem,      the quota the tenant's upstream last reported (pacing:
//	q_lim, q_reset,     headers; lua/lib.lua "Pacing by quota headers"): unit (0
//	q_fly, q_next       none, 1 requests, 2 tokens), remaining, limit, reset µs,
//	                    the units sent since (in flight), the next paced slot
//	qh                  the header the quota was read from; stored beside s
//	cu                  the latest due of the tenant's jobs deferred by a
//	                    destination's circuit (finish.lua defer; stored beside
//	                    s, deleted by circuit_wake.lua with the last open
//	                    destination): after now, the pass reads the next job's
//	                    destination (pass.lua X.hold)
//	fw                  the weight the tenant adds to its shard's held weight
//	                    (<p>:{sN}:fair field w; fairshare.go): its policy
//	                    weight while running + released > 0, else 0
//
// Counters by job state: scheduled, queued, released and retrying jobs count
// in live and bytes; queued ones in qtok; released ones in released and rtok;
// running ones in running only.
type TenantState struct {
	Tenant       string    // the tenant's id
	Now          time.Time // the script's now
	Exists       bool      // the tenant hash exists
	Backlog      int64     // jobs counting toward max_backlog
	Bytes        int64     // their body bytes
	Queued       int64     // jobs in the backlog list, head lane and upstream lanes
	QueuedCost   int64     // their tokens
	Running      int64
	Released     int64
	ReleasedCost int64     // tokens of the released jobs
	AdmitTokens  int64     // admission tokens available now
	NextAt       time.Time // score in the shard's ready set: next eligible time; zero when not in it
	TAT          time.Time // GCRA TAT; zero before the first release
	PausedUntil  time.Time // zero when not paused
	AdminPaused  bool      // paused by an operator until Resume
	AdminUntil   time.Time // a timed operator pause's end; zero when none
	Disabled     bool
	VT           int64  // weighted virtual time (Pass)
	DeadLetters  int64  // entries in the tenant's dead set
	Version      int64  // the tenant's policy overrides version (0: none)
	Policy       Params // the effective policy, as the scripts merged it
	// RateFactor is the adaptive rate factor f in parts per million of the
	// policy rate, 1 … RateFactorFull; RateFactorFull for a tenant that is
	// not adaptive or not cut (docs/design.md §4.2).
	RateFactor int64
	// IntervalUS is the effective emission interval T_eff = ⌈T·10⁶ / f⌉ in
	// µs per token, the interval every slot is spaced by now; Policy.RateUS
	// at the full factor.
	IntervalUS int64
	// CutUntil ends the current adaptive episode (see Store.Finish); zero
	// when none has been.
	CutUntil time.Time
	// OldestQueuedAt is the created time of the older of the tenant's next
	// jobs (the head lane's first, the backlog's first); zero when none is
	// queued. See Forecast.
	OldestQueuedAt time.Time
	// Quota is the last quota the tenant's upstream reported (pacing:
	// headers, Store.Finish); nil when none was, or pacing is off.
	Quota *Quota
	// PacedIntervalUS is the pace by Quota now, in µs per unit of it
	// (lua/lib.lua pace): 0 when not pacing (no quota, reset past, pacing
	// off). The pace binds only when it is slower than the rate.
	PacedIntervalUS int64
	inflow          inflow // admissions by minute (see InflowPerSecond)
}

// PaceMargin is the safety margin of pacing by quota headers: what is left
// of a reported quota is spread over the time to its reset as if it were
// (1 − PaceMargin) of it (lua/lib.lua PACE.MARGIN).
const PaceMargin = 0.05

// Quota is a quota an upstream reported, as the store keeps it for a
// tenant (tenant fields q_*, lua/lib.lua "Pacing by quota headers"): the
// same as an upstream's (quota.UpstreamQuota), InFlight being what the
// tenant sent since the report (and had in flight at it).
type Quota = quota.UpstreamQuota

// PacedRate is the tenant's rate under pacing now, in the quota's units
// per second (requests, or tokens), and whether pacing binds: false when
// not pacing or when the pace is faster than the tenant's effective rate
// (for a requests quota, compared as if every job cost 1).
func (st TenantState) PacedRate() (float64, bool) {
	if st.PacedIntervalUS <= 0 || st.PacedIntervalUS <= st.IntervalUS {
		return 0, false
	}
	return 1e6 / float64(st.PacedIntervalUS), true
}

// EffectiveRate is the tenant's dispatch rate now in tokens per second,
// 10⁶ / IntervalUS: the policy rate times RateFactor / RateFactorFull (up
// to the rounding of T_eff to whole µs). 0 for a zero TenantState.
func (st TenantState) EffectiveRate() float64 {
	if st.IntervalUS <= 0 {
		return 0
	}
	return 1e6 / float64(st.IntervalUS)
}

// TenantState reads tenant's state in one read-only script.
func (s *Store) TenantState(ctx context.Context, tenant string) (TenantState, error) {
	if err := checkTenant(tenant); err != nil {
		return TenantState{}, fmt.Errorf("tenant state of %q: %w", tenant, err)
	}
	d, err := s.run(ctx, scriptTenantState, s.keys.shardOf(tenant), tenant)
	if err != nil {
		return TenantState{}, fmt.Errorf("tenant state of %q: %w", tenant, err)
	}
	st, err := parseTenantState(tenant, d)
	if err != nil {
		return TenantState{}, fmt.Errorf("tenant state of %q: %w", tenant, err)
	}
	return st, nil
}

// parseTenantState decodes a tenant view (lua/tenants.lua tenant_view: the
// reply of tenant_state.lua, an item of tenant_list.lua's).
func parseTenantState(tenant string, d decoder) (TenantState, error) {
	st := TenantState{
		Tenant: tenant, Now: redisscript.MicrosTime(d.int(1)), Exists: d.int(2) == 1,
		Backlog: d.int(3), Bytes: d.int(4), Queued: d.int(5), QueuedCost: d.int(6),
		Running: d.int(7), Released: d.int(8), AdmitTokens: d.int(9),
		TAT: redisscript.MicrosTime(d.int(11)), PausedUntil: redisscript.MicrosTime(d.int(12)),
		AdminPaused: d.int(13) == 1, Disabled: d.int(14) == 1, Version: d.int(15),
	}
	st.ReleasedCost, st.AdminUntil, st.VT, st.DeadLetters = d.int(17), redisscript.MicrosTime(d.int(18)), d.int(19), d.int(20)
	st.RateFactor, st.IntervalUS, st.CutUntil = d.int(21), d.int(22), redisscript.MicrosTime(d.int(23))
	if score := d.int(10); score >= 0 {
		st.NextAt = redisscript.MicrosTime(score)
	}
	if oldest := d.int(24); oldest >= 0 {
		st.OldestQueuedAt = redisscript.MicrosTime(oldest)
	}
	st.inflow = inflow{minute: d.int(25), current: d.int(26), previous: d.int(27)}
	if unit := d.int(28); unit > 0 {
		st.Quota = &Quota{Unit: wire.QuotaRequests, Remaining: d.int(29), Limit: d.int(30),
			ResetAt: redisscript.MicrosTime(d.int(31)), Source: d.str(32), InFlight: d.int(34)}
		if unit == 2 {
			st.Quota.Unit = wire.QuotaTokens
		}
	}
	st.PacedIntervalUS = d.int(33)
	policy := d.str(16)
	if err := d.Err(); err != nil {
		return TenantState{}, err
	}
	if err := json.Unmarshal([]byte(policy), &st.Policy); err != nil {
		return TenantState{}, fmt.Errorf("%w: policy %q: %w", ErrProtocol, policy, err)
	}
	if st.Policy.ResultHeaders == nil { // no layer sets it (the scripts' BUILTIN holds integers only)
		st.Policy.ResultHeaders = DefaultParams().ResultHeaders
	}
	return st, nil
}
