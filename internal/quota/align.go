package quota

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/redisscript"
)

// AlignedDemand is one set of upstreams that a pass found a lane head
// naming all of them waiting on without a common instant in the shard's
// segments (PassResult.Aligned): the shard needs segments of every one of
// them from one common start (AlignUpstreams).
type AlignedDemand struct {
	// Upstreams is the set: the lane's names, sorted.
	Upstreams []string
	Cost      int64 // the head's cost
	// Span is the time from the slot of the lane's first job to its last's
	// at the slowest of the head's rates (its tenant's and its upstreams'),
	// at most D/2: each upstream's part is Span + one job long.
	Span     time.Duration
	Weight   int64     // the head's tenant's weight
	Earliest time.Time // the head's earliest slot by its tenant alone (≥ the pass's now)
}

// Set is the set's lane name: its upstreams joined by ','.
func (a AlignedDemand) Set() string { return strings.Join(a.Upstreams, ",") }

// Calendar is what a shard last heard of an upstream's calendar.
type Calendar struct {
	TAT         time.Time // the end of the last segment handed out
	PausedUntil time.Time // zero: not paused
}

// Calendars is what a shard's dispatcher knows of the calendars of the
// upstreams it asked (upstream → Calendar), kept from one call to the next
// to choose an aligned request's common start. The zero value is usable
// after make; Learn fills it.
type Calendars map[string]Calendar

// Learn records the calendars the answered grants report.
func (c Calendars) Learn(grants []UpstreamGrant) {
	for _, g := range grants {
		if g.Interval > 0 {
			c[g.Upstream] = Calendar{TAT: g.TAT, PausedUntil: g.PausedUntil}
		}
	}
}

// AlignAt is the common start X of an aligned request for a: the latest of
// its Earliest and each of its upstreams' known calendar end and pause end,
// plus margin.
func (c Calendars) AlignAt(a AlignedDemand, margin time.Duration) time.Time {
	x := a.Earliest
	for _, n := range a.Upstreams {
		k := c[n]
		x = latest(x, k.TAT, k.PausedUntil)
	}
	return x.Add(margin)
}

// latest is the latest of ts.
func latest(ts ...time.Time) time.Time {
	return slices.MaxFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
}

// alignedReach is how far past now an aligned request's X may lie: 3·H +
// 2·span covers the calendar ends the coordinators' rounds leave (≤ now +
// H + a segment) plus the margin; a farther X (a long pause) is refused,
// so a set never hoards an upstream's far future.
func alignedReach(h, span time.Duration) time.Duration { return 3*h + 2*span }

// grantAsk is one coordinator call of AlignUpstreams: plain demand, and
// for an aligned set (set ≠ ""), a probe (request false) or a request at
// X = at.
type grantAsk struct {
	upstream             string
	wanted, weight, unit int64
	set                  string
	request              bool
	at                   time.Time
	span, reach          time.Duration
	cost                 int64
}

// alignTries is how many times AlignUpstreams asks for one set in a call
// while a coordinator's calendar had moved past X in between (another
// shard's round): each try takes X from the replies of the one before.
const alignTries = 3

// AlignUpstreams is GrantUpstreams with aligned requests (issue #15). For
// each set of aligned it first probes every upstream of the set, within
// the pipeline of the plain demand (merged into an upstream's plain call
// when there is one): each reply says the upstream's calendar end and
// whether it is the shard's turn (its registration owes nothing: an aligned
// segment is an advance on the shard's weighted share, repaid from its next
// rounds). When all say so, a second pipeline asks each of them, in its own
// slot, for a segment starting at one common X (known.AlignAt with
// cfg.Margin, plus up to cfg.Jitter): a coordinator grants [X, X + q·T),
// q = c + max(c − B, ⌈span/T⌉, 0), before its round, when its calendar end
// and pause are ≤ X ≤ now + 3H + 2·span and the shard owes at most one
// such segment (lua/upstream_grant.lua). A set refused only because a
// calendar had moved past X (another shard's round came in between) is
// asked again at once with X from the replies, up to alignTries times.
//
// The grants: the plain grant of every call, then for each set one grant
// per upstream with Set set: its part of the set's reservation when every
// upstream of the set granted one; else none with Segments — parts granted
// are added to the plain grants as ordinary segments (the shard's other
// lanes may use them) and NextGrant says when the set may ask again (at
// once; once X is within reach; at the upstream's next round while it is
// paused past X or it is not the shard's turn). known learns every
// calendar the replies report.
func (q *Registry) AlignUpstreams(ctx context.Context, shard int, demand []UpstreamDemand, aligned []AlignedDemand, known Calendars, cfg GrantConfig) ([]UpstreamGrant, error) {
	cfg = cfg.withDefaults()
	if shard < 0 || shard >= q.shards || cfg.Horizon < time.Microsecond {
		return nil, invalidf("grant upstreams for shard %d: want a shard of 0 … %d and a horizon ≥ 1µs", shard, q.shards-1)
	}
	if known == nil {
		known = Calendars{}
	}
	var asks []grantAsk
	var errs []error
	for _, d := range demand {
		if err := CheckName(d.Upstream); err != nil {
			errs = append(errs, err)
			continue
		}
		asks = append(asks, grantAsk{upstream: d.Upstream, wanted: d.Wanted, weight: d.Weight, unit: d.Unit})
	}
	sets, serrs := alignedSets(aligned)
	errs = append(errs, serrs...)
	var grants []UpstreamGrant
	for try := 0; ; try++ {
		asks = mergeAligned(asks, sets, try > 0, known, cfg)
		if len(asks) == 0 {
			break
		}
		replies, cerrs := q.grantCalls(ctx, shard, asks, cfg)
		errs = append(errs, cerrs...)
		plain := map[string]int{} // upstream → its plain grant's index in grants
		for i, r := range replies {
			if r != nil {
				plain[asks[i].upstream] = len(grants)
				grants = append(grants, r.grant)
			}
		}
		known.Learn(grants)
		var again []AlignedDemand
		for _, a := range sets {
			out, retry := settleAligned(a.Set(), asks, replies, grants, plain, try < alignTries)
			if retry {
				again = append(again, a)
			}
			grants = append(grants, out...)
		}
		sets, asks = again, nil // the next try: aligned-only calls
	}
	return grants, errors.Join(errs...)
}

// alignedSets is aligned without duplicate sets, sets of fewer than two
// upstreams or invalid names (their errors apart).
func alignedSets(aligned []AlignedDemand) ([]AlignedDemand, []error) {
	var out []AlignedDemand
	var errs []error
	seen := map[string]bool{}
	for _, a := range aligned {
		set := a.Set()
		if len(a.Upstreams) < 2 || seen[set] {
			continue
		}
		seen[set] = true
		var bad []error
		for _, n := range a.Upstreams {
			if err := CheckName(n); err != nil {
				bad = append(bad, err)
			}
		}
		if len(bad) > 0 {
			errs = append(errs, bad...)
			continue
		}
		out = append(out, a)
	}
	return out, errs
}

// mergeAligned adds each set's probe, or its request at its X, to asks:
// into the plain call of the upstream when asks has one not carrying
// another set's, else as a call of its own (wanted 0: the registration is
// kept).
func mergeAligned(asks []grantAsk, sets []AlignedDemand, request bool, known Calendars, cfg GrantConfig) []grantAsk {
	for _, a := range sets {
		x := known.AlignAt(a, cfg.Margin)
		if cfg.Jitter > 0 {
			x = x.Add(rand.N(cfg.Jitter))
		}
		for _, n := range a.Upstreams {
			ask := grantAsk{upstream: n, weight: a.Weight, unit: 1, set: a.Set(), request: request, at: x,
				span: max(a.Span, 0), reach: alignedReach(cfg.Horizon, a.Span), cost: a.Cost}
			if i := slices.IndexFunc(asks, func(g grantAsk) bool { return g.upstream == n && g.set == "" }); i >= 0 {
				if asks[i].wanted > 0 {
					ask.wanted, ask.weight, ask.unit = asks[i].wanted, asks[i].weight, asks[i].unit
				}
				asks[i] = ask
			} else {
				asks = append(asks, ask)
			}
		}
	}
	return asks
}

// grantCalls runs one coordinator call per ask in one pipeline; a failed
// call's reply is nil and its error returned.
func (q *Registry) grantCalls(ctx context.Context, shard int, asks []grantAsk, cfg GrantConfig) ([]*grantReply, []error) {
	calls := make([]*redisscript.Call, len(asks))
	for i, a := range asks {
		var mode, at int64 // aligned mode: 0 none, 1 probe, 2 request
		switch {
		case a.request:
			mode, at = 2, a.at.UnixMicro()
		case a.set != "":
			mode = 1
		}
		calls[i] = &redisscript.Call{
			Script: scriptUpstreamGrant,
			Keys:   q.keys.grantKeys(a.upstream),
			Args: []any{q.nowArg(), shard, max(a.wanted, 0), max(a.weight, 1), max(a.unit, 1),
				cfg.Horizon.Microseconds(), cfg.Lifetime.Microseconds(),
				mode, at, a.span.Microseconds(), max(a.cost, 1), max(a.reach.Microseconds(), 1)},
		}
	}
	q.runner.Batch(ctx, calls)
	replies := make([]*grantReply, len(calls))
	var errs []error
	for i, c := range calls {
		r, err := decodeGrant(asks[i].upstream, c)
		if err != nil {
			errs = append(errs, fmt.Errorf("grant upstream %q to shard %d: %w", asks[i].upstream, shard, err))
			continue
		}
		replies[i] = &r
	}
	return replies, errs
}

// settleAligned turns the replies to one set's probe or request into the
// set's grants. A probe every upstream answered with its turn: retry (ask
// for real). A request every upstream granted: the set's reservation. A
// request refused only by calendars that had moved past X, none failed:
// retry, when may. A call of the set failed: nothing for the set. Else
// failure markers say when the set may ask again, and the parts granted go
// to the plain grants.
func settleAligned(set string, asks []grantAsk, replies []*grantReply, grants []UpstreamGrant, plain map[string]int, may bool) ([]UpstreamGrant, bool) {
	var mine []int // indexes of the set's asks
	whole, moved, probe := true, true, false
	for i, a := range asks {
		if a.set != set {
			continue
		}
		mine = append(mine, i)
		r := replies[i]
		probe = !a.request
		switch {
		case r == nil:
			whole, moved = false, false
		case probe:
			whole = whole && r.turn
		default:
			whole = whole && len(r.aligned) == 1
			moved = moved && (len(r.aligned) == 1 || r.refusal == alignLate && retryAligned(a, *r).Equal(r.now))
		}
	}
	if probe && whole || !probe && !whole && moved && may {
		return nil, true
	}
	if slices.ContainsFunc(mine, func(i int) bool { return replies[i] == nil }) {
		return nil, false // a call failed: no news of the set (its grants for other upstreams are plain)
	}
	out := make([]UpstreamGrant, 0, len(mine))
	for _, i := range mine {
		r := replies[i]
		g := r.grant
		g.Set, g.Segments = set, nil
		switch {
		case whole:
			g.Segments = r.aligned
		case probe:
			g.NextGrant = r.now
			if !r.turn {
				g.NextGrant = latest(r.now, r.grant.NextGrant)
			}
		default:
			if len(r.aligned) > 0 {
				p := &grants[plain[asks[i].upstream]]
				p.Segments = append(p.Segments, r.aligned...)
				slices.SortFunc(p.Segments, func(x, y Segment) int { return cmp.Compare(x.T0.UnixMicro(), y.T0.UnixMicro()) })
			}
			g.NextGrant = retryAligned(asks[i], *r)
		}
		out = append(out, g)
	}
	return out, false
}

// retryAligned is when a failed aligned request may be tried again as far
// as upstream reply r goes: at once when it granted its part or its
// calendar had moved past X (the reply's TAT feeds the next X); when X was
// out of reach, once it is within reach or at the upstream's next round,
// whichever comes first (a long pause may end: its next round is within a
// second); at the upstream's next round while it is paused past X or when
// the shard owes too much (rounds repay it).
func retryAligned(a grantAsk, r grantReply) time.Time {
	switch {
	case r.refusal == alignTurn:
		return latest(r.now, r.grant.NextGrant)
	case r.refusal == alignLate && r.grant.PausedUntil.After(a.at):
		return latest(r.now, r.grant.NextGrant)
	case r.refusal == alignLate: // X out of reach: at the latest at the upstream's next round (a pause may end)
		return latest(r.now, slices.MinFunc([]time.Time{a.at.Add(-a.reach), r.grant.NextGrant}, time.Time.Compare))
	}
	return r.now
}
