package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/tuning"
	"github.com/sluicehq/sluice/internal/wire"
)

// Defaults of FinishConfig (docs/design.md §7 `retention`, `throttle`;
// their values: internal/tuning).
const (
	SucceededRetentionDefault = tuning.SucceededRetentionDefault
	// IdempotencyRetentionDefault is retention.idempotency's default; a
	// zero FinishConfig.IdempotencyRetention keeps its meaning (as long as
	// the record).
	IdempotencyRetentionDefault = tuning.IdempotencyRetentionDefault
	DeadRetentionDefault        = tuning.DeadRetentionDefault
	DeadMaxPerTenantDefault     = tuning.DeadMaxPerTenantDefault
	AttemptLogDefault           = tuning.AttemptLogDefault
	DefaultPauseDefault         = tuning.DefaultPauseDefault
	MaxPauseDefault             = tuning.MaxPauseDefault
	AdaptiveFloorPPMDefault     = tuning.AdaptiveFloorPPMDefault // 0.05 of the policy rate
	AdaptiveStepPPMDefault      = 50_000                         // 5 % of the full rate per success
)

// RateFactorFull is the rate factor of a tenant at its full policy rate:
// rate factors are in parts per million (docs/design.md §4.2, adaptive).
const RateFactorFull = tuning.RateFactorFull

// PPM turns a fraction (config throttle.adaptive_floor) into parts per
// million, rounded to the nearest and clamped to 1 … RateFactorFull
// (tuning.PPM).
func PPM(fraction float64) int64 { return tuning.PPM(fraction) }

// ErrStale: a Finish whose gen is not the job's current running generation
// (the lease was swept, the job was finished already, or canceled). The
// attempt is appended to the log, marked stale, and nothing else changes.
var ErrStale = errors.New("stale generation")

// FinishConfig is the retention and throttling configuration Finish applies.
// Zero fields take the defaults above (WithDefaults).
type FinishConfig struct {
	// SucceededRetention is how long a succeeded job's record is kept.
	// Default SucceededRetentionDefault.
	SucceededRetention time.Duration
	// IdempotencyRetention is how long a finished job's idempotency key is
	// kept after its terminal time, so a late retry of the producer's
	// request is still answered with the original job; 0 means as long as
	// the record (the succeeded or dead retention).
	IdempotencyRetention time.Duration
	// DeadRetention is how long a dead letter is kept; trimmed by age at
	// each finish of the tenant. Default DeadRetentionDefault.
	DeadRetention time.Duration
	// DeadMaxPerTenant caps a tenant's dead set; the oldest beyond it are
	// trimmed (records deleted). Default DeadMaxPerTenantDefault.
	DeadMaxPerTenant int
	// AttemptLog is how many attempts a job's log keeps (the newest).
	// Default AttemptLogDefault.
	AttemptLog int
	// DefaultPause is the pause of a throttled outcome without a Pause
	// (a 429 without Retry-After). Default DefaultPauseDefault.
	DefaultPause time.Duration
	// MaxPause caps any upstream pause. Default MaxPauseDefault.
	MaxPause time.Duration
	// AdaptiveFloorPPM is the lowest rate factor an adaptive tenant is cut
	// to, in parts per million of its policy rate (config
	// throttle.adaptive_floor: PPM(0.05) = 50 000); 1 … RateFactorFull.
	// Default AdaptiveFloorPPMDefault.
	AdaptiveFloorPPM int64
	// AdaptiveStepPPM is the additive recovery of an adaptive tenant's rate
	// factor per success, in parts per million; 1 … RateFactorFull.
	// Default AdaptiveStepPPMDefault (full rate again after 19 successes
	// from 0.05).
	AdaptiveStepPPM int64
	// UpstreamScope (per call, not configuration) says that the throttles
	// of this call (a throttled outcome, or a pause asked with another
	// kind) are their jobs' upstreams' (pause_scope upstream, issue #15):
	// the tenant is neither paused nor cut (adaptive), and a throttled job
	// goes back to the front of its upstream lane without using an
	// attempt; the caller pauses the upstreams (PauseUpstream).
	UpstreamScope bool
}

// WithDefaults returns c with every zero field set to its default.
// Adapt is how an adaptive upstream's rate factor moves
// (quota.Registry.UpstreamOutcome): as a tenant's, c's AdaptiveFloorPPM and
// AdaptiveStepPPM with their defaults.
func (c FinishConfig) Adapt() quota.AdaptConfig {
	c = c.WithDefaults()
	return quota.AdaptConfig{FloorPPM: c.AdaptiveFloorPPM, StepPPM: c.AdaptiveStepPPM}
}

func (c FinishConfig) WithDefaults() FinishConfig {
	c.SucceededRetention = cmp.Or(c.SucceededRetention, SucceededRetentionDefault)
	c.DeadRetention = cmp.Or(c.DeadRetention, DeadRetentionDefault)
	c.DeadMaxPerTenant = cmp.Or(c.DeadMaxPerTenant, DeadMaxPerTenantDefault)
	c.AttemptLog = cmp.Or(c.AttemptLog, AttemptLogDefault)
	c.DefaultPause = cmp.Or(c.DefaultPause, DefaultPauseDefault)
	c.MaxPause = cmp.Or(c.MaxPause, MaxPauseDefault)
	c.AdaptiveFloorPPM = cmp.Or(c.AdaptiveFloorPPM, AdaptiveFloorPPMDefault)
	c.AdaptiveStepPPM = cmp.Or(c.AdaptiveStepPPM, AdaptiveStepPPMDefault)
	return c
}

func (c FinishConfig) validate() error {
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"succeeded retention", c.SucceededRetention}, {"dead retention", c.DeadRetention},
		{"default pause", c.DefaultPause}, {"max pause", c.MaxPause}} {
		if d.v < time.Millisecond || d.v > MaxDurationUS*time.Microsecond {
			errs = append(errs, invalidf("%s %s: want 1ms … %s", d.name, d.v, MaxDurationUS*time.Microsecond))
		}
	}
	if c.DeadMaxPerTenant < 1 || c.AttemptLog < 1 || c.AttemptLog > 1000 {
		errs = append(errs, invalidf("dead letters per tenant %d, attempt log %d: want ≥ 1 and 1 … 1000",
			c.DeadMaxPerTenant, c.AttemptLog))
	}
	if c.AdaptiveFloorPPM < 1 || c.AdaptiveFloorPPM > RateFactorFull || c.AdaptiveStepPPM < 1 || c.AdaptiveStepPPM > RateFactorFull {
		errs = append(errs, invalidf("adaptive floor %d ppm, step %d ppm: want 1 … %d",
			c.AdaptiveFloorPPM, c.AdaptiveStepPPM, RateFactorFull))
	}
	return errors.Join(errs...)
}

// Finish records one attempt of job id claimed at gen, in one script
// (docs/design.md §2.3 step 4, §4.2), and returns the job's state after it.
//
// It requires running(gen). Otherwise the attempt is only appended to the
// log (marked stale) and Finish returns the job's current state with an
// error wrapping ErrStale. Else the lease is removed, the concurrency slot
// freed, the attempt appended to the log (time, outcome, status, latency,
// error, the first 4 KiB of the response body: o.Excerpt; the last
// cfg.AttemptLog entries kept), o.Result (when set) replaces the record's
// result (Job.Result; its body only while Redis has room for it below
// Config.MemoryHighWater of maxmemory, else cut or dropped with
// TruncatedStorageFull — result.go), then by o.Kind:
//
//   - FinishSuccess → StateSucceeded: the body is dropped, the record and its
//     idempotency key expire after cfg.SucceededRetention.
//   - FinishRetry → StateRetrying, due at now + backoff ± 10 % jitter, the
//     Cloud Tasks curve of the tenant's policy (min_backoff doubled
//     max_doublings times, then growing linearly by min_backoff·2^max_doublings,
//     capped at max_backoff); StateDead instead when the attempts used reach
//     max_attempts or max_retry_duration has passed since the first attempt.
//   - FinishThrottled → the tenant is paused until now + min(o.Pause or
//     cfg.DefaultPause, cfg.MaxPause) (never shortened); the job returns to
//     the head lane (StateQueued) without using an attempt — StateDead when
//     max_retry_duration has passed.
//   - FinishPermanent → StateDead.
//   - FinishGone (a 410) → StateDead at once, Job.DeadReason "gone"; a
//     webhook job's tenant is disabled until Resume (its backlog kept), an
//     http or task job's only when its policy sets disable_on_gone.
//   - FinishDeferred (the job was not sent: its destination's circuit is
//     open, docs/design.md §4.5) → StateRetrying, due at now + o.Pause (> 0,
//     at most policy.MaxDuration), the attempt the claim counted taken back
//     and nothing logged, never dead; the slot's reservation is refunded
//     (TAT moves the job's cost·T earlier, never below now), so the
//     tenant's other jobs keep its rate. The tenant is not paused; o.Error
//     (the destination, at most MaxDestinationLen bytes) is recorded with
//     the due time in the tenant's open destinations (TenantCircuits).
//   - FinishLapsed (a pre-claimed job its worker dropped unsent: too late
//     to finish well inside its lease) → StateQueued at the head of its
//     lane with gen + 1, the attempt the pre-claim counted taken back,
//     nothing logged — what the sweep does when the lease ends, without
//     the wait. Only for a job pre-claimed at gen (Claimed); any other is
//     stale, and nothing is logged.
//
// An adaptive tenant (policy adaptive = 1, docs/design.md §4.2) sends at a rate
// factor f of its policy rate (TenantState.RateFactor; every slot is
// spaced by T_eff = ⌈T·10⁶ / f⌉). When o.Congested(), Finish cuts f to
// max(cfg.AdaptiveFloorPPM, ⌊f / 2⌋) once per episode: a cut starts an
// episode that covers every attempt sent or released by then (it lasts
// until TenantState.CutUntil = max(now, the pause's end, TAT) at the cut),
// and only a congestion signal from an attempt slotted at or after
// CutUntil cuts again. A FinishSuccess of such an attempt adds
// cfg.AdaptiveStepPPM, up to RateFactorFull. TAT is rescaled to the new
// interval T′ as for a rate change (TAT′ = now + max(0, TAT − now)·T′/T,
// capped at now + b·T′) but never below TAT − T + T′, so the slots already
// handed out keep T′ to the next. Other outcomes leave f as it is, and a
// tenant that is not adaptive always has the full factor.
//
// Cost correction: an o.ActualCost > 0 (the attempt's actual cost, learned
// by the worker) is recorded on the job (Job.ActualCost) and the
// difference d = ActualCost − the job's reserved cost is applied to the
// tenant's schedule, at its effective interval T: a charge (d > 0) moves
// TAT d·T later, a refund (d < 0) |d|·T earlier but never below now (a TAT
// already past stays). Applied for a current attempt only (not stale),
// before the outcome's transition. The window bound this keeps:
// doc.go, "Cost correction".
//
// An o.Pause > 0 with any other kind (a success that used up the upstream's
// quota: X-RateLimit-Remaining 0 with a reset) pauses the tenant the same
// way, pre-emptively, leaving the job's outcome as it is.
//
// A dead job is added to the tenant's dead set (kept without TTL, body
// included, for Replay); each Finish trims that set to cfg.DeadMaxPerTenant
// and cfg.DeadRetention, deleting the trimmed records. Then
// reschedule(tenant). ErrNotFound when the record is gone; ErrInvalid for a
// bad outcome or config.
func (s *Store) Finish(ctx context.Context, id string, gen int64, o wire.AttemptOutcome, cfg FinishConfig) (State, error) {
	shard, err := s.jobShard(id)
	if err != nil {
		return "", fmt.Errorf("finish job %q: %w", id, err)
	}
	rs, err := s.finish(ctx, shard, []FinishRequest{{ID: id, Gen: gen, Outcome: o}}, cfg)
	if err != nil {
		return "", fmt.Errorf("finish job %q: %w", id, err)
	}
	return rs[0].State, rs[0].Err
}

// FinishRequest is one attempt of a FinishBatch: the job, the gen it was
// claimed at, and the attempt's outcome.
type FinishRequest struct {
	ID      string
	Gen     int64
	Outcome wire.AttemptOutcome
}

// FinishResult is one attempt's result in a FinishBatch: the job's state
// after it, and Err as Finish would return it for that job alone (wrapping
// ErrStale, with State the job's current state, or ErrNotFound), else nil.
type FinishResult struct {
	State State
	Err   error
}

// FinishBatch records the attempts of reqs, all of jobs of one shard, in
// one script: each exactly as Finish would, one after the other in request
// order, at one Redis now. Each tenant's policy and state are read once and
// saved, rescheduled, expired and its dead set trimmed once; one attempt's
// refusal (stale, not found) never changes another's. The results are in
// request order. An id that cannot exist in this Store or is not of shard,
// a bad outcome or a bad cfg is an error and nothing is recorded; other
// errors are Redis's, wrapped, and then none or all of the attempts were
// recorded. An empty reqs records nothing and returns nil.
func (s *Store) FinishBatch(ctx context.Context, shard int, reqs []FinishRequest, cfg FinishConfig) ([]FinishResult, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	for _, r := range reqs {
		if err := s.checkShard(r.ID, shard); err != nil {
			return nil, fmt.Errorf("finish %d jobs on shard %d: %w", len(reqs), shard, err)
		}
	}
	rs, err := s.finish(ctx, shard, reqs, cfg)
	if err != nil {
		return nil, fmt.Errorf("finish %d jobs on shard %d: %w", len(reqs), shard, err)
	}
	return rs, nil
}

// finish runs finish.lua for reqs, all of shard, and decodes its replies.
func (s *Store) finish(ctx context.Context, shard int, reqs []FinishRequest, cfg FinishConfig) ([]FinishResult, error) {
	cfg = cfg.WithDefaults()
	errs := []error{cfg.validate()}
	for _, r := range reqs {
		if err := checkOutcome(r.Outcome); err != nil {
			errs = append(errs, fmt.Errorf("job %q: %w", r.ID, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	d, err := s.run(ctx, scriptFinish, shard, s.finishArgs(reqs, cfg)...)
	if err != nil {
		return nil, err
	}
	if d.Len() != 1+2*len(reqs) {
		d.fail("%d reply values for %d attempts", d.Len()-1, len(reqs))
	}
	rs := make([]FinishResult, len(reqs))
	for i, r := range reqs {
		if 2+2*i < d.Len() {
			rs[i] = decodeFinish(d, 1+2*i, r)
		}
	}
	if err := d.Err(); err != nil {
		return nil, err
	}
	return rs, nil
}

// decodeFinish reads one attempt's reply of finish.lua, the two values
// from i on of its flat reply: the state after (or not_found) and stale.
func decodeFinish(d decoder, i int, r FinishRequest) FinishResult {
	if d.str(i) == statusNotFound {
		return FinishResult{Err: fmt.Errorf("finish job %q: %w", r.ID, ErrNotFound)}
	}
	state, stale := State(d.str(i)), d.int(i+1) == 1
	if stale {
		return FinishResult{State: state, Err: fmt.Errorf("finish job %q at gen %d: %w (job is %s)", r.ID, r.Gen, ErrStale, state)}
	}
	return FinishResult{State: state}
}

// finishArgs is ARGV[3…] of finish.lua, for a checked cfg and outcomes.
// Each attempt sends its first finishHead values, then the number k of
// its other finishExtra values that follow and those k: the values after
// the last one that is not its zero ("" or 0) are left out, so a plain
// success (no error, pause, excerpt, result, actual cost or quota) sends
// six values, not twenty — fewer for Redis to parse and finish.lua to read.
func (s *Store) finishArgs(reqs []FinishRequest, cfg FinishConfig) []any {
	args := make([]any, 0, 12+(finishHead+1)*len(reqs))
	args = append(args, cfg.SucceededRetention.Microseconds(), cfg.DeadRetention.Microseconds(),
		cfg.DeadMaxPerTenant, cfg.AttemptLog, cfg.DefaultPause.Microseconds(), cfg.MaxPause.Microseconds(),
		s.seedArg(), cfg.AdaptiveFloorPPM, cfg.AdaptiveStepPPM, cfg.IdempotencyRetention.Microseconds(),
		boolInt(cfg.UpstreamScope), s.resultMark)
	for _, r := range reqs {
		o := r.Outcome
		args = append(args, r.ID, r.Gen, o.Kind.String(), o.Status, o.Latency.Microseconds())
		field, text := excerptArgs(o.Excerpt)
		meta, full, body := resultArgs(o.Result)
		extra := append(make([]any, 0, finishExtra), truncate(o.Error, wire.MaxErrorLen), max(o.Pause, 0).Microseconds(),
			boolInt(o.Congested()), field, text, meta, full, body, o.ActualCost)
		extra = append(extra, quotaArgs(o.Quota)...)
		k := len(extra)
		for k > 0 && zeroArg(extra[k-1]) {
			k--
		}
		args = append(args, k)
		args = append(args, extra[:k]...)
	}
	return args
}

// finishHead and finishExtra are the numbers of an attempt's values of
// finish.lua before its count of extras and after it (at most).
const finishHead, finishExtra = 5, 14

// zeroArg reports whether a value of finishArgs is its type's zero: the
// value finish.lua reads in place of one left out.
func zeroArg(v any) bool {
	switch v := v.(type) {
	case string:
		return v == ""
	case int:
		return v == 0
	case int64:
		return v == 0
	}
	return false
}

// quotaArgs are an attempt's quota values of finish.lua: unit (0 none, 1
// requests, 2 tokens), remaining, limit, reset in µs, source header.
func quotaArgs(q *wire.Quota) []any {
	if q == nil {
		return noQuotaArgs
	}
	unit := 1
	if q.Unit == wire.QuotaTokens {
		unit = 2
	}
	return []any{unit, q.Remaining, q.Limit, ceilMicros(q.ResetIn), truncate(q.Source, maxQuotaSource)}
}

// noQuotaArgs are quotaArgs(nil), shared: callers append them and never
// write them.
var noQuotaArgs = []any{0, 0, 0, 0, ""}

// maxQuotaSource bounds the stored name of a quota's header, in bytes.
const maxQuotaSource = 128

func checkOutcome(o wire.AttemptOutcome) error {
	switch {
	case o.Kind < wire.FinishSuccess || o.Kind > wire.FinishLapsed:
		return invalidf("outcome kind %d", o.Kind)
	case o.Status < 0 || o.Status > 999:
		return invalidf("status %d: want 0 … 999", o.Status)
	case o.Latency < 0:
		return invalidf("latency %s is negative", o.Latency)
	case o.Kind == wire.FinishDeferred && (o.Pause <= 0 || o.Pause > policy.MaxDuration):
		return invalidf("deferral %s: want above 0 and at most %s", o.Pause, policy.MaxDuration)
	case o.Kind == wire.FinishDeferred && (o.Error == "" || len(o.Error) > MaxDestinationLen):
		return invalidf("deferral's destination %q: want 1 … %d bytes", o.Error, MaxDestinationLen)
	case o.ActualCost < 0 || o.ActualCost > wire.MaxActualCost:
		return invalidf("actual cost %d: want 0 (unknown) … %d", o.ActualCost, wire.MaxActualCost)
	}
	if q := o.Quota; q != nil {
		switch {
		case q.Unit != wire.QuotaRequests && q.Unit != wire.QuotaTokens:
			return invalidf("quota unit %q: want %q or %q", q.Unit, wire.QuotaRequests, wire.QuotaTokens)
		case q.Remaining < 0 || q.Remaining > wire.MaxQuotaCount || q.Limit < 0 || q.Limit > wire.MaxQuotaCount:
			return invalidf("quota remaining %d, limit %d: want 0 … %d", q.Remaining, q.Limit, int64(wire.MaxQuotaCount))
		case q.ResetIn <= 0 || q.ResetIn > MaxDurationUS*time.Microsecond:
			return invalidf("quota reset in %s: want > 0, at most %s", q.ResetIn, MaxDurationUS*time.Microsecond)
		}
	}
	return checkResult(o)
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
