package bucket

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Applied is one limit that took part in answering a request, with its
// decision. Name is the policy name shown to clients ("api", "admit", a
// limit's name).
type Applied struct {
	Name     string
	Limit    Limit
	Decision Decision
}

// Header names written by WriteHeaders.
const (
	HeaderLimit      = "X-RateLimit-Limit"
	HeaderRemaining  = "X-RateLimit-Remaining"
	HeaderReset      = "X-RateLimit-Reset"
	HeaderRetryAfter = "Retry-After"
	HeaderPolicy     = "RateLimit-Policy"
	HeaderRateLimit  = "RateLimit"
)

// WriteHeaders sets the rate-limit headers for every limit that applied:
//
//   - RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers-10,
//     RFC 9651 lists), one member per applied limit, in the given order:
//     `"name";q=<limit>;w=<seconds>` and `"name";r=<remaining>;t=<seconds>`.
//     On an allowed decision t is the seconds until the limit is full again
//     (window reset); on a refused one t is the Retry-After of that limit.
//     Either is capped at w (see tSeconds): t never exceeds the window.
//   - X-RateLimit-Limit, -Remaining and -Reset (delta seconds, the same t)
//     for the most restrictive limit (see MostRestrictive).
//   - Retry-After (delay-seconds, at least 1) when any limit refused: the
//     largest of the refusing limits' waits, uncapped, so it never points
//     earlier than any t.
//
// Seconds are rounded up. WriteHeaders does nothing when applied is empty.
func WriteHeaders(h http.Header, applied []Applied) {
	if len(applied) == 0 {
		return
	}
	policies := make([]string, 0, len(applied))
	states := make([]string, 0, len(applied))
	for _, a := range applied {
		name := sfString(a.Name)
		policies = append(policies, name+";q="+itoa(a.Decision.Limit)+";w="+itoa(ceilSeconds(a.Limit.PolicyWindow())))
		states = append(states, name+";r="+itoa(a.Decision.Remaining)+";t="+itoa(tSeconds(a)))
	}
	h.Set(HeaderPolicy, strings.Join(policies, ", "))
	h.Set(HeaderRateLimit, strings.Join(states, ", "))

	m := applied[MostRestrictive(applied)]
	h.Set(HeaderLimit, itoa(m.Decision.Limit))
	h.Set(HeaderRemaining, itoa(m.Decision.Remaining))
	h.Set(HeaderReset, itoa(tSeconds(m)))
	if s := RetryAfterSeconds(applied); s > 0 {
		h.Set(HeaderRetryAfter, itoa(s))
	}
}

// RetryAfterSeconds is the Retry-After to send: the largest wait, in whole
// seconds rounded up and at least 1, among the refused decisions; 0 when
// every decision allowed.
func RetryAfterSeconds(applied []Applied) int64 {
	var s int64
	for _, a := range applied {
		if !a.Decision.Allowed {
			s = max(s, waitSeconds(a.Decision))
		}
	}
	return s
}

// MostRestrictive returns the index of the limit a client should heed: a
// refusing limit with the longest wait if any refused, otherwise the one with
// the fewest tokens remaining (ties: the one that takes longer to reset).
func MostRestrictive(applied []Applied) int {
	best := 0
	for i := 1; i < len(applied); i++ {
		if moreRestrictive(applied[i].Decision, applied[best].Decision) {
			best = i
		}
	}
	return best
}

func moreRestrictive(a, b Decision) bool {
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	if !a.Allowed {
		return a.RetryAfter > b.RetryAfter
	}
	if a.Remaining != b.Remaining {
		return a.Remaining < b.Remaining
	}
	return a.ResetAfter > b.ResetAfter
}

// tSeconds is a's t parameter: waitSeconds, capped at w (the policy window
// in whole seconds, ≥ 1). A sliding window counter's reset (its weighted
// count back to 0) is up to two windows away, and its wait for a large cost
// can be too; but some quota comes back within one window of any use, which
// is what t announces (draft-10: "until additional quota is made
// available"). Retry-After keeps the uncapped wait.
func tSeconds(a Applied) int64 {
	return min(waitSeconds(a.Decision), ceilSeconds(a.Limit.PolicyWindow()))
}

// waitSeconds is Retry-After (≥ 1) when refused, seconds until reset when
// allowed; whole seconds rounded up.
func waitSeconds(d Decision) int64 {
	if !d.Allowed {
		return max(ceilSeconds(d.RetryAfter), 1)
	}
	return ceilSeconds(d.ResetAfter)
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// sfString serialises s as an RFC 9651 sf-string. Characters outside
// printable ASCII are replaced by '?', since sf-strings cannot carry them.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
