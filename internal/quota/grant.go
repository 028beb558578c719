package quota

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/redisscript"
)

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
	// Set is, for an aligned grant (AlignUpstreams), the set of upstreams
	// it was asked for (their names, sorted, joined by ','): Segments then
	// holds the upstream's part of the set's reservation, or nothing when
	// the set's request failed (ask again from NextGrant). Empty for a plain
	// grant.
	Set string
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
	// Margin is added to an aligned request's common start X past every
	// calendar end and pause the shard knows of (AlignUpstreams), so that
	// other shards' rounds in between rarely pass it. Default Horizon/8.
	Margin time.Duration
	// Jitter, when positive, adds a random [0, Jitter) to X, so that two
	// shards asking for the same set at once do not keep choosing the same
	// X. Default 0 (none).
	Jitter time.Duration
}

// withDefaults fills Lifetime and Margin.
func (c GrantConfig) withDefaults() GrantConfig {
	if c.Lifetime <= 0 {
		c.Lifetime = 4 * c.Horizon
	}
	if c.Margin <= 0 {
		c.Margin = c.Horizon / 8
	}
	return c
}

// GrantUpstreams registers shard's demand on each upstream of demand and
// takes the shard's segments of each, one coordinator call
// (lua/upstream_grant.lua, in the upstream's slot {u:<name>}) per upstream,
// all in one pipeline. A Wanted of 0 only picks up segments granted to the
// shard earlier. The grants come back in demand's order; an upstream that
// failed (not configured: an *UpstreamNotFoundError, MissingUpstreams; a
// Redis error) is left out
// and its error joined in err. It is AlignUpstreams without aligned
// demand.
func (q *Registry) GrantUpstreams(ctx context.Context, shard int, demand []UpstreamDemand, cfg GrantConfig) ([]UpstreamGrant, error) {
	return q.AlignUpstreams(ctx, shard, demand, nil, nil, cfg)
}

// grantReply is one coordinator reply: the plain grant, the script's now
// and the aligned request's answer: its segment when granted, else why not
// (alignLate, alignTurn; "" when none was asked).
type grantReply struct {
	grant   UpstreamGrant
	now     time.Time
	aligned []Segment
	refusal string
	turn    bool // the shard may ask for an aligned segment (a probe's answer)
}

// Why a coordinator refused an aligned request (lua/upstream_grant.lua).
const (
	alignLate = "late" // its calendar or pause had passed X, or X was out of reach
	alignTurn = "turn" // the caller owes more than one aligned segment: not its turn
)

// decodeGrant reads one coordinator reply.
func decodeGrant(name string, c *redisscript.Call) (grantReply, error) {
	if c.Err != nil {
		return grantReply{}, c.Err
	}
	d, err := c.Reply.Status(redisscript.Refused)
	if errors.Is(err, redisscript.ErrNotFound) { // the script's answer: no params (deleted); never a Redis error
		return grantReply{}, &UpstreamNotFoundError{Upstream: name}
	}
	if err != nil {
		return grantReply{}, err
	}
	r := grantReply{now: redisscript.MicrosTime(d.Int(1)), grant: UpstreamGrant{Upstream: name, Interval: redisscript.Micros(d.Int(2)),
		Burst: d.Int(3), PausedUntil: redisscript.MicrosTime(d.Int(4)), NextGrant: redisscript.MicrosTime(d.Int(5)), TAT: redisscript.MicrosTime(d.Int(7))}}
	segs, aligned := d.Str(6), d.Str(8)
	r.turn = d.Int(9) == 1
	if err := d.Err(); err != nil {
		return grantReply{}, err
	}
	if r.grant.Segments, err = parseSegments(segs); err != nil {
		return grantReply{}, err
	}
	switch aligned {
	case alignLate, alignTurn:
		r.refusal = aligned
	default:
		if r.aligned, err = parseSegments(aligned); err != nil {
			return grantReply{}, err
		}
	}
	return r, nil
}

// parseSegments parses "t0 ceil t0 ceil …" (µs).
func parseSegments(text string) ([]Segment, error) {
	v, err := parseInts(text)
	if err != nil || len(v)%2 != 0 {
		return nil, fmt.Errorf("%w: segments %q", ErrProtocol, text)
	}
	var out []Segment
	for i := 0; i < len(v); i += 2 {
		out = append(out, Segment{T0: redisscript.MicrosTime(v[i]), Ceil: redisscript.MicrosTime(v[i+1])})
	}
	return out, nil
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

// UpstreamNotFoundError is a coordinator's answer that upstream Upstream
// has no configuration (GrantUpstreams, AlignUpstreams): it was deleted,
// or never created. It is ErrUpstreamNotFound (errors.Is); a Redis error
// never is.
type UpstreamNotFoundError struct{ Upstream string }

func (e *UpstreamNotFoundError) Error() string {
	return fmt.Sprintf("upstream %q: %v", e.Upstream, ErrUpstreamNotFound)
}

// Is makes errors.Is(err, ErrUpstreamNotFound) true.
func (e *UpstreamNotFoundError) Is(target error) bool { return target == ErrUpstreamNotFound }

// MissingUpstreams lists the upstreams err (GrantUpstreams' or
// AlignUpstreams', joined errors included) reports as not existing: every
// *UpstreamNotFoundError in its tree, each name once, in order.
func MissingUpstreams(err error) []string {
	var out []string
	var walk func(error)
	walk = func(e error) {
		switch x := e.(type) {
		case nil:
		case *UpstreamNotFoundError:
			if !slices.Contains(out, x.Upstream) {
				out = append(out, x.Upstream)
			}
		case interface{ Unwrap() []error }:
			for _, c := range x.Unwrap() {
				walk(c)
			}
		default:
			walk(errors.Unwrap(e))
		}
	}
	walk(err)
	return out
}
