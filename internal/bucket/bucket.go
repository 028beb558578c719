// Package bucket holds Sluice's rate algorithms — fixed window, sliding log,
// sliding window counter, token bucket and GCRA — each an atomic Redis script
// behind one contract, plus the formatting of rate-limit response headers.
//
// All arithmetic is in integer microseconds. The clock is Redis TIME, read
// inside the script, so every host shares one clock; tests pass a fake now
// through the same script argument (see Limiter.AllowAt).
//
// A Batcher coalesces concurrent decisions into pipelined round trips. Each
// limiter key is one Redis key, <prefix>:rl:{<name>:<key>}, whose braces
// make it its own Cluster slot.
package bucket

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Algorithm names a rate algorithm. The names are the config contract.
type Algorithm string

// The algorithms.
const (
	FixedWindow   Algorithm = "fixed_window"   // counter per window; up to 2x limit across a boundary
	SlidingLog    Algorithm = "sliding_log"    // exact: one entry per admitted token in the last window
	SlidingWindow Algorithm = "sliding_window" // current + previous window weighted by overlap
	TokenBucket   Algorithm = "token_bucket"   // capacity burst, refill rate
	GCRA          Algorithm = "gcra"           // leaky bucket as a meter: emission interval, burst tolerance
)

// Algorithms lists every algorithm, in a stable order.
var Algorithms = []Algorithm{FixedWindow, SlidingLog, SlidingWindow, TokenBucket, GCRA}

// Windowed reports whether a takes limit + window (otherwise rate + burst).
func (a Algorithm) Windowed() bool {
	return a == FixedWindow || a == SlidingLog || a == SlidingWindow
}

// Valid reports whether a is one of Algorithms.
func (a Algorithm) Valid() bool {
	for _, x := range Algorithms {
		if a == x {
			return true
		}
	}
	return false
}

// Rate is Tokens per Per, written "50/s", "600/m", "10000/h" or "1000/d".
// The zero Rate is invalid.
type Rate struct {
	Tokens int64
	Per    time.Duration // time.Second, time.Minute, time.Hour or Day
}

// Day is the period of an "N/d" rate: 24 hours of the clock, no calendar
// (a daily quota of N is N tokens per rolling 86 400 s, T = ⌈Day / N⌉).
const Day = 24 * time.Hour

// ParseRate parses "N/s", "N/m", "N/h" or "N/d" with N a positive integer.
func ParseRate(s string) (Rate, error) {
	n, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return Rate{}, fmt.Errorf("rate %q: want N/s, N/m, N/h or N/d", s)
	}
	var per time.Duration
	switch unit {
	case "s":
		per = time.Second
	case "m":
		per = time.Minute
	case "h":
		per = time.Hour
	case "d":
		per = Day
	default:
		return Rate{}, fmt.Errorf("rate %q: unit %q is not s, m, h or d", s, unit)
	}
	tokens, err := strconv.ParseInt(n, 10, 64)
	if err != nil || tokens <= 0 {
		return Rate{}, fmt.Errorf("rate %q: %q is not a positive integer", s, n)
	}
	r := Rate{Tokens: tokens, Per: per}
	if r.TooFast() {
		return Rate{}, fmt.Errorf("rate %q: above the maximum %s (one token per microsecond)", s, MaxRate)
	}
	if tokens > MaxRateTokens {
		return Rate{}, fmt.Errorf("rate %q: at most %d tokens a period", s, MaxRateTokens)
	}
	return r, nil
}

// MaxRateTokens bounds N in a rate "N/unit", whatever the unit (the
// scripts' integer arithmetic relies on it).
const MaxRateTokens = 1_000_000_000

// MaxRate is the fastest rate a limiter or the store keeps: one token per
// microsecond, the smallest emission interval. ParseRate refuses a faster
// one rather than run it at MaxRate.
var MaxRate = Rate{Tokens: 1_000_000, Per: time.Second}

// TooFast reports whether r is faster than MaxRate (IntervalMicros would
// round it to 1 µs, running it slower than it says).
func (r Rate) TooFast() bool { return r.Tokens > 0 && r.Tokens > r.Per.Microseconds() }

// IntervalMicros is the emission interval T = ⌈Per / Tokens⌉ in whole
// microseconds, at least 1 for a valid rate.
func (r Rate) IntervalMicros() int64 {
	if r.Tokens <= 0 {
		return 0
	}
	per := r.Per.Microseconds()
	return (per + r.Tokens - 1) / r.Tokens
}

// PerSecond is the rate as a float, for display and metrics only.
func (r Rate) PerSecond() float64 {
	if r.Per <= 0 {
		return 0
	}
	return float64(r.Tokens) / r.Per.Seconds()
}

// IsZero reports whether r is the zero Rate.
func (r Rate) IsZero() bool { return r == Rate{} }

// String formats r as ParseRate reads it.
func (r Rate) String() string {
	unit := "s"
	switch r.Per {
	case time.Minute:
		unit = "m"
	case time.Hour:
		unit = "h"
	case Day:
		unit = "d"
	}
	return strconv.FormatInt(r.Tokens, 10) + "/" + unit
}

// MarshalText implements encoding.TextMarshaler.
func (r Rate) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (r *Rate) UnmarshalText(b []byte) error {
	v, err := ParseRate(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// Limit is one limit's parameters. Window algorithms use Limit and Window;
// bucket algorithms (token bucket, GCRA) use Rate and Burst.
type Limit struct {
	Algorithm Algorithm
	Limit     int64         // tokens per window (window algorithms)
	Window    time.Duration // window length, whole microseconds, ≥ 1ms (window algorithms)
	Rate      Rate          // refill / emission rate (bucket algorithms)
	Burst     int64         // capacity / burst tolerance in tokens, ≥ 1 (bucket algorithms)
}

// Capacity is the most tokens one decision can ever admit: Limit for window
// algorithms, Burst for bucket ones. A cost above it is refused with
// ErrCostExceedsCapacity.
func (l Limit) Capacity() int64 {
	if l.Algorithm.Windowed() {
		return l.Limit
	}
	return l.Burst
}

// PolicyWindow is the w of the RateLimit-Policy header: the window for window
// algorithms, ⌈Burst / rate⌉ seconds (at least 1s) for bucket ones.
func (l Limit) PolicyWindow() time.Duration {
	if l.Algorithm.Windowed() {
		return l.Window
	}
	fill := time.Duration(l.Burst) * time.Duration(l.Rate.IntervalMicros()) * time.Microsecond
	secs := int64(math.Ceil(fill.Seconds()))
	return time.Duration(max(secs, 1)) * time.Second
}

// Validate reports every problem with l at once.
func (l Limit) Validate() error {
	var errs []error
	switch {
	case !l.Algorithm.Valid():
		errs = append(errs, fmt.Errorf("algorithm %q is not one of %v", l.Algorithm, Algorithms))
	case l.Algorithm.Windowed():
		if l.Limit < 1 {
			errs = append(errs, fmt.Errorf("limit must be at least 1, got %d", l.Limit))
		}
		if l.Window < time.Millisecond || l.Window%time.Microsecond != 0 {
			errs = append(errs, fmt.Errorf("window must be at least 1ms in whole microseconds, got %s", l.Window))
		}
		if !l.Rate.IsZero() || l.Burst != 0 {
			errs = append(errs, fmt.Errorf("%s takes limit and window, not rate and burst", l.Algorithm))
		}
	default:
		if l.Rate.IntervalMicros() < 1 {
			errs = append(errs, fmt.Errorf("rate must be set (N/s, N/m, N/h or N/d)"))
		} else if l.Rate.TooFast() {
			errs = append(errs, fmt.Errorf("rate must be at most %s, got %s", MaxRate, l.Rate))
		}
		if l.Burst < 1 {
			errs = append(errs, fmt.Errorf("burst must be at least 1, got %d", l.Burst))
		}
		if l.Limit != 0 || l.Window != 0 {
			errs = append(errs, fmt.Errorf("%s takes rate and burst, not limit and window", l.Algorithm))
		}
	}
	return errors.Join(errs...)
}

// Decision is the outcome of one Allow call.
type Decision struct {
	Allowed bool
	// Limit is the q of RateLimit-Policy: the window's limit or the bucket's capacity.
	Limit int64
	// Remaining is the tokens still admissible right after this decision (≥ 0).
	Remaining int64
	// RetryAfter is, when refused, the time until cost tokens can be admitted
	// (> 0); 0 when allowed.
	RetryAfter time.Duration
	// ResetAfter is the time until the limiter is back to full capacity
	// (bucket algorithms) or the current window ends (window algorithms: the
	// fixed window's end; for the sliding log, when its newest token leaves
	// the window; for the sliding window counter, when the weighted count
	// reaches 0 — in every case, when full capacity is admissible again).
	ResetAfter time.Duration
}

// Errors returned by Allow, to be tested with errors.Is.
var (
	// ErrCostExceedsCapacity: the cost can never be admitted (cost > capacity).
	ErrCostExceedsCapacity = errors.New("cost exceeds the limit's capacity")
	// ErrInvalidCost: cost < 1.
	ErrInvalidCost = errors.New("cost must be at least 1")
	// ErrInvalidKey: the key is empty or too long.
	ErrInvalidKey = errors.New("invalid limiter key")
)

// MaxKeyLen bounds a limiter key, so one caller cannot make Redis keys of any
// size. It leaves room for the API's check keys: an API key's name (at most
// 64 bytes), ':' and the caller's key (at most 256 bytes).
const MaxKeyLen = 512
