package store

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/redisscript"
)

//go:embed lua/upstream_grant.lua
var luaUpstreamGrant string

// scriptUpstreamGrant stands alone: its keys are the upstream's slot
// {u:<name>}, not a shard's.
var scriptUpstreamGrant = standalone("upstream_grant", luaUpstreamGrant)

// UpstreamDemand is what one pass found waiting on an upstream without room
// in its shard's segments (PassResult.Demand).
type UpstreamDemand struct {
	Upstream string
	// Wanted is the cost units the shard's waiting lanes hold (an estimate:
	// each lane's jobs × its head's cost).
	Wanted int64
	// Weight is the sum of the weights of the shard's tenants waiting on it.
	Weight int64
	// Unit is the largest cost of a waiting lane head: a segment smaller
	// than it would be of no use.
	Unit int64
}

// Segment is a range [T0, Ceil) of an upstream's calendar granted to one
// shard: the shard's releases naming the upstream take their virtual times
// within it (lua/lanes.lua).
type Segment struct {
	T0, Ceil time.Time
}

// UpstreamGrant is one coordinator call's answer for a shard
// (GrantUpstreams), handed to the shard's next pass (PassConfig.Grants).
type UpstreamGrant struct {
	Upstream string
	// Interval is T, the upstream's (effective) interval per cost unit; 0
	// in a grant the coordinator did not answer (only NextGrant is news:
	// the shard keeps what it knew).
	Interval time.Duration
	Burst    int64 // B
	// PausedUntil is the upstream's pause end (zero: none); the coordinator
	// grants nothing that starts before it.
	PausedUntil time.Time
	// NextGrant is the earliest time the next round may grant anything
	// worth a call (the upstream's TAT − H/2, or its pause end − H; at
	// least now).
	NextGrant time.Time
	// Segments are the shard's segments, in calendar order (maybe none).
	Segments []Segment
	// TAT is the upstream's calendar end after the call.
	TAT time.Time
}

// Usable is when the grant's first segment can be used by a pass of lead
// lead (its start − lead); NextGrant when it has no segment.
func (g UpstreamGrant) Usable(lead time.Duration) time.Time {
	if len(g.Segments) == 0 {
		return g.NextGrant
	}
	return g.Segments[0].T0.Add(-lead)
}

// GrantConfig tunes GrantUpstreams.
type GrantConfig struct {
	// Horizon is H: a round grants the upstream's calendar up to now + H
	// only, so a paused or idle shard never hoards future time. The
	// dispatcher passes its lead D. Required (≥ 1 µs).
	Horizon time.Duration
	// Lifetime is how long a shard's registration lives without a new
	// call. Default 4·Horizon.
	Lifetime time.Duration
}

// GrantUpstreams registers shard's demand on each upstream of demand and
// takes the shard's segments of each, one coordinator call
// (lua/upstream_grant.lua, in the upstream's slot {u:<name>}) per upstream,
// all in one pipeline. A Wanted of 0 only picks up segments granted to the
// shard earlier. The grants come back in demand's order; an upstream that
// failed (not configured: ErrUpstreamNotFound; a Redis error) is left out
// and its error joined in err.
func (s *Store) GrantUpstreams(ctx context.Context, shard int, demand []UpstreamDemand, cfg GrantConfig) ([]UpstreamGrant, error) {
	if cfg.Lifetime <= 0 {
		cfg.Lifetime = 4 * cfg.Horizon
	}
	if shard < 0 || shard >= s.keys.shards || cfg.Horizon < time.Microsecond {
		return nil, invalidf("grant upstreams for shard %d: want a shard of 0 … %d and a horizon ≥ 1µs", shard, s.keys.shards-1)
	}
	calls := make([]*redisscript.Call, 0, len(demand))
	var errs []error
	for _, d := range demand {
		if err := checkUpstreamName(d.Upstream); err != nil {
			errs = append(errs, err)
			continue
		}
		calls = append(calls, &redisscript.Call{
			Script: scriptUpstreamGrant.eval,
			Keys:   s.keys.upstreamGrantKeys(d.Upstream),
			Args: []any{s.nowArg(), shard, max(d.Wanted, 0), max(d.Weight, 1), max(d.Unit, 1),
				cfg.Horizon.Microseconds(), cfg.Lifetime.Microseconds()},
		})
	}
	s.runner.Batch(ctx, calls)
	grants := make([]UpstreamGrant, 0, len(calls))
	for _, c := range calls {
		name := upstreamOfKey(c.Keys[0])
		g, err := decodeGrant(name, c)
		if err != nil {
			errs = append(errs, fmt.Errorf("grant upstream %q to shard %d: %w", name, shard, err))
			continue
		}
		grants = append(grants, g)
	}
	return grants, errors.Join(errs...)
}

// decodeGrant reads one coordinator reply.
func decodeGrant(name string, c *redisscript.Call) (UpstreamGrant, error) {
	if c.Err != nil {
		return UpstreamGrant{}, c.Err
	}
	dec, err := c.Reply.Status(refused)
	if errors.Is(err, ErrNotFound) {
		return UpstreamGrant{}, ErrUpstreamNotFound
	}
	if err != nil {
		return UpstreamGrant{}, err
	}
	d := decoder{dec}
	g := UpstreamGrant{Upstream: name, Interval: us(d.int(2)), Burst: d.int(3),
		PausedUntil: optMicros(d.int(4)), NextGrant: microsTime(d.int(5)), TAT: microsTime(d.int(7))}
	v, perr := parseInts(d.str(6))
	if err := d.Err(); err != nil {
		return UpstreamGrant{}, err
	}
	if perr != nil || len(v)%2 != 0 {
		return UpstreamGrant{}, fmt.Errorf("%w: segments %q", ErrProtocol, d.str(6))
	}
	for i := 0; i < len(v); i += 2 {
		g.Segments = append(g.Segments, Segment{T0: microsTime(v[i]), Ceil: microsTime(v[i+1])})
	}
	return g, nil
}

// optMicros is a µs time, zero for 0.
func optMicros(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return microsTime(v)
}

// parseInts parses space-separated decimal integers.
func parseInts(s string) ([]int64, error) {
	fields := strings.Fields(s)
	out := make([]int64, len(fields))
	for i, f := range fields {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// grantArgs are pass.lua's ARGV[14…] for grants: m, then 7 values each.
func grantArgs(grants []UpstreamGrant) []any {
	args := make([]any, 0, 1+7*len(grants))
	args = append(args, len(grants))
	for _, g := range grants {
		var segs strings.Builder
		for i, sg := range g.Segments {
			if i > 0 {
				segs.WriteByte(' ')
			}
			fmt.Fprintf(&segs, "%d %d", sg.T0.UnixMicro(), sg.Ceil.UnixMicro())
		}
		var pu int64
		if !g.PausedUntil.IsZero() {
			pu = g.PausedUntil.UnixMicro()
		}
		args = append(args, g.Upstream, max(g.Interval.Microseconds(), 0), max(g.Burst, 1), pu,
			g.NextGrant.UnixMicro(), segs.String(), 0)
	}
	return args
}

// decodeDemand reads a pass reply's demand list.
func decodeDemand(d decoder) []UpstreamDemand {
	var out []UpstreamDemand
	for i := range d.Len() {
		e := d.list(i)
		out = append(out, UpstreamDemand{Upstream: e.str(0), Wanted: e.int(1), Weight: e.int(2), Unit: e.int(3)})
	}
	return out
}
