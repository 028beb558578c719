package webhook

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dunglas/httpsfv"
)

// QuotaPause returns how long a successful response says to wait before the
// next request because the upstream's quota is spent, or 0. It reads, at
// now, and returns the longest of:
//
//   - RateLimit (draft-ietf-httpapi-ratelimit-headers -10, a structured
//     list: `"name";r=0;t=30`): every item with r ≤ 0 and t > 0 gives t
//     seconds; the dictionary form of earlier drafts
//     (`limit=100, remaining=0, reset=30`) likewise;
//   - RateLimit-Remaining ≤ 0 with RateLimit-Reset (earlier drafts, delta
//     seconds);
//   - X-RateLimit-Remaining ≤ 0 with X-RateLimit-Reset-After (delta
//     seconds) or X-RateLimit-Reset, read as epoch milliseconds when ≥ 10¹²,
//     epoch seconds when ≥ 10⁹ (GitHub's convention; a reset just past then
//     gives 0, not 31 years), else delta seconds (fractions allowed).
//
// A spent quota without a usable reset, or with a reset already past,
// gives 0: there is nothing to wait for.
func QuotaPause(h http.Header, now time.Time) time.Duration {
	return quotaReset(h, now, true)
}

// quotaReset is QuotaPause; with exhaustedOnly false (a 429 without
// Retry-After) an entry whose remaining count is absent counts as spent.
func quotaReset(h http.Header, now time.Time, exhaustedOnly bool) time.Duration {
	if !hasQuotaFields(h) {
		return 0
	}
	var best time.Duration
	take := func(remaining float64, haveRemaining bool, reset time.Duration) {
		spent := (haveRemaining && remaining <= 0) || (!haveRemaining && !exhaustedOnly)
		if spent && reset > best {
			best = reset
		}
	}
	for _, e := range structuredRateLimit(h.Values("RateLimit")) {
		take(e.remaining, e.haveRemaining, e.reset)
	}
	for _, prefix := range []string{"RateLimit-", "X-RateLimit-"} {
		rem, haveRem := headerNumber(h, prefix+"Remaining")
		var reset time.Duration
		if after, ok := headerNumber(h, prefix+"Reset-After"); ok {
			reset = seconds(after)
		} else if v, ok := headerNumber(h, prefix+"Reset"); ok {
			reset = resetDelta(v, now, prefix == "X-RateLimit-")
		}
		take(rem, haveRem, reset)
	}
	return best
}

// rateLimitEntry is one quota a RateLimit field reports.
type rateLimitEntry struct {
	remaining     float64
	haveRemaining bool
	reset         time.Duration
}

// structuredRateLimit parses RateLimit as a draft -10 list, else as the
// dictionary of drafts -07 and earlier; a malformed field yields nothing.
func structuredRateLimit(values []string) []rateLimitEntry {
	if len(values) == 0 {
		return nil
	}
	if list, err := httpsfv.UnmarshalList(values); err == nil {
		var out []rateLimitEntry
		for _, m := range list {
			item, ok := m.(httpsfv.Item)
			if !ok {
				continue
			}
			var e rateLimitEntry
			if r, ok := item.Params.Get("r"); ok {
				e.remaining, e.haveRemaining = sfNumber(r)
			}
			if t, ok := item.Params.Get("t"); ok {
				if sec, ok := sfNumber(t); ok {
					e.reset = seconds(sec)
				}
			}
			out = append(out, e)
		}
		return out
	}
	dict, err := httpsfv.UnmarshalDictionary(values)
	if err != nil {
		return nil
	}
	var e rateLimitEntry
	if m, ok := dict.Get("remaining"); ok {
		if item, ok := m.(httpsfv.Item); ok {
			e.remaining, e.haveRemaining = sfNumber(item.Value)
		}
	}
	if m, ok := dict.Get("reset"); ok {
		if item, ok := m.(httpsfv.Item); ok {
			if sec, ok := sfNumber(item.Value); ok {
				e.reset = seconds(sec)
			}
		}
	}
	return []rateLimitEntry{e}
}

// sfNumber reads a structured-field integer or decimal.
func sfNumber(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

// hasQuotaFields reports whether h has a field quotaReset reads (RateLimit,
// RateLimit-*, X-RateLimit-*, in any case): most responses have none, and
// one pass over their few fields spares the seven lookups and parses (4 %
// of the worker's CPU in the throughput benchmark, every success read
// them).
func hasQuotaFields(h http.Header) bool {
	for k := range h {
		if hasPrefixFold(k, "ratelimit") || hasPrefixFold(k, "x-ratelimit") {
			return true
		}
	}
	return false
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// headerNumber reads the first number of a header (up to a comma), as sent
// by servers that list several windows.
func headerNumber(h http.Header, name string) (float64, bool) {
	v := h.Get(name)
	if i := strings.IndexByte(v, ','); i >= 0 {
		v = v[:i]
	}
	v = strings.TrimSpace(v)
	if v == "" { // absent: most responses send none of the names asked (no error to build)
		return 0, false
	}
	n, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(n) || math.IsInf(n, 0) {
		return 0, false
	}
	return n, true
}

// resetDelta turns a reset value into a delta from now: with epochs allowed,
// ≥ 10¹² is epoch milliseconds and ≥ 10⁹ epoch seconds; otherwise delta
// seconds. Like every header delay it is clamped to 0 … maxHeaderSeconds.
func resetDelta(v float64, now time.Time, epochs bool) time.Duration {
	var d time.Duration
	switch {
	case epochs && v >= 1e12:
		d = time.UnixMilli(int64(min(v, 1e18))).Sub(now) // 10¹⁸ ms: far past any clamp, exact as an int64
	case epochs && v >= 1e9:
		sec, frac := math.Modf(v)
		d = time.Unix(int64(sec), int64(frac*1e9)).Sub(now)
	default:
		return seconds(v)
	}
	return min(max(d, 0), time.Duration(maxHeaderSeconds)*time.Second)
}

// seconds converts a non-negative number of seconds to a Duration, clamped
// to maxHeaderSeconds; negative is 0.
func seconds(s float64) time.Duration {
	if s <= 0 || math.IsNaN(s) {
		return 0
	}
	return time.Duration(min(s, maxHeaderSeconds) * float64(time.Second))
}
