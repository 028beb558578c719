package store

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/redisscript"
)

// inflow is a tenant's admission counters (tenant fields in_m, in_c, in_p).
type inflow struct{ minute, current, previous int64 }

const minuteUS = int64(time.Minute / time.Microsecond)

// InflowPerSecond is the tenant's admissions over the last minute, in tokens
// (jobs, when they cost 1) per second, as a sliding window over two
// one-minute buckets: the current minute's count plus the previous
// minute's weighted by the part of it still inside the window, over 60 s.
// The counters live in the tenant hash, so admissions before an idle
// tenant's hash expired (about a second after its last job ended and its
// admission bucket refilled) are not counted: a lower bound for a tenant
// whose jobs come apart in time, exact for one that stays busy.
func (st TenantState) InflowPerSecond() float64 {
	nowUS := st.Now.UnixMicro()
	m := nowUS / minuteUS
	rest := 1 - float64(nowUS-m*minuteUS)/float64(minuteUS) // of the previous minute still in the window
	var tokens float64
	switch st.inflow.minute {
	case m:
		tokens = float64(st.inflow.current) + float64(st.inflow.previous)*rest
	case m - 1:
		tokens = float64(st.inflow.current) * rest
	}
	return tokens / 60
}

// Paused reports whether the tenant cannot send now for a pause: an
// operator's (indefinite or timed) or an upstream's.
func (st TenantState) Paused() bool {
	return pausedAt(st.Now, st.AdminPaused, st.AdminUntil, st.PausedUntil)
}

// pausedAt is Paused of TenantState and TenantSummary: an operator's pause
// (indefinite, or timed and not over at now) or an upstream's not over.
func pausedAt(now time.Time, adminPaused bool, adminUntil, pausedUntil time.Time) bool {
	return adminPaused || adminUntil.After(now) || pausedUntil.After(now)
}

// waitedSince is how long the job queued at oldest has waited at now; 0
// when none is queued (oldest zero) or oldest is not before now.
func waitedSince(now, oldest time.Time) time.Duration {
	if oldest.IsZero() || !now.After(oldest) {
		return 0
	}
	return now.Sub(oldest)
}

// Forecast is a tenant's drain forecast at TenantState.Now.
type Forecast struct {
	// OldestJobAge is how long the oldest queued job (see
	// TenantState.OldestQueuedAt) has waited; 0 when none is queued.
	OldestJobAge time.Duration
	// DrainETA is how long the backlog takes to leave at the effective
	// rate, counting the pauses (see TenantState.Forecast); valid only when
	// DrainKnown.
	DrainETA time.Duration
	// DrainKnown is false when the tenant is disabled or paused without an
	// end: its backlog does not drain until an operator acts.
	DrainKnown bool
	// InflowPerSecond is TenantState.InflowPerSecond.
	InflowPerSecond float64
	// Draining is false when the tenant is paused or disabled, or when its
	// inflow is at least its effective rate; true otherwise.
	Draining bool
}

// Forecast is the tenant's drain forecast. The backlog left to send is the
// queued tokens plus one token per scheduled or retrying job (taken as
// due); released jobs already hold slots, which the GCRA TAT accounts for.
// Sending n tokens of burst b at the effective interval T, after the
// pauses' end P, the last one leaves at max(now, P, max(TAT, P, now) +
// (n − b)·T): GCRA's slot for the n-th token of a continuous backlog. The
// concurrency cap and scheduled jobs' run_at are not counted: the ETA is a
// lower bound when they bind.
func (st TenantState) Forecast() Forecast {
	f := Forecast{InflowPerSecond: st.InflowPerSecond(), OldestJobAge: waitedSince(st.Now, st.OldestQueuedAt)}
	f.Draining = !st.Disabled && !st.Paused() && f.InflowPerSecond < st.EffectiveRate()
	if st.Disabled || st.AdminPaused {
		return f
	}
	f.DrainKnown = true
	n := st.QueuedCost + max(0, st.Backlog-st.Queued-st.Released)
	if n == 0 || st.IntervalUS <= 0 {
		return f
	}
	now := st.Now.UnixMicro()
	gate := max(st.PausedUntil.UnixMicro(), st.AdminUntil.UnixMicro(), now)
	base := max(st.TAT.UnixMicro(), gate)
	last := max(gate, base+mulSat(n-st.Policy.Burst, st.IntervalUS))
	f.DrainETA = microsSat(last - now)
	return f
}

// maxDurationUS is the longest time.Duration in whole µs (about 292 years).
const maxDurationUS = math.MaxInt64 / int64(time.Microsecond)

// mulSat is a·b for b ≥ 1, at most maxDurationUS (a ≤ 0: a·b as is): a
// backlog of 10⁹ jobs at 1/d would overflow int64 µs.
func mulSat(a, b int64) int64 {
	if a > 0 && a > maxDurationUS/b {
		return maxDurationUS
	}
	return a * b
}

// microsSat is us µs as a Duration, at most the longest Duration (a
// backlog_full wait at 1/d may be thousands of years in µs: enqueue.lua
// drain_wait).
func microsSat(us int64) time.Duration {
	return time.Duration(min(us, maxDurationUS)) * time.Microsecond
}

// TenantSummary is what Store.Tenants reads of each tenant: enough to sort
// and filter tenants (TenantState reads one in full).
type TenantSummary struct {
	Tenant         string
	Now            time.Time // the script's now
	Exists         bool      // the tenant hash exists (else: dead letters or a policy only)
	Backlog        int64     // as TenantState.Backlog
	Running        int64
	OldestQueuedAt time.Time // as TenantState.OldestQueuedAt
	AdminPaused    bool
	AdminUntil     time.Time
	PausedUntil    time.Time
	Disabled       bool
	DeadLetters    int64
}

// Paused is TenantState.Paused.
func (s TenantSummary) Paused() bool {
	return pausedAt(s.Now, s.AdminPaused, s.AdminUntil, s.PausedUntil)
}

// OldestJobAge is how long the oldest queued job has waited; 0 when none.
func (s TenantSummary) OldestJobAge() time.Duration { return waitedSince(s.Now, s.OldestQueuedAt) }

// tenantListStep is the COUNT hint of one tenant_list.lua call.
const tenantListStep = 250

// Tenants returns a summary of every tenant with state in Redis — a tenant
// hash, dead letters or policy overrides — walking each shard's tenant index
// (lua/tenants.lua) one Cluster slot at a time, one script per ~250
// tenants; in no particular order, each tenant once. A tenant created or
// gone during the walk may be in or out. Its cost grows with the tenants:
// about four Redis commands each (measured: go test ./internal/store -run x
// -bench BenchmarkTenants), so callers bound how often they call it.
func (s *Store) Tenants(ctx context.Context) ([]TenantSummary, error) {
	seen := map[string]bool{}
	var out []TenantSummary
	err := s.walkIndex(ctx, scriptTenantList, []any{tenantListStep}, func(d decoder) {
		now := redisscript.MicrosTime(d.int(1))
		for i := 3; i < d.Len(); i++ {
			if sum := parseSummary(now, d.list(i)); !seen[sum.Tenant] {
				seen[sum.Tenant] = true
				out = append(out, sum)
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	return out, nil
}

// walkIndex walks every shard's tenant index with sc, a ZSCAN step script
// (ARGV[3] the cursor, then args; reply {'ok', now, next cursor, …}),
// calling each with every step's reply.
func (s *Store) walkIndex(ctx context.Context, sc *script, args []any, each func(decoder)) error {
	for shard := range s.keys.shards {
		for cursor := "0"; ; {
			d, err := s.run(ctx, sc, shard, append([]any{cursor}, args...)...)
			if err != nil {
				return fmt.Errorf("shard %d: %w", shard, err)
			}
			cursor = d.str(2)
			each(d)
			if err := d.Err(); err != nil {
				return fmt.Errorf("shard %d: %w", shard, err)
			}
			if cursor == "0" {
				break
			}
		}
	}
	return nil
}

// parseSummary decodes one tenant of tenant_list.lua's reply.
func parseSummary(now time.Time, d decoder) TenantSummary {
	sum := TenantSummary{Tenant: d.str(0), Now: now, Exists: d.int(1) == 1, Backlog: d.int(2),
		Running: d.int(3), AdminPaused: d.int(5) == 1, AdminUntil: redisscript.MicrosTime(d.int(6)),
		PausedUntil: redisscript.MicrosTime(d.int(7)), Disabled: d.int(8) == 1, DeadLetters: d.int(9)}
	if oldest := d.int(4); oldest >= 0 {
		sum.OldestQueuedAt = redisscript.MicrosTime(oldest)
	}
	return sum
}

// Bounds of ReplayDead.
const (
	MaxReplayDead = 1000 // most letters replayed by one call
	// replayScanFactor bounds the letters one call examines: this many
	// times its limit (letters of another reason are skipped, not replayed).
	replayScanFactor = 4
)

// DeadReplay selects the dead letters ReplayDead replays.
type DeadReplay struct {
	// Reason, when not "", selects the letters of that reason: the record's
	// reason when it has one, else its last attempt's outcome ("permanent",
	// "retry" — attempts used up —, "gone", "unknown_upstream",
	// "lease_expired"). 1–32
	// characters of [a-z_].
	Reason string
	// Before, when not zero, selects the letters that died at or before it;
	// zero: before the walk's first call. A cursor carries the first call's.
	Before time.Time
	// Limit is the most letters replayed by the call, 1 … MaxReplayDead.
	Limit int
	// Cursor continues a walk: "" starts one; else the cursor a call returned.
	Cursor string
}

var reasonPattern = regexp.MustCompile(`^[a-z_]{1,32}$`)

// ReplayDead replays up to r.Limit of tenant's dead letters selected by r,
// oldest death first, each as Replay does, in one script. It returns how
// many it replayed and the cursor to continue with ("" when the walk is
// done). A walk — the calls from "" along the returned cursors — examines
// each letter that died before its first call (or r.Before) at most once,
// so no letter is replayed twice by it, even one that dies again. Bad
// input wraps ErrInvalid and changes nothing.
func (s *Store) ReplayDead(ctx context.Context, tenant string, r DeadReplay) (replayed int, cursor string, err error) {
	cutoff, score, after, err := r.parse()
	if err == nil {
		err = checkTenant(tenant)
	}
	if err != nil {
		return 0, "", fmt.Errorf("replay dead letters of tenant %q: %w", tenant, err)
	}
	scan := r.Limit * replayScanFactor
	d, err := s.run(ctx, scriptDeadReplay, s.keys.shardOf(tenant), tenant, r.Limit, cutoff, score, after, r.Reason, scan)
	if err != nil {
		return 0, "", fmt.Errorf("replay dead letters of tenant %q: %w", tenant, err)
	}
	n, cutoff, next, nextID := d.int(1), d.int(2), d.int(3), d.str(4)
	if err := d.Err(); err != nil {
		return 0, "", fmt.Errorf("replay dead letters of tenant %q: %w", tenant, err)
	}
	if next >= 0 {
		cursor = strconv.FormatInt(cutoff, 10) + ":" + strconv.FormatInt(next, 10) + ":" + nextID
	}
	return int(n), cursor, nil
}

// parse checks r and returns the script's cutoff (-1: now), cursor score
// (-1: from the start) and cursor id.
func (r DeadReplay) parse() (cutoff, score int64, after string, err error) {
	var errs []string
	if r.Limit < 1 || r.Limit > MaxReplayDead {
		errs = append(errs, fmt.Sprintf("limit %d: want 1 … %d", r.Limit, MaxReplayDead))
	}
	if r.Reason != "" && !reasonPattern.MatchString(r.Reason) {
		errs = append(errs, fmt.Sprintf("reason %q: want 1–32 characters of [a-z_]", r.Reason))
	}
	cutoff, score = -1, -1
	if !r.Before.IsZero() {
		cutoff = r.Before.UnixMicro()
		if cutoff <= 0 || cutoff > maxTimeUS {
			errs = append(errs, fmt.Sprintf("before %s: want 1970 … 2112", r.Before))
		}
	}
	if r.Cursor != "" {
		c, s, id, ok := splitReplayCursor(r.Cursor)
		if !ok {
			errs = append(errs, fmt.Sprintf("cursor %q: not one a replay returned", r.Cursor))
		}
		cutoff, score, after = c, s, id
	}
	if len(errs) > 0 {
		return 0, 0, "", invalidf("%s", strings.Join(errs, "; "))
	}
	return cutoff, score, after, nil
}

// splitReplayCursor parses "<cutoff µs>:<death µs>:<job id>".
func splitReplayCursor(c string) (cutoff, score int64, id string, ok bool) {
	parts := strings.SplitN(c, ":", 3)
	if len(parts) != 3 {
		return 0, 0, "", false
	}
	cutoff, err1 := strconv.ParseInt(parts[0], 10, 64)
	score, err2 := strconv.ParseInt(parts[1], 10, 64)
	_, err3 := ShardOfJobID(parts[2])
	if err1 != nil || err2 != nil || err3 != nil || cutoff < 0 || score < 0 || score > cutoff {
		return 0, 0, "", false
	}
	return cutoff, score, parts[2], true
}
