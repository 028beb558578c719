package bucket

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/internal/redistest"
)

// shared gives a property one client, prefix and Batcher; each iteration
// builds its limiters on them (no I/O, no goroutine) and uses fresh keys.
type shared struct {
	rdb    redis.UniversalClient
	prefix string
	b      *Batcher
}

func newShared(t *testing.T) *shared {
	rdb, prefix := redistest.New(t)
	b, err := NewBatcher(rdb, BatcherConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return &shared{rdb: rdb, prefix: prefix, b: b}
}

func (s *shared) fixture(rt *rapid.T, name string, l Limit) *fixture {
	lim, err := NewLimiter(s.rdb, s.prefix, name, l, WithBatcher(s.b))
	if err != nil {
		rt.Fatalf("%v", err)
	}
	return &fixture{t: rt, rdb: s.rdb, lim: lim}
}

// event is one call on a generated timeline.
type event struct {
	at   time.Time
	cost int64
}

// drawTimeline draws 1..maxCalls calls of cost 1..maxCost on a fake clock starting
// at a present-day instant; each advances the clock by 0 (bursts), a few µs
// to a fraction of unit, a whole number of units (exact boundaries), or up
// to 3 units.
func drawTimeline(rt *rapid.T, unit time.Duration, maxCost int64, maxCalls int) []event {
	u := unit.Microseconds()
	gap := rapid.OneOf(
		rapid.Just(int64(0)),
		rapid.Int64Range(1, u/8),
		rapid.Map(rapid.Int64Range(0, 3), func(k int64) int64 { return k * u }),
		rapid.Int64Range(0, 3*u),
	)
	n := rapid.IntRange(1, maxCalls).Draw(rt, "calls")
	now := at(base)
	events := make([]event, n)
	for i := range events {
		now = now.Add(time.Duration(gap.Draw(rt, "gap µs")) * time.Microsecond)
		events[i] = event{at: now, cost: rapid.Int64Range(1, maxCost).Draw(rt, "cost")}
	}
	return events
}

// Rates whose interval is a whole number of seconds (TTLs outlive a test's
// real time between calls; the model agrees exactly).
var exactRates = []Rate{{1, time.Second}, {30, time.Minute}, {10, time.Minute}, {60, time.Hour}}

// TestPropertyBucketsBoundEveryInterval: token bucket and GCRA never admit
// more than b + Δ/T tokens in any interval of length Δ. Checked on every
// interval [t_i, t_j] between admitted calls (the densest intervals).
func TestPropertyBucketsBoundEveryInterval(t *testing.T) {
	t.Parallel()
	for _, a := range []Algorithm{TokenBucket, GCRA} {
		t.Run(string(a), func(t *testing.T) {
			t.Parallel()
			s := newShared(t)
			rapid.Check(t, func(rt *rapid.T) {
				l := Limit{Algorithm: a, Rate: rapid.SampledFrom(exactRates).Draw(rt, "rate"), Burst: rapid.Int64Range(1, 8).Draw(rt, "burst")}
				f := s.fixture(rt, "lim", l)
				key := newKey()
				var admitted []event
				for _, e := range drawTimeline(rt, time.Duration(l.Rate.IntervalMicros())*us, l.Burst, 60) {
					if d := f.allowAt(key, e.cost, e.at); d.Allowed {
						admitted = append(admitted, e)
					}
					f.checkTTL(key, len(admitted) > 0)
				}
				checkBucketBound(rt, l, admitted)
			})
		})
	}
}

func checkBucketBound(rt *rapid.T, l Limit, admitted []event) {
	T := l.Rate.IntervalMicros()
	for i := range admitted {
		var sum int64
		for j := i; j < len(admitted); j++ {
			sum += admitted[j].cost
			span := admitted[j].at.Sub(admitted[i].at).Microseconds()
			if sum*T > l.Burst*T+span { // sum > b + span/T, in integers
				rt.Fatalf("%d tokens admitted in [%v, %v] (%dµs), more than burst %d + %dµs/%dµs",
					sum, admitted[i].at.Sub(epoch), admitted[j].at.Sub(epoch), span, l.Burst, span, T)
			}
		}
	}
}

// TestPropertySlidingLogIsExact: the sliding log admits exactly when the
// tokens admitted in (now - W, now] plus cost fit the limit, with exact
// Remaining, RetryAfter and ResetAfter, and so never holds more than the
// limit in any window.
func TestPropertySlidingLogIsExact(t *testing.T) {
	t.Parallel()
	s := newShared(t)
	rapid.Check(t, func(rt *rapid.T) {
		window := rapid.SampledFrom([]time.Duration{time.Second, 2 * time.Second, 10 * time.Second}).Draw(rt, "window")
		l := Limit{Algorithm: SlidingLog, Limit: rapid.Int64Range(1, 8).Draw(rt, "limit"), Window: window}
		f := s.fixture(rt, "lim", l)
		key := newKey()
		var tokens []time.Time // one per admitted token, in order
		for _, e := range drawTimeline(rt, window/4, l.Limit, 60) {
			want := logModel(l, tokens, e)
			if got := f.allowAt(key, e.cost, e.at); got != want {
				rt.Fatalf("at %v cost %d with %d tokens logged: got %+v, model %+v", e.at.Sub(epoch), e.cost, len(tokens), got, want)
			}
			if want.Allowed {
				for range e.cost {
					tokens = append(tokens, e.at)
				}
			}
			f.checkTTL(key, len(tokens) > 0)
		}
		for j, tj := range tokens { // never more than the limit in any window
			n := 0
			for _, ti := range tokens[:j+1] {
				if ti.After(tj.Add(-window)) {
					n++
				}
			}
			if int64(n) > l.Limit {
				rt.Fatalf("%d tokens in the window ending %v, limit %d", n, tj.Sub(epoch), l.Limit)
			}
		}
	})
}

// logModel is the exact sliding log: tokens holds every admitted token's time.
func logModel(l Limit, tokens []time.Time, e event) Decision {
	var in []time.Time // tokens in (at - W, at], oldest first
	for _, tk := range tokens {
		if tk.After(e.at.Add(-l.Window)) {
			in = append(in, tk)
		}
	}
	n := int64(len(in))
	if n+e.cost <= l.Limit {
		return Decision{Allowed: true, Limit: l.Limit, Remaining: l.Limit - n - e.cost, ResetAfter: l.Window}
	}
	leave := in[n+e.cost-l.Limit-1] // the last token that must leave first
	return Decision{
		Limit:      l.Limit,
		Remaining:  l.Limit - n,
		RetryAfter: leave.Add(l.Window).Sub(e.at),
		ResetAfter: in[n-1].Add(l.Window).Sub(e.at),
	}
}

// drawLimit draws a limit of algorithm a with capacity 1..8: windows of
// 1s, 2s or 10s, or an exact rate.
func drawLimit(rt *rapid.T, a Algorithm) Limit {
	capacity := rapid.Int64Range(1, 8).Draw(rt, "capacity")
	if a.Windowed() {
		w := rapid.SampledFrom([]time.Duration{time.Second, 2 * time.Second, 10 * time.Second}).Draw(rt, "window")
		return Limit{Algorithm: a, Limit: capacity, Window: w}
	}
	return Limit{Algorithm: a, Rate: rapid.SampledFrom(exactRates).Draw(rt, "rate"), Burst: capacity}
}

// refill is how long a limit takes to refill from empty.
func refill(l Limit) time.Duration {
	if l.Algorithm.Windowed() {
		return l.Window
	}
	return time.Duration(l.Burst*l.Rate.IntervalMicros()) * time.Microsecond
}

// TestPropertyRetryAndResetAreExact, for every algorithm on random
// timelines: after each refusal the same cost is refused 1µs before
// RetryAfter and admitted at RetryAfter; after each decision full capacity
// is refused 1µs before ResetAfter and admitted at ResetAfter. Probes run
// on copies of the key (COPY), so the timeline itself is undisturbed.
func TestPropertyRetryAndResetAreExact(t *testing.T) {
	t.Parallel()
	for _, a := range Algorithms {
		t.Run(string(a), func(t *testing.T) {
			t.Parallel()
			s := newShared(t)
			rapid.Check(t, func(rt *rapid.T) {
				l := drawLimit(rt, a)
				f := s.fixture(rt, "lim", l)
				key := newKey()
				written := false
				for _, e := range drawTimeline(rt, refill(l)/4, l.Capacity(), 25) {
					d := f.allowAt(key, e.cost, e.at)
					written = written || d.Allowed
					f.checkTTL(key, written)
					if !d.Allowed {
						f.probe(key, e.cost, e.at.Add(d.RetryAfter-us), false, "RetryAfter - 1µs")
						f.probe(key, e.cost, e.at.Add(d.RetryAfter), true, "RetryAfter")
					}
					if d.ResetAfter <= 0 {
						rt.Fatalf("at %v: ResetAfter %v after a decision, want > 0", e.at.Sub(epoch), d.ResetAfter)
					}
					f.probe(key, l.Capacity(), e.at.Add(d.ResetAfter-us), false, "ResetAfter - 1µs")
					f.probe(key, l.Capacity(), e.at.Add(d.ResetAfter), true, "ResetAfter")
				}
			})
		})
	}
}

// probe copies key's state to a fresh key (left to expire) and checks the
// decision for cost at when there.
func (f *fixture) probe(key string, cost int64, when time.Time, want bool, what string) {
	f.t.Helper()
	probe := newKey()
	ctx := context.Background()
	if err := f.rdb.Copy(ctx, f.redisKey(key), f.redisKey(probe), 0, false).Err(); err != nil {
		f.t.Fatalf("copy: %v", err)
	}
	if d := f.allowAt(probe, cost, when); d.Allowed != want {
		f.t.Fatalf("cost %d at %s (%v): %+v, want allowed %v", cost, what, when.Sub(epoch), d, want)
	}
}
