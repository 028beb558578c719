package bucket

import (
	"math"
	"testing"
	"time"

	"golang.org/x/time/rate"
	"pgregory.net/rapid"
)

// TestDifferentialBucketsAgreeWithXTimeRate: token bucket (capacity b, rate
// r) and GCRA (burst b, rate r) return identical decisions on the same
// timeline, and both admit exactly when golang.org/x/time/rate's
// NewLimiter(Every(T), b).AllowN at the same times does.
//
// The model computes in float64 seconds; our scripts in integer µs. On a µs
// timeline with T a whole number of seconds the two agree exactly on
// admission (x/time/rate truncates its wait to whole ns, which absorbs its
// ~1e-15 rounding error; a real shortfall is ≥ 1µs/T tokens). Remaining is
// compared with floor(model tokens + 1e-9), the only tolerance.
func TestDifferentialBucketsAgreeWithXTimeRate(t *testing.T) {
	t.Parallel()
	s := newShared(t)
	rapid.Check(t, func(rt *rapid.T) {
		r := rapid.SampledFrom(exactRates).Draw(rt, "rate")
		burst := rapid.Int64Range(1, 8).Draw(rt, "burst")
		tb := s.fixture(rt, "tb", Limit{Algorithm: TokenBucket, Rate: r, Burst: burst})
		gcra := s.fixture(rt, "gcra", Limit{Algorithm: GCRA, Rate: r, Burst: burst})
		T := time.Duration(r.IntervalMicros()) * time.Microsecond
		model := rate.NewLimiter(rate.Every(T), int(burst))
		key := newKey()
		for i, e := range drawTimeline(rt, T, burst, 60) {
			dt := tb.allowAt(key, e.cost, e.at)
			dg := gcra.allowAt(key, e.cost, e.at)
			if dt != dg {
				rt.Fatalf("call %d at %v cost %d: token bucket %+v, GCRA %+v", i, e.at.Sub(epoch), e.cost, dt, dg)
			}
			allowed := model.AllowN(e.at, int(e.cost))
			tokens := int64(math.Floor(model.TokensAt(e.at) + 1e-9))
			if dt.Allowed != allowed || dt.Remaining != tokens {
				rt.Fatalf("call %d at %v cost %d: %+v, x/time/rate allowed %v with %d tokens left",
					i, e.at.Sub(epoch), e.cost, dt, allowed, tokens)
			}
		}
	})
}
