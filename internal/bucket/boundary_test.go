package bucket

import (
	"testing"
	"time"
)

// TestBoundaryBurst shows the fixed window's weakness and that the sliding
// log and GCRA do not share it: 10 calls 1s before a window boundary and 10
// at the boundary. A fixed window of 10 per 10s admits all 20 (2x the limit
// within 1s); a sliding log with the same limit and window admits 10; GCRA
// and the token bucket with the equivalent rate (1/s) and burst (10) admit
// b + r·Δ = 11; the sliding window counter admits 10.
func TestBoundaryBurst(t *testing.T) {
	t.Parallel()
	windowed := func(a Algorithm) Limit { return Limit{Algorithm: a, Limit: 10, Window: 10 * time.Second} }
	bucket := func(a Algorithm) Limit { return Limit{Algorithm: a, Rate: Rate{1, time.Second}, Burst: 10} }
	cases := []struct {
		limit Limit
		want  int
	}{
		{windowed(FixedWindow), 20},
		{windowed(SlidingLog), 10},
		{windowed(SlidingWindow), 10},
		{bucket(GCRA), 11},
		{bucket(TokenBucket), 11},
	}
	for _, c := range cases {
		t.Run(string(c.limit.Algorithm), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, c.limit)
			key := newKey()
			admitted := 0
			for _, when := range []time.Duration{9 * time.Second, 10 * time.Second} { // epoch is window-aligned
				for range 10 {
					if f.allowAt(key, 1, at(when)).Allowed {
						admitted++
					}
				}
			}
			if admitted != c.want {
				t.Fatalf("admitted %d of 20 calls across the boundary within 1s, want %d", admitted, c.want)
			}
		})
	}
}
