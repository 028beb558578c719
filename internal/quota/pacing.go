package quota

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redisscript"
	"github.com/sluicehq/sluice/internal/wire"
)

// Pacing an upstream by the quota its answers report in headers (issue
// #32). An upstream whose pause_scope is upstream and whose pacing is
// headers (upstream.Params.Paced) keeps the last quota its answers
// reported in its hash (fields qu, qr, ql, qt, qh, qs, qf, qi:
// lua/upstream_quota.lua); while that quota is in force its coordinator
// (lua/upstream_grant.lua) spaces the calendar it hands the shards so that
// what is left — the reported remaining less the units handed out since
// the answer's request was sent — lasts until the reset, with PaceMargin to
// spare, never faster than the configured rate; nothing is handed out
// before the reset once nothing is left. One quota, seen by every
// dispatcher and tenant whose jobs name the upstream.

// PaceMargin is the safety margin of an upstream's pacing: what is left is
// spread over the time to the reset as if it were (1 − PaceMargin) of it
// (lua/upstream_grant.lua PACE.MARGIN; store.PaceMargin for tenants).
const PaceMargin = 0.05

// maxQuotaSource bounds the stored name of a quota's header, in bytes
// (lua/upstream_quota.lua).
const maxQuotaSource = 128

// UpstreamAnswer records what one answer to a job naming upstream name
// tells its pacing (lua/upstream_quota.lua): the quota the answer reported
// (q; nil: none) and the attempt's cost correction (delta = actual −
// reserved cost; 0: none), for an attempt of reserved cost cost (< 1 counts
// as 1) sent at sent (its slot, Redis time). It reports whether q replaced the recorded quota: false for an
// upstream not paced (pause_scope tenant or pacing off: nothing is
// written) and for older news (an answer overtaken by a later one). An
// upstream that does not exist is ErrUpstreamNotFound; a bad name, quota
// or |delta| > wire.MaxActualCost is ErrInvalid, and nothing changes.
func (q *Registry) UpstreamAnswer(ctx context.Context, name string, quota *wire.Quota, sent time.Time, cost, delta int64) (bool, error) {
	if err := CheckName(name); err != nil {
		return false, fmt.Errorf("upstream answer: %w", err)
	}
	args := []any{q.nowArg(), 0, 0, 0, 0, "", max(sent.UnixMicro(), 0), delta, min(max(cost, 1), wire.MaxActualCost)}
	if err := checkAnswer(quota, delta); err != nil {
		return false, fmt.Errorf("upstream %q answer: %w", name, err)
	}
	if quota != nil {
		unit := 1
		if quota.Unit == wire.QuotaTokens {
			unit = 2
		}
		src := quota.Source
		if len(src) > maxQuotaSource {
			src = src[:maxQuotaSource]
		}
		reset := (quota.ResetIn + time.Microsecond - 1) / time.Microsecond
		args[1], args[2], args[3], args[4], args[5] = unit, quota.Remaining, quota.Limit, int64(reset), src
	}
	d, err := q.runKeys(ctx, scriptUpstreamQuota, []string{q.keys.upstream(name)}, args...)
	if errors.Is(err, redisscript.ErrNotFound) {
		return false, fmt.Errorf("upstream %q answer: %w", name, ErrUpstreamNotFound)
	}
	if err != nil {
		return false, fmt.Errorf("upstream %q answer: %w", name, err)
	}
	recorded := d.Int(1) == 1
	if err := d.Err(); err != nil {
		return false, fmt.Errorf("upstream %q answer: %w", name, err)
	}
	return recorded, nil
}

// checkAnswer checks an answer's quota and correction.
func checkAnswer(quota *wire.Quota, delta int64) error {
	if delta < -wire.MaxActualCost || delta > wire.MaxActualCost {
		return invalidf("delta %d: want |delta| ≤ %d", delta, wire.MaxActualCost)
	}
	if quota == nil {
		return nil
	}
	switch {
	case quota.Unit != wire.QuotaRequests && quota.Unit != wire.QuotaTokens:
		return invalidf("quota unit %q: want %q or %q", quota.Unit, wire.QuotaRequests, wire.QuotaTokens)
	case quota.Remaining < 0 || quota.Remaining > wire.MaxQuotaCount || quota.Limit < 0 || quota.Limit > wire.MaxQuotaCount:
		return invalidf("quota remaining %d, limit %d: want 0 … %d", quota.Remaining, quota.Limit, int64(wire.MaxQuotaCount))
	case quota.ResetIn <= 0 || quota.ResetIn > maxQuotaReset:
		return invalidf("quota reset in %s: want > 0, at most %s", quota.ResetIn, maxQuotaReset)
	}
	return nil
}

// maxQuotaReset bounds a reported quota's reset: a day past the answer.
const maxQuotaReset = 24 * time.Hour

// UpstreamQuota is the quota an upstream's answers reported last, as its
// pacing keeps it (UpstreamRuntime.Quota; a tenant's is the same type,
// store.Quota).
type UpstreamQuota struct {
	Unit      string    // wire.QuotaRequests or wire.QuotaTokens
	Remaining int64     // what was left when reported
	Limit     int64     // the quota's size; 0 when not reported
	ResetAt   time.Time // when it is whole again
	Source    string    // the header field Remaining was read from
	// InFlight is what the coordinator handed out since the reporting
	// answer's request was sent, in the quota's unit (cost units):
	// counted against Remaining.
	InFlight int64
}

// Left is what q has left for new sends: Remaining − InFlight, at least 0.
func (q UpstreamQuota) Left() int64 { return max(q.Remaining-q.InFlight, 0) }

// pacedInterval is the interval pacing by q holds an upstream of
// effective interval iv to when its calendar starts at start (µs per
// unit; lua/upstream_grant.lua): 0 when q does not bind (a pace no slower
// than iv), -1 when nothing is left before the reset.
func pacedInterval(q UpstreamQuota, iv int64, start time.Time) int64 {
	if !start.Before(q.ResetAt) {
		return 0
	}
	left := q.Remaining - q.InFlight
	if left <= 0 {
		return -1
	}
	span := float64(q.ResetAt.Sub(start).Microseconds())
	p := int64(math.Ceil(span / (float64(left) * (1 - PaceMargin))))
	if p <= iv {
		return 0
	}
	return p
}

// UpstreamQuotas reads the quotas in force that pace the first limit
// upstreams by name (1 … MaxUpstreamNames): one listing read and one
// pipelined HMGET per upstream, each in its own slot. Upstreams not paced
// (pause_scope tenant, pacing off), without a report or past its reset are
// left out; so is a hash that does not parse (the registry's audit reports
// it).
func (q *Registry) UpstreamQuotas(ctx context.Context, limit int) (map[string]UpstreamQuota, error) {
	names, err := q.UpstreamNames(ctx, "", limit)
	if err != nil || len(names) == 0 {
		return nil, err
	}
	now, err := q.redisNow(ctx)
	if err != nil {
		return nil, fmt.Errorf("read upstream quotas: %w", err)
	}
	cmds := make([]*redis.SliceCmd, len(names))
	if _, err := q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, name := range names {
			cmds[i] = p.HMGet(ctx, q.keys.upstream(name), "p", "cfg", "qu", "qr", "ql", "qt", "qf", "qh")
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read upstream quotas: %w", err)
	}
	out := make(map[string]UpstreamQuota)
	for i, c := range cmds {
		v := c.Val()
		st, err := parseUpstreamSettings(v[:2])
		if err != nil || !st.Found || !st.Params.Paced() {
			continue
		}
		if qv := quotaOf(v[2:], now); qv != nil {
			out[names[i]] = *qv
		}
	}
	return out, nil
}

// quotaOf reads HMGET qu qr ql qt qf qh: the quota in force at now (µs),
// nil when none is.
func quotaOf(v []any, now int64) *UpstreamQuota {
	unit, reset := hashInt(v, 0), hashInt(v, 3)
	if unit <= 0 || reset <= now {
		return nil
	}
	qv := &UpstreamQuota{Unit: wire.QuotaRequests, Remaining: hashInt(v, 1), Limit: hashInt(v, 2),
		ResetAt: redisscript.MicrosTime(reset), InFlight: hashInt(v, 4)}
	qv.Source, _ = v[5].(string)
	if unit == 2 {
		qv.Unit = wire.QuotaTokens
	}
	return qv
}
