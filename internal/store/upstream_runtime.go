package store

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"
)

//go:embed lua/upstream_waiting.lua
var luaUpstreamWaiting string

var scriptUpstreamWaiting = assemble("upstream_waiting", luaUpstreamWaiting)

// UpstreamRuntimeTenantsPerShard bounds the tenants UpstreamRuntime reads
// per shard.
const UpstreamRuntimeTenantsPerShard = 100

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
	// WaitingByTenant is the jobs waiting on the upstream, by tenant: at
	// most UpstreamRuntimeTenantsPerShard tenants per shard (Truncated then).
	WaitingByTenant map[string]int64
	Truncated       bool
	// Running is the jobs naming the upstream that run under its
	// concurrency now (leases in force, UpstreamRunning); 0 without one.
	Running int64
}

// UpstreamRuntime reads upstream name's runtime: its hash (one HMGET in its
// slot: the params and the calendar) and, per shard, the tenants waiting on it (one script each,
// bounded), and its concurrency leases in force (one script in its slot).
// ErrUpstreamNotFound when it has no params.
func (s *Store) UpstreamRuntime(ctx context.Context, name string) (UpstreamRuntime, error) {
	if err := checkUpstreamName(name); err != nil {
		return UpstreamRuntime{}, fmt.Errorf("read upstream runtime: %w", err)
	}
	v, err := s.rdb.HMGet(ctx, s.keys.upstream(name), "p", "cfg", "tat", "pu", "rf").Result()
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
	if p.Adaptive && rf > 0 && rf < RateFactorFull { // upstream_adapt.lua: ⌈T·10⁶ / f⌉
		iv = (p.IntervalUS*RateFactorFull + rf - 1) / rf
	}
	rt := UpstreamRuntime{EffectiveIntervalUS: iv, WaitingByTenant: map[string]int64{}}
	for shard := range s.keys.shards {
		d, err := s.run(ctx, scriptUpstreamWaiting, shard, name, UpstreamRuntimeTenantsPerShard)
		if err != nil {
			return UpstreamRuntime{}, fmt.Errorf("read upstream %q waiting on shard %d: %w", name, shard, err)
		}
		rt.Truncated = rt.Truncated || d.int(1) == 1
		for i := 2; i+1 < d.Len(); i += 2 {
			if n := d.int(i + 1); n > 0 {
				rt.WaitingByTenant[d.str(i)] += n
			}
		}
		if err := d.Err(); err != nil {
			return UpstreamRuntime{}, fmt.Errorf("read upstream %q waiting on shard %d: %w", name, shard, err)
		}
	}
	if rt.Running, err = s.UpstreamRunning(ctx, name); err != nil {
		return UpstreamRuntime{}, fmt.Errorf("read upstream %q: %w", name, err)
	}
	now, err := s.redisNow(ctx)
	if err != nil {
		return UpstreamRuntime{}, fmt.Errorf("read upstream %q: %w", name, err)
	}
	rt.Now, rt.TAT, rt.PausedUntil = microsTime(now), optMicros(tat), optMicros(pu)
	rt.Tokens = min(max((now+p.Burst*iv-max(tat, now))/iv, 0), p.Burst)
	return rt, nil
}

// hashInt is the integer at i of an HMGET reply; 0 when absent or malformed.
func hashInt(v []any, i int) int64 {
	s, _ := v[i].(string)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// redisNow is the scripts' now in µs: the injected clock, else Redis TIME.
func (s *Store) redisNow(ctx context.Context) (int64, error) {
	if s.clock != nil {
		return s.clock().UnixMicro(), nil
	}
	t, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return 0, err
	}
	return t.UnixMicro(), nil
}
