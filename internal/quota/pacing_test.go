package quota

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/upstream"
	"github.com/sluicehq/sluice/internal/wire"
)

// putPaced configures upstream name at n per second, burst 1, pause_scope
// upstream and the given pacing.
func (e *env) putPaced(name string, n int64, pacing string) {
	e.t.Helper()
	cfg := upstream.Config{Rate: bucket.Rate{Tokens: n, Per: time.Second}, Burst: 1,
		PauseScope: upstream.ScopeUpstream, Pacing: pacing}
	if _, err := e.reg.PutUpstream(e.ctx, name, cfg, SourceAPI, ""); err != nil {
		e.t.Fatal(err)
	}
}

// answer records an answer's quota and correction, failing the test on an
// error.
func (e *env) answer(name string, q *wire.Quota, sent time.Time, delta int64) bool {
	e.t.Helper()
	ok, err := e.reg.UpstreamAnswer(e.ctx, name, q, sent, 1, delta)
	if err != nil {
		e.t.Fatal(err)
	}
	return ok
}

// grant is one shard's grant of name with wanted units of unit each over
// horizon h.
func (e *env) grant(name string, wanted, unit int64, h time.Duration) UpstreamGrant {
	e.t.Helper()
	gs, err := e.reg.GrantUpstreams(e.ctx, 0, []UpstreamDemand{{Upstream: name, Wanted: wanted, Weight: 1, Unit: unit}},
		GrantConfig{Horizon: h})
	if err != nil || len(gs) != 1 {
		e.t.Fatalf("grant %q: %v, %v", name, gs, err)
	}
	return gs[0]
}

func (e *env) runtime(name string) UpstreamRuntime {
	e.t.Helper()
	rt, err := e.reg.UpstreamRuntime(e.ctx, name)
	if err != nil {
		e.t.Fatal(err)
	}
	return rt
}

// units is the cost units of g's segments at its interval.
func units(g UpstreamGrant) int64 {
	var n int64
	for _, s := range g.Segments {
		n += int64(s.Ceil.Sub(s.T0) / g.Interval)
	}
	return n
}

// A reported quota paces the upstream's calendar: what is left over the
// time to the reset (5 % margin), never above the configured rate, nothing
// once it is used up, the configured rate again after the reset.
func TestUpstreamPacingSpreadsTheQuota(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putPaced("gh", 10, upstream.PacingHeaders) // T = 100 ms
	now := e.clock.Now()
	if !e.answer("gh", &wire.Quota{Unit: wire.QuotaRequests, Remaining: 10, Limit: 5000, ResetIn: 10 * time.Second,
		Source: "X-RateLimit-Remaining"}, now, 0) {
		t.Fatal("first report not recorded")
	}
	reset := now.Add(10 * time.Second)
	rt := e.runtime("gh")
	if rt.Quota == nil || rt.Quota.Remaining != 10 || rt.Quota.Limit != 5000 || !rt.Quota.ResetAt.Equal(reset) ||
		rt.Quota.Source != "X-RateLimit-Remaining" || rt.Quota.Unit != wire.QuotaRequests || rt.Quota.InFlight != 0 {
		t.Fatalf("runtime quota %+v", rt.Quota)
	}
	wantIV := time.Duration(math.Ceil(10e6/(10*(1-PaceMargin)))) * time.Microsecond
	if !rt.Paced || math.Abs(rt.PacedRate-1e6/float64(wantIV.Microseconds())) > 1e-9 {
		t.Fatalf("paced %v at %v/s, want %v/s", rt.Paced, rt.PacedRate, 1e6/float64(wantIV.Microseconds()))
	}

	// Ten rounds, each a second apart: about one unit each at the paced
	// interval (not ten at 100 ms), and nothing past the ten left.
	var got int64
	for i := range 10 {
		if i > 0 {
			e.clock.Advance(time.Second)
		}
		g := e.grant("gh", 100, 1, time.Second)
		if len(g.Segments) > 0 && (g.Interval < wantIV*4/5 || g.Interval > wantIV*5/4) {
			t.Fatalf("round %d: interval %v, want about %v", i, g.Interval, wantIV)
		}
		got += units(g)
	}
	if got != 10 {
		t.Fatalf("handed out %d units before the reset, want the 10 left", got)
	}
	if rt := e.runtime("gh"); rt.Quota == nil || rt.Quota.InFlight != 10 || rt.Quota.Left() != 0 || rt.PacedRate != 0 {
		t.Fatalf("at the end: %+v, paced %v at %v", rt.Quota, rt.Paced, rt.PacedRate)
	}
	e.clock.Advance(reset.Sub(e.clock.Now()))
	g := e.grant("gh", 100, 1, time.Second)
	if g.Interval != 100*ms || units(g) != 10 {
		t.Fatalf("after the reset: %d units at %v, want 10 at 100ms", units(g), g.Interval)
	}
	if rt := e.runtime("gh"); rt.Quota != nil || rt.Paced {
		t.Fatalf("after the reset the quota is shown: %+v", rt.Quota)
	}
}

// Nothing left: no segment before the reset, and the next call is not
// asked for at once.
func TestUpstreamPacingHoldsWhenUsedUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putPaced("api", 50, upstream.PacingHeaders)
	now := e.clock.Now()
	e.answer("api", &wire.Quota{Unit: wire.QuotaRequests, Remaining: 0, ResetIn: 5 * time.Second, Source: "RateLimit"}, now, 0)
	g := e.grant("api", 100, 1, time.Second)
	if len(g.Segments) != 0 || !g.NextGrant.After(now) {
		t.Fatalf("used up: %+v, want no segment and a later next grant", g)
	}
	e.clock.Advance(5 * time.Second)
	if g := e.grant("api", 100, 1, time.Second); units(g) != 50 || g.Interval != 20*ms {
		t.Fatalf("after the reset: %d units at %v, want 50 at 20ms", units(g), g.Interval)
	}
}

// The units the calendar handed out after the reporting request was sent
// count against what it reported: in flight or about to leave.
func TestUpstreamPacingCountsInFlight(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putPaced("api", 10, upstream.PacingHeaders)
	now := e.clock.Now()
	if g := e.grant("api", 100, 1, time.Second); units(g) != 10 { // TAT = now + 1 s
		t.Fatalf("unpaced: %d units, want 10", units(g))
	}
	e.clock.Advance(500 * ms)
	e.answer("api", &wire.Quota{Unit: wire.QuotaRequests, Remaining: 12, ResetIn: 10 * time.Second, Source: "RateLimit"},
		now.Add(200*ms), 0)
	if rt := e.runtime("api"); rt.Quota.InFlight != 8 || rt.Quota.Left() != 4 {
		t.Fatalf("in flight %d, left %d; want 8 sent from 200 ms (of 10 to 1 s), 4 left", rt.Quota.InFlight, rt.Quota.Left())
	}
	// An attempt of cost 3: its own units but one were counted by the
	// report.
	ok, err := e.reg.UpstreamAnswer(e.ctx, "api", &wire.Quota{Unit: wire.QuotaTokens, Remaining: 11, ResetIn: 10 * time.Second,
		Source: "x-ratelimit-remaining-tokens"}, now.Add(200*ms), 3, 0)
	if err != nil || !ok {
		t.Fatalf("answer: %v, %v", ok, err)
	}
	if rt := e.runtime("api"); rt.Quota.InFlight != 6 {
		t.Fatalf("in flight %d after an attempt of cost 3, want 8 − 2", rt.Quota.InFlight)
	}
}

// A report with more left in the same window is older news; a tokens
// quota counts the cost corrections of attempts sent after the report.
func TestUpstreamPacingNewsAndCorrections(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putPaced("llm", 1000, upstream.PacingHeaders)
	now := e.clock.Now()
	q := &wire.Quota{Unit: wire.QuotaTokens, Remaining: 5000, Limit: 10000, ResetIn: 30 * time.Second, Source: "x-ratelimit-remaining-tokens"}
	e.answer("llm", q, now, 0)
	older := *q
	older.Remaining = 6000
	if e.answer("llm", &older, now.Add(-ms), 0) {
		t.Fatal("older news recorded")
	}
	e.answer("llm", nil, now.Add(ms), 250)  // sent after the report: counts
	e.answer("llm", nil, now.Add(-ms), 900) // before: the report counted it
	if rt := e.runtime("llm"); rt.Quota.Remaining != 5000 || rt.Quota.InFlight != 250 {
		t.Fatalf("quota %+v, want remaining 5000, 250 in flight", rt.Quota)
	}
	next := *q
	next.Remaining, next.ResetIn = 10000, 90*time.Second // the next window
	if !e.answer("llm", &next, now.Add(2*ms), 0) {
		t.Fatal("the next window's report not recorded")
	}
	if rt := e.runtime("llm"); rt.Quota.Remaining != 10000 || rt.Quota.InFlight != 0 {
		t.Fatalf("quota %+v after the next window", rt.Quota)
	}

	// A unit (the largest waiting job) that no longer fits gets nothing.
	e.answer("llm", nil, now.Add(3*ms), 9900)
	if g := e.grant("llm", 5000, 300, time.Second); len(g.Segments) != 0 {
		t.Fatalf("100 tokens left, job of 300: granted %+v", g.Segments)
	}
	if g := e.grant("llm", 5000, 100, time.Second); units(g) != 100 {
		t.Fatalf("100 tokens left, job of 100: %d units granted, want 100", units(g))
	}
}

// pacing off, or pause_scope tenant, records nothing and paces nothing;
// bad answers are refused and change nothing.
func TestUpstreamPacingOffAndBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putPaced("off", 10, upstream.PacingOff)
	if _, err := e.reg.PutUpstream(e.ctx, "tenantscope", upCfg(10, 1), SourceAPI, ""); err != nil {
		t.Fatal(err)
	}
	q := &wire.Quota{Unit: wire.QuotaRequests, Remaining: 1, ResetIn: time.Hour, Source: "RateLimit"}
	for _, name := range []string{"off", "tenantscope"} {
		if e.answer(name, q, e.clock.Now(), 5) {
			t.Errorf("%s: recorded", name)
		}
		if rt := e.runtime(name); rt.Quota != nil || rt.Paced {
			t.Errorf("%s: quota %+v", name, rt.Quota)
		}
		if g := e.grant(name, 100, 1, time.Second); units(g) != 10 || g.Interval != 100*ms {
			t.Errorf("%s: %d units at %v, want 10 at 100ms", name, units(g), g.Interval)
		}
	}
	e.putPaced("on", 10, upstream.PacingHeaders)
	for _, bad := range []*wire.Quota{
		{Unit: "bytes", Remaining: 1, ResetIn: time.Second},
		{Unit: wire.QuotaRequests, Remaining: -1, ResetIn: time.Second},
		{Unit: wire.QuotaRequests, Remaining: 1},
		{Unit: wire.QuotaRequests, Remaining: 1, ResetIn: 48 * time.Hour},
	} {
		if _, err := e.reg.UpstreamAnswer(e.ctx, "on", bad, e.clock.Now(), 1, 0); !errors.Is(err, ErrInvalid) {
			t.Errorf("quota %+v: %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := e.reg.UpstreamAnswer(e.ctx, "on", nil, e.clock.Now(), 1, wire.MaxActualCost+1); !errors.Is(err, ErrInvalid) {
		t.Errorf("delta too large: %v", err)
	}
	if _, err := e.reg.UpstreamAnswer(e.ctx, "nope", q, e.clock.Now(), 1, 0); !errors.Is(err, ErrUpstreamNotFound) {
		t.Errorf("unknown upstream: %v", err)
	}
	if rt := e.runtime("on"); rt.Quota != nil {
		t.Errorf("bad answers recorded %+v", rt.Quota)
	}
}
