package bucket

import (
	"strings"
	"testing"
	"time"
)

func TestParseRateUnits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in       string
		tokens   int64
		per      time.Duration
		interval int64 // ⌈Per / Tokens⌉ µs
	}{
		{"50/s", 50, time.Second, 20_000},
		{"600/m", 600, time.Minute, 100_000},
		{"10000/h", 10_000, time.Hour, 360_000},
		{"1/d", 1, Day, 86_400_000_000},
		{"7/d", 7, Day, (86_400_000_000 + 6) / 7},
		{" 100000/d ", 100_000, Day, 864_000},
		{"1000000/s", 1_000_000, time.Second, 1},
		{"60000000/m", 60_000_000, time.Minute, 1},
	} {
		r, err := ParseRate(tc.in)
		if err != nil {
			t.Errorf("ParseRate(%q): %v", tc.in, err)
			continue
		}
		if r.Tokens != tc.tokens || r.Per != tc.per || r.IntervalMicros() != tc.interval {
			t.Errorf("ParseRate(%q) = %+v (T = %d µs), want %d per %s (T = %d µs)", tc.in, r, r.IntervalMicros(), tc.tokens, tc.per, tc.interval)
		}
		var back Rate
		if err := back.UnmarshalText([]byte(r.String())); err != nil || back != r {
			t.Errorf("%q: String %q reads back as %+v (%v)", tc.in, r.String(), back, err)
		}
		if want := strings.TrimSpace(tc.in); r.String() != want {
			t.Errorf("ParseRate(%q).String() = %q, want %q", tc.in, r.String(), want)
		}
	}
	for _, bad := range []string{"0/d", "-1/d", "1/w", "1/D", "d", "1.5/d", "1000001/s", "1000000000/s", "60000001/m"} {
		if r, err := ParseRate(bad); err == nil {
			t.Errorf("ParseRate(%q) = %+v, want an error", bad, r)
		}
	}
}

// A daily quota through the limiter: 2/d with burst 1 admits one call, then
// refuses until 12 h later, telling the wait; the key lives as long as its
// state matters (TAT − now), not one hour.
func TestGCRAAtADailyRate(t *testing.T) {
	t.Parallel()
	for _, a := range []Algorithm{GCRA, TokenBucket} {
		t.Run(string(a), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Limit{Algorithm: a, Rate: Rate{Tokens: 2, Per: Day}, Burst: 1})
			key := newKey()
			if d := f.allowAt(key, 1, at(0)); !d.Allowed {
				t.Fatalf("first call refused: %+v", d)
			}
			if ttl := f.pttl(key); ttl <= 11*time.Hour || ttl > 12*time.Hour {
				t.Fatalf("PTTL %s after the admission, want about 12 h (the refill)", ttl)
			}
			d := f.allowAt(key, 1, at(time.Hour))
			if d.Allowed || d.RetryAfter != 11*time.Hour {
				t.Fatalf("at +1h: %+v, want refused with RetryAfter 11h", d)
			}
			if d := f.allowAt(key, 1, at(12*time.Hour-time.Microsecond)); d.Allowed {
				t.Fatalf("at +12h − 1µs: allowed, want refused")
			}
			if d := f.allowAt(key, 1, at(12*time.Hour)); !d.Allowed {
				t.Fatalf("at +12h: %+v, want allowed", d)
			}
		})
	}
}
