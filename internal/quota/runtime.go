package quota

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/redisscript"
	"github.com/sluicehq/sluice/internal/tuning"
)

// UpstreamRuntime is an upstream's live state (issue #15), for
// GET /v1/upstreams/{name}.
type UpstreamRuntime struct {
	// Now is the Redis time of the reading.
	Now time.Time
	// TAT is the end of the upstream's calendar handed out so far
	// (lua/upstream_grant.lua); zero before the first grant.
	TAT time.Time
	// Tokens is the cost units the upstream could send now: ⌊(now + B·T −
	// max(TAT, now)) / T⌋, 0 … B.
	Tokens int64
	// EffectiveIntervalUS is T in µs: an adaptive upstream's effective
	// ⌈T·10⁶ / f⌉ (UpstreamOutcome), else the configured one.
	EffectiveIntervalUS int64
	// PausedUntil is the pause end (zero: not paused).
	PausedUntil time.Time
	// WaitingByTenant is the jobs waiting on the upstream, by tenant, as
	// the shards' lanes hold them (Config.Waiting: at most
	// store.UpstreamRuntimeTenantsPerShard tenants per shard, Truncated
	// then).
	WaitingByTenant map[string]int64
	Truncated       bool
	// Running is the jobs naming the upstream that run under its
	// concurrency now (leases in force, UpstreamRunning); 0 without one.
	Running int64
	// Quota is the quota the upstream's answers reported last, while it is
	// in force (before its reset) and paces the upstream (pause_scope
	// upstream, pacing headers); nil otherwise.
	Quota *UpstreamQuota
	// Paced is true while Quota holds the upstream below its effective
	// rate; PacedRate is then that rate, cost units per second (0: nothing
	// is left before the reset).
	Paced     bool
	PacedRate float64
}

// UpstreamRuntime reads upstream name's runtime: its hash (one HMGET in its
// slot: the params and the calendar), the jobs the shards hold waiting on
// it (Config.Waiting: the store's one bounded script per shard) and its
// concurrency leases in force (one script in its slot).
// ErrUpstreamNotFound when it has no params.
func (q *Registry) UpstreamRuntime(ctx context.Context, name string) (UpstreamRuntime, error) {
	if err := CheckName(name); err != nil {
		return UpstreamRuntime{}, fmt.Errorf("read upstream runtime: %w", err)
	}
	v, err := q.rdb.HMGet(ctx, q.keys.upstream(name), "p", "cfg", "tat", "pu", "rf",
		"qu", "qr", "ql", "qt", "qf", "qh").Result()
	if err != nil {
		return UpstreamRuntime{}, fmt.Errorf("read upstream %q: %w", name, err)
	}
	settings, err := parseUpstreamSettings(v[:2])
	if err != nil {
		return UpstreamRuntime{}, fmt.Errorf("read upstream %q: %w", name, err)
	}
	if !settings.Found {
		return UpstreamRuntime{}, fmt.Errorf("read upstream %q: %w", name, ErrUpstreamNotFound)
	}
	p := settings.Params
	tat, pu, rf := hashInt(v, 2), hashInt(v, 3), hashInt(v, 4)
	iv := p.IntervalUS
	if p.Adaptive && rf > 0 && rf < tuning.RateFactorFull { // upstream_adapt.lua: ⌈T·10⁶ / f⌉
		iv = (p.IntervalUS*tuning.RateFactorFull + rf - 1) / rf
	}
	rt := UpstreamRuntime{EffectiveIntervalUS: iv, WaitingByTenant: map[string]int64{}}
	if q.waiting != nil {
		if rt.WaitingByTenant, rt.Truncated, err = q.waiting(ctx, name); err != nil {
			return UpstreamRuntime{}, fmt.Errorf("read upstream %q: %w", name, err)
		}
	}
	if rt.Running, err = q.UpstreamRunning(ctx, name); err != nil {
		return UpstreamRuntime{}, fmt.Errorf("read upstream %q: %w", name, err)
	}
	now, err := q.redisNow(ctx)
	if err != nil {
		return UpstreamRuntime{}, fmt.Errorf("read upstream %q: %w", name, err)
	}
	rt.Now, rt.TAT, rt.PausedUntil = redisscript.MicrosTime(now), redisscript.MicrosTime(tat), redisscript.MicrosTime(pu)
	rt.Tokens = min(max((now+p.Burst*iv-max(tat, now))/iv, 0), p.Burst)
	if qv := quotaOf(v[5:], now); p.Paced() && qv != nil {
		rt.Quota = qv
		start := redisscript.MicrosTime(max(tat, now, pu))
		switch piv := pacedInterval(*qv, iv, start); {
		case piv < 0:
			rt.Paced = true
		case piv > 0:
			rt.Paced, rt.PacedRate = true, 1e6/float64(piv)
		}
	}
	return rt, nil
}

// hashInt is the integer at i of an HMGET reply; 0 when absent or malformed.
func hashInt(v []any, i int) int64 {
	s, _ := v[i].(string)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
