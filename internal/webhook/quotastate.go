package webhook

import (
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/sluicehq/sluice/internal/wire"
)

// The units a Quota counts.
const (
	QuotaRequests = wire.QuotaRequests
	QuotaTokens   = wire.QuotaTokens
)

// maxQuotaCount bounds a quota's remaining and limit counts: larger values
// (or non-numbers) are not quotas a sender can pace by.
const maxQuotaCount = wire.MaxQuotaCount

// Quota is one quota an upstream reported on a response (wire.Quota, the
// form the worker hands to the finish). Pacing by it (issue #32) spreads
// Remaining over ResetIn.
type Quota = wire.Quota

// ReadQuotas returns every quota h reports at now with both a remaining
// count and a reset in the future, from these families (header names in
// any case):
//
//   - IETF RateLimit (draft-ietf-httpapi-ratelimit-headers -10: a list of
//     `"name";r=R;t=T`, the limit from RateLimit-Policy's `"name";q=Q`, the
//     unit from its `qu` parameter, "requests" when absent); the dictionary
//     form of earlier drafts (`limit=L, remaining=R, reset=T`); and
//     RateLimit-Limit / -Remaining / -Reset (delta seconds);
//   - X-RateLimit-Limit / -Remaining with -Reset-After (delta seconds) or
//     -Reset (epoch milliseconds ≥ 10¹², epoch seconds ≥ 10⁹, else delta
//     seconds), and GitHub's X-RateLimit-Resource as the name;
//   - OpenAI's X-RateLimit-{Limit,Remaining,Reset}-{Requests,Tokens}, the
//     reset a Go-style duration ("6m0s", "1.5s", "120ms");
//   - Anthropic's Anthropic-Ratelimit-{Requests,Tokens,Input-Tokens,
//     Output-Tokens}-{Limit,Remaining,Reset}, the reset an RFC 3339 time.
//
// A field that does not parse is ignored, never an error: most responses
// report nothing and ReadQuotas returns nil after one pass over the
// header's names. A list of several windows ("100, 1000") is read by its
// first.
func ReadQuotas(h http.Header, now time.Time) []Quota {
	if !hasQuotaFields(h) && !hasAnthropicFields(h) {
		return nil
	}
	var out []Quota
	add := func(q Quota, ok bool) {
		if ok && q.ResetIn > 0 {
			out = append(out, q)
		}
	}
	for _, q := range ietfQuotas(h) {
		add(q, true)
	}
	add(prefixQuota(h, "RateLimit-", now, false))
	x, ok := prefixQuota(h, "X-RateLimit-", now, true)
	x.Name = strings.TrimSpace(h.Get("X-RateLimit-Resource"))
	add(x, ok)
	for _, unit := range []string{"Requests", "Tokens"} {
		add(openAIQuota(h, unit))
	}
	for _, kind := range []string{"Requests", "Tokens", "Input-Tokens", "Output-Tokens"} {
		add(anthropicQuota(h, kind, now))
	}
	return out
}

// PaceQuota returns the tightest quota h reports at now (ReadQuotas) for
// a job of the given cost (≥ 1; the unit of a token quota), nil when h
// reports none: the one that allows the fewest such jobs per second,
// Remaining ÷ ResetIn for a requests quota and Remaining ÷ cost ÷ ResetIn
// for a tokens quota; the first of equals.
func PaceQuota(h http.Header, now time.Time, cost int64) *wire.Quota {
	qs := ReadQuotas(h, now)
	if qs == nil {
		return nil
	}
	best, bestRate := -1, math.Inf(1)
	for i, q := range qs {
		jobs := float64(q.Remaining)
		if q.Unit == QuotaTokens {
			jobs /= float64(max(cost, 1))
		}
		if r := jobs / q.ResetIn.Seconds(); r < bestRate {
			best, bestRate = i, r
		}
	}
	if best < 0 {
		return nil
	}
	return &qs[best]
}

// ietfQuotas reads the RateLimit field (a -10 list, else an earlier
// draft's dictionary) with RateLimit-Policy's limits and units.
func ietfQuotas(h http.Header) []Quota {
	values := h.Values("RateLimit")
	if len(values) == 0 {
		return nil
	}
	list, err := httpsfv.UnmarshalList(values)
	if err != nil {
		q, ok := ietfDictionary(values)
		if !ok {
			return nil
		}
		return []Quota{q}
	}
	policies := ietfPolicies(h.Values("RateLimit-Policy"))
	var out []Quota
	for _, m := range list {
		item, ok := m.(httpsfv.Item)
		if !ok {
			continue
		}
		q := Quota{Unit: QuotaRequests, Source: "RateLimit"}
		q.Name, _ = item.Value.(string)
		if q.Name == "" {
			if tok, ok := item.Value.(httpsfv.Token); ok {
				q.Name = string(tok)
			}
		}
		rem, okR := paramCount(item.Params, "r")
		reset, okT := paramNumber(item.Params, "t")
		if !okR || !okT {
			continue
		}
		q.Remaining, q.ResetIn = rem, seconds(reset)
		if p, ok := policies[q.Name]; ok {
			q.Limit, q.Unit = p.Limit, p.Unit
		}
		if q.Unit == QuotaRequests || q.Unit == QuotaTokens {
			out = append(out, q)
		}
	}
	return out
}

// ietfDictionary reads the earlier drafts' `limit=L, remaining=R, reset=T`.
func ietfDictionary(values []string) (Quota, bool) {
	dict, err := httpsfv.UnmarshalDictionary(values)
	if err != nil {
		return Quota{}, false
	}
	number := func(name string) (float64, bool) {
		m, ok := dict.Get(name)
		if !ok {
			return 0, false
		}
		item, ok := m.(httpsfv.Item)
		if !ok {
			return 0, false
		}
		return sfNumber(item.Value)
	}
	rem, okR := number("remaining")
	reset, okT := number("reset")
	if !okR || !okT {
		return Quota{}, false
	}
	q := Quota{Unit: QuotaRequests, Source: "RateLimit", Remaining: count(rem), ResetIn: seconds(reset)}
	if l, ok := number("limit"); ok {
		q.Limit = count(l)
	}
	return q, true
}

// ietfPolicy is one RateLimit-Policy item: its quota and unit.
type ietfPolicy struct {
	Limit int64
	Unit  string
}

// ietfPolicies reads RateLimit-Policy (`"name";q=Q;w=W;qu="requests"`) by
// policy name.
func ietfPolicies(values []string) map[string]ietfPolicy {
	list, err := httpsfv.UnmarshalList(values)
	if err != nil || len(values) == 0 {
		return nil
	}
	out := map[string]ietfPolicy{}
	for _, m := range list {
		item, ok := m.(httpsfv.Item)
		if !ok {
			continue
		}
		name, _ := item.Value.(string)
		if tok, ok := item.Value.(httpsfv.Token); ok {
			name = string(tok)
		}
		p := ietfPolicy{Unit: QuotaRequests}
		p.Limit, _ = paramCount(item.Params, "q")
		if qu, ok := item.Params.Get("qu"); ok {
			if s, ok := qu.(string); ok {
				p.Unit = s
			} else if tok, ok := qu.(httpsfv.Token); ok {
				p.Unit = string(tok)
			}
		}
		out[name] = p
	}
	return out
}

func paramNumber(p *httpsfv.Params, name string) (float64, bool) {
	v, ok := p.Get(name)
	if !ok {
		return 0, false
	}
	return sfNumber(v)
}

func paramCount(p *httpsfv.Params, name string) (int64, bool) {
	n, ok := paramNumber(p, name)
	if !ok || n < 0 || n > maxQuotaCount {
		return 0, false
	}
	return count(n), true
}

// prefixQuota reads <prefix>Limit, <prefix>Remaining and <prefix>Reset-After
// or <prefix>Reset (epochs read as such when epochs is set).
func prefixQuota(h http.Header, prefix string, now time.Time, epochs bool) (Quota, bool) {
	rem, ok := headerCount(h, prefix+"Remaining")
	if !ok {
		return Quota{}, false
	}
	q := Quota{Unit: QuotaRequests, Remaining: rem, Source: prefix + "Remaining"}
	if after, ok := headerNumber(h, prefix+"Reset-After"); ok {
		q.ResetIn = seconds(after)
	} else if v, ok := headerNumber(h, prefix+"Reset"); ok {
		q.ResetIn = resetDelta(v, now, epochs)
	} else {
		return Quota{}, false
	}
	q.Limit, _ = headerCount(h, prefix+"Limit")
	return q, true
}

// openAIQuota reads X-RateLimit-{Limit,Remaining,Reset}-<unit>, the reset a
// duration.
func openAIQuota(h http.Header, unit string) (Quota, bool) {
	rem, ok := headerCount(h, "X-Ratelimit-Remaining-"+unit)
	if !ok {
		return Quota{}, false
	}
	d, err := time.ParseDuration(strings.TrimSpace(h.Get("X-Ratelimit-Reset-" + unit)))
	if err != nil || d <= 0 {
		return Quota{}, false
	}
	q := Quota{Unit: strings.ToLower(unit), Remaining: rem, ResetIn: min(d, time.Duration(maxHeaderSeconds)*time.Second),
		Source: "X-Ratelimit-Remaining-" + unit}
	q.Limit, _ = headerCount(h, "X-Ratelimit-Limit-"+unit)
	return q, true
}

// anthropicQuota reads Anthropic-Ratelimit-<kind>-{Limit,Remaining,Reset},
// the reset an RFC 3339 time.
func anthropicQuota(h http.Header, kind string, now time.Time) (Quota, bool) {
	prefix := "Anthropic-Ratelimit-" + kind + "-"
	rem, ok := headerCount(h, prefix+"Remaining")
	if !ok {
		return Quota{}, false
	}
	at, err := time.Parse(time.RFC3339, strings.TrimSpace(h.Get(prefix+"Reset")))
	if err != nil || !at.After(now) {
		return Quota{}, false
	}
	unit := QuotaTokens
	if kind == "Requests" {
		unit = QuotaRequests
	}
	q := Quota{Unit: unit, Remaining: rem, ResetIn: min(at.Sub(now), time.Duration(maxHeaderSeconds)*time.Second), Source: prefix + "Remaining"}
	q.Limit, _ = headerCount(h, prefix+"Limit")
	return q, true
}

// headerCount is headerNumber as a count: 0 … maxQuotaCount, fractions
// dropped; negative or larger values are not a count.
func headerCount(h http.Header, name string) (int64, bool) {
	n, ok := headerNumber(h, name)
	if !ok || n < 0 || n > maxQuotaCount {
		return 0, false
	}
	return count(n), true
}

func count(n float64) int64 {
	if n <= 0 || math.IsNaN(n) {
		return 0
	}
	return int64(min(math.Floor(n), maxQuotaCount))
}

// hasAnthropicFields reports whether h has an Anthropic-Ratelimit-* field.
func hasAnthropicFields(h http.Header) bool {
	for k := range h {
		if hasPrefixFold(k, "anthropic-ratelimit") {
			return true
		}
	}
	return false
}
