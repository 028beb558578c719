package bucket

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
)

// FuzzWriteHeaders writes the rate-limit headers for two limits with
// fuzzed names and decisions (within what the limiters return) and asserts:
// RateLimit-Policy and RateLimit parse as RFC 9651 lists of one item per
// limit, named by the limit's name (non-printable characters as '?'), with
// q, w, r and t as the decisions say; t never exceeds w; X-RateLimit-* are
// the most restrictive limit's; Retry-After is sent exactly when a limit
// refused, at least 1 and never below a refusing limit's t.
func FuzzWriteHeaders(f *testing.F) {
	f.Add("api", "admit", true, false, int64(1000), int64(999), int64(0), int64(60_000_000), int64(0), int64(5_000_000), uint8(0))
	f.Add(`we"ird\name`, "é\x00", false, false, int64(5), int64(0), int64(2_500_001), int64(1), int64(1), int64(3_600_000_000), uint8(3))
	f.Add("", "x", false, true, int64(1), int64(0), int64(1<<40), int64(0), int64(1<<40), int64(1<<40), uint8(4))
	f.Fuzz(func(t *testing.T, name1, name2 string, allowed1, allowed2 bool, limit, remaining, retryUS, resetUS, wait2US, window2US int64, algo uint8) {
		const maxUS = 1e13 // the longest interval a limiter computes (10¹³ µs)
		clampUS := func(v int64) time.Duration { return time.Duration(min(max(v, 0), maxUS)) * time.Microsecond }
		limit = min(max(limit, 1), 1_000_000_000)
		remaining = min(max(remaining, 0), limit)
		d1 := Decision{Allowed: allowed1, Limit: limit, Remaining: remaining, ResetAfter: clampUS(resetUS)}
		if !allowed1 {
			d1.RetryAfter, d1.Remaining = max(clampUS(retryUS), time.Microsecond), 0
		}
		d2 := Decision{Allowed: allowed2, Limit: 1, ResetAfter: clampUS(wait2US)}
		if !allowed2 {
			d2.RetryAfter = max(clampUS(wait2US), time.Microsecond)
		}
		l1 := Limit{Algorithm: SlidingWindow, Limit: limit, Window: max(clampUS(window2US), time.Millisecond).Truncate(time.Microsecond)}
		l2 := Limit{Algorithm: GCRA, Rate: Rate{Tokens: 1 + int64(algo), Per: time.Minute}, Burst: 1}
		applied := []Applied{{Name: name1, Limit: l1, Decision: d1}, {Name: name2, Limit: l2, Decision: d2}}
		h := http.Header{}
		WriteHeaders(h, applied)

		policies, err := httpsfv.UnmarshalList(h.Values(HeaderPolicy))
		if err != nil || len(policies) != 2 {
			t.Fatalf("RateLimit-Policy %q: %v, %d members", h.Get(HeaderPolicy), err, len(policies))
		}
		states, err := httpsfv.UnmarshalList(h.Values(HeaderRateLimit))
		if err != nil || len(states) != 2 {
			t.Fatalf("RateLimit %q: %v, %d members", h.Get(HeaderRateLimit), err, len(states))
		}
		var refusedT int64
		for i, a := range applied {
			w := param(t, policies[i], a.Name, "w")
			q := param(t, policies[i], a.Name, "q")
			r := param(t, states[i], a.Name, "r")
			tt := param(t, states[i], a.Name, "t")
			if q != a.Decision.Limit || r != a.Decision.Remaining || w < 1 || tt < 0 || tt > w {
				t.Fatalf("limit %d: q=%d r=%d w=%d t=%d for %+v", i, q, r, w, tt, a)
			}
			if !a.Decision.Allowed {
				refusedT = max(refusedT, tt)
			}
		}
		m := applied[MostRestrictive(applied)]
		if h.Get(HeaderLimit) != strconv.FormatInt(m.Decision.Limit, 10) ||
			h.Get(HeaderRemaining) != strconv.FormatInt(m.Decision.Remaining, 10) {
			t.Fatalf("X-RateLimit-* %v are not the most restrictive limit's %+v", h, m)
		}
		ra := h.Get(HeaderRetryAfter)
		switch {
		case allowed1 && allowed2 && ra != "":
			t.Fatalf("Retry-After %q with every limit allowing", ra)
		case !(allowed1 && allowed2):
			s, err := strconv.ParseInt(ra, 10, 64)
			if err != nil || s < 1 || s < refusedT {
				t.Fatalf("Retry-After %q: %v; a refusing limit's t is %d", ra, err, refusedT)
			}
		}
	})
}

// param reads integer parameter key of a list member that must be the
// sf-string of name (non-printable characters as '?').
func param(t *testing.T, m httpsfv.Member, name, key string) int64 {
	t.Helper()
	item, ok := m.(httpsfv.Item)
	if !ok {
		t.Fatalf("member %v is not an item", m)
	}
	want := strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return '?'
		}
		return r
	}, name)
	if got, ok := item.Value.(string); !ok || got != want {
		t.Fatalf("member names %q, want %q", item.Value, want)
	}
	v, ok := item.Params.Get(key)
	n, isInt := v.(int64)
	if !ok || !isInt {
		t.Fatalf("member %q has %s=%v, want an integer", want, key, v)
	}
	return n
}
