package store

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/quota"
)

// AlignUpstreams asks every upstream of a set for a segment from one
// common start X past each calendar end: with u1's calendar held 100 ms
// ahead by shard 1, shard 0's parts of {u1, u2} both start at the same X ≥
// u1's calendar end and cover the span plus one job on each; the next pass
// keeps them as the set's reservation (key ua, with a TTL). With u2 paused until resumed,
// the set gets no reservation, u1's calendar does not leap to the pause,
// and the set may ask again only at u2's next round (not at once: no call
// per pass); a bad shard is ErrInvalid.
func TestAlignUpstreamsCommonStart(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 2)
	e.putUpstream("u1", 20*ms, 1)
	e.putUpstream("u2", 30*ms, 2)
	held, err := e.store.GrantUpstreams(e.ctx, 1, []quota.UpstreamDemand{{Upstream: "u1", Wanted: 5, Weight: 1, Unit: 1}},
		quota.GrantConfig{Horizon: grantLead})
	if err != nil || len(held) != 1 || !held[0].TAT.After(e.clock.Now().Add(90*ms)) {
		t.Fatalf("shard 1's grant %+v, %v: want u1's calendar ≥ 90 ms ahead", held, err)
	}
	set := quota.AlignedDemand{Upstreams: []string{"u1", "u2"}, Cost: 1, Span: 40 * ms, Weight: 1, Earliest: e.clock.Now()}
	known := quota.Calendars{}
	gs, err := e.store.AlignUpstreams(e.ctx, 0, nil, []quota.AlignedDemand{set}, known, quota.GrantConfig{Horizon: grantLead})
	if err != nil {
		t.Fatal(err)
	}
	parts := map[string]quota.Segment{}
	for _, g := range gs {
		if g.Set == "u1,u2" {
			if len(g.Segments) != 1 {
				t.Fatalf("aligned grant %+v: want one segment", g)
			}
			parts[g.Upstream] = g.Segments[0]
		}
	}
	p1, p2 := parts["u1"], parts["u2"]
	if len(parts) != 2 || !p1.T0.Equal(p2.T0) || p1.T0.Before(held[0].TAT) {
		t.Fatalf("parts %+v: want both from one X ≥ u1's calendar end %v", parts, held[0].TAT)
	}
	if p1.Ceil.Sub(p1.T0) != 60*ms || p2.Ceil.Sub(p2.T0) != 90*ms { // c + ⌈span/T⌉ units: 1 + 2 of u1, 1 + 2 of u2
		t.Fatalf("parts %+v: want 60 ms of u1 and 90 ms of u2 (the span and one job)", parts)
	}
	if k := known["u1"]; !k.TAT.Equal(p1.Ceil) {
		t.Fatalf("known u1 %+v: want its calendar end at the part's end %v", k, p1.Ceil)
	}
	if _, err := e.store.PassGranted(e.ctx, 0, PassConfig{Lead: grantLead, MinLead: -1, Grace: time.Hour, Capacity: -1}, gs); err != nil {
		t.Fatal(err)
	}
	rec := e.rdb.HGet(e.ctx, e.store.keys.upstreamAligned(0), "u1,u2").Val()
	if want := []string{us64(p1.T0), us64(p1.Ceil), us64(p2.T0), us64(p2.Ceil)}; !strings.HasSuffix(rec, strings.Join(want, " ")) {
		t.Fatalf("reservation %q: want its parts %v", rec, want)
	}
	if ttl := e.rdb.PTTL(e.ctx, e.store.keys.upstreamAligned(0)).Val(); ttl <= 0 {
		t.Fatalf("reservations' TTL %v", ttl)
	}

	if err := e.store.PauseUpstream(e.ctx, "u2", time.Time{}, "manual"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(100 * ms)
	before := e.rdb.HGet(e.ctx, e.store.UpstreamKey("u1"), "tat").Val()
	gs, err = e.store.AlignUpstreams(e.ctx, 0, nil, []quota.AlignedDemand{set}, known, quota.GrantConfig{Horizon: grantLead})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gs {
		if g.Set == "" {
			continue
		}
		if len(g.Segments) != 0 || !g.NextGrant.After(e.clock.Now()) {
			t.Fatalf("aligned grant %+v with u2 paused: want none, asked again later than now", g)
		}
	}
	if after := e.rdb.HGet(e.ctx, e.store.UpstreamKey("u1"), "tat").Val(); after != before {
		t.Fatalf("u1's calendar end moved from %s to %s with u2 paused", before, after)
	}
	if _, err := e.store.AlignUpstreams(e.ctx, 7, nil, []quota.AlignedDemand{set}, known, quota.GrantConfig{Horizon: grantLead}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("shard 7 of 2: %v, want ErrInvalid", err)
	}
	// A set naming an upstream that is not configured (deleted since its
	// jobs were enqueued): quota.ErrUpstreamNotFound and no grant for the set (the
	// dispatcher then asks again after max_sleep, not every pass).
	gone := quota.AlignedDemand{Upstreams: []string{"nope", "u1"}, Cost: 1, Span: 40 * ms, Weight: 1, Earliest: e.clock.Now()}
	gs, err = e.store.AlignUpstreams(e.ctx, 0, nil, []quota.AlignedDemand{gone}, known, quota.GrantConfig{Horizon: grantLead})
	if !errors.Is(err, quota.ErrUpstreamNotFound) || slices.ContainsFunc(gs, func(g quota.UpstreamGrant) bool { return g.Set != "" }) {
		t.Fatalf("a set naming an unknown upstream: %+v, %v; want no aligned grant and quota.ErrUpstreamNotFound", gs, err)
	}
}

// us64 is t in µs, as the scripts write it.
func us64(t time.Time) string { return strconv.FormatInt(t.UnixMicro(), 10) }
