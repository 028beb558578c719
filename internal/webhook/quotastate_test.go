package webhook

import (
	"net/http"
	"slices"
	"testing"
	"time"
)

// quotaNow is the instant the quota tests read headers at.
var quotaNow = time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)

func TestReadQuotas(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		header map[string]string
		want   []Quota
	}{
		{"nothing", map[string]string{"Content-Type": "text/plain"}, nil},
		{"IETF -10 with its policy", map[string]string{
			"RateLimit-Policy": `"burst";q=100;w=60, "day";q=1000;w=86400`, "RateLimit": `"burst";r=40;t=12, "day";r=700;t=3600`},
			[]Quota{{Unit: QuotaRequests, Remaining: 40, Limit: 100, ResetIn: 12 * time.Second, Source: "RateLimit", Name: "burst"},
				{Unit: QuotaRequests, Remaining: 700, Limit: 1000, ResetIn: time.Hour, Source: "RateLimit", Name: "day"}}},
		{"IETF: a unit other than requests or tokens is left out", map[string]string{
			"RateLimit-Policy": `"b";q=1000;w=1;qu="content-bytes"`, "RateLimit": `"b";r=10;t=1`}, nil},
		{"IETF without a policy", map[string]string{"RateLimit": `"x";r=3;t=1.5`},
			[]Quota{{Unit: QuotaRequests, Remaining: 3, ResetIn: 1500 * time.Millisecond, Source: "RateLimit", Name: "x"}}},
		{"IETF earlier dictionary", map[string]string{"RateLimit": `limit=100, remaining=50, reset=30`},
			[]Quota{{Unit: QuotaRequests, Remaining: 50, Limit: 100, ResetIn: 30 * time.Second, Source: "RateLimit"}}},
		{"RateLimit-* fields", map[string]string{"RateLimit-Limit": "20", "RateLimit-Remaining": "7", "RateLimit-Reset": "2"},
			[]Quota{{Unit: QuotaRequests, Remaining: 7, Limit: 20, ResetIn: 2 * time.Second, Source: "RateLimit-Remaining"}}},
		{"X-RateLimit-* delta", map[string]string{"X-RateLimit-Limit": "20", "X-RateLimit-Remaining": "5", "X-RateLimit-Reset": "1.5"},
			[]Quota{{Unit: QuotaRequests, Remaining: 5, Limit: 20, ResetIn: 1500 * time.Millisecond, Source: "X-RateLimit-Remaining"}}},
		{"X-RateLimit-Reset-After wins", map[string]string{"X-RateLimit-Remaining": "5", "X-RateLimit-Reset-After": "3", "X-RateLimit-Reset": "9"},
			[]Quota{{Unit: QuotaRequests, Remaining: 5, ResetIn: 3 * time.Second, Source: "X-RateLimit-Remaining"}}},
		{"GitHub: epoch seconds and the resource", map[string]string{"x-ratelimit-limit": "5000", "x-ratelimit-remaining": "300",
			"x-ratelimit-reset": "1796559600", "x-ratelimit-used": "4700", "x-ratelimit-resource": "core"},
			[]Quota{{Unit: QuotaRequests, Remaining: 300, Limit: 5000, ResetIn: 20 * time.Minute, Source: "X-RateLimit-Remaining", Name: "core"}}},
		{"epoch milliseconds", map[string]string{"X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "1796558410000"},
			[]Quota{{Unit: QuotaRequests, Remaining: 1, ResetIn: 10 * time.Second, Source: "X-RateLimit-Remaining"}}},
		{"OpenAI requests and tokens", map[string]string{
			"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "59", "x-ratelimit-reset-requests": "1s",
			"x-ratelimit-limit-tokens": "150000", "x-ratelimit-remaining-tokens": "149984", "x-ratelimit-reset-tokens": "6m0s"},
			[]Quota{{Unit: QuotaRequests, Remaining: 59, Limit: 60, ResetIn: time.Second, Source: "X-Ratelimit-Remaining-Requests"},
				{Unit: QuotaTokens, Remaining: 149984, Limit: 150000, ResetIn: 6 * time.Minute, Source: "X-Ratelimit-Remaining-Tokens"}}},
		{"OpenAI sub-second reset", map[string]string{"x-ratelimit-remaining-tokens": "10", "x-ratelimit-reset-tokens": "120ms"},
			[]Quota{{Unit: QuotaTokens, Remaining: 10, ResetIn: 120 * time.Millisecond, Source: "X-Ratelimit-Remaining-Tokens"}}},
		{"Anthropic", map[string]string{
			"anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-remaining": "49",
			"anthropic-ratelimit-requests-reset":     "2026-12-06T12:00:01Z",
			"anthropic-ratelimit-input-tokens-limit": "40000", "anthropic-ratelimit-input-tokens-remaining": "39000",
			"anthropic-ratelimit-input-tokens-reset": "2026-12-06T12:00:30Z"},
			[]Quota{{Unit: QuotaRequests, Remaining: 49, Limit: 50, ResetIn: time.Second, Source: "Anthropic-Ratelimit-Requests-Remaining"},
				{Unit: QuotaTokens, Remaining: 39000, Limit: 40000, ResetIn: 30 * time.Second, Source: "Anthropic-Ratelimit-Input-Tokens-Remaining"}}},
		{"unusable fields are ignored", map[string]string{
			"X-RateLimit-Remaining": "lots", "X-RateLimit-Reset": "30", "RateLimit": "(bad", "RateLimit-Remaining": "-1", "RateLimit-Reset": "5",
			"x-ratelimit-remaining-requests": "5", "x-ratelimit-reset-requests": "soon",
			"anthropic-ratelimit-tokens-remaining": "5", "anthropic-ratelimit-tokens-reset": "2020-01-01T00:00:00Z"}, nil},
		{"a reset already past is no quota to pace by", map[string]string{"X-RateLimit-Remaining": "5", "X-RateLimit-Reset": "1796550000"}, nil},
		{"several windows: the first", map[string]string{"X-RateLimit-Remaining": "5, 500", "X-RateLimit-Reset": "1, 60"},
			[]Quota{{Unit: QuotaRequests, Remaining: 5, ResetIn: time.Second, Source: "X-RateLimit-Remaining"}}},
	} {
		h := http.Header{}
		for k, v := range tc.header {
			h.Set(k, v)
		}
		if got := ReadQuotas(h, quotaNow); !slices.Equal(got, tc.want) {
			t.Errorf("%s: ReadQuotas =\n  %+v\nwant\n  %+v", tc.name, got, tc.want)
		}
	}
}

// FuzzReadQuotas asserts, for any values of the fields ReadQuotas reads:
// it never panics, and every quota it returns is usable for pacing — a
// known unit, 0 ≤ Remaining ≤ maxQuotaCount, 0 ≤ Limit ≤ maxQuotaCount,
// 0 < ResetIn ≤ maxHeaderSeconds, a Source naming a field that is set.
func FuzzReadQuotas(f *testing.F) {
	for _, s := range [][6]string{
		{`"a";r=5;t=1, "b";r=0;t=60`, `"a";q=10;w=1;qu="tokens"`, "", "", "", ""},
		{`limit=100, remaining=0, reset=30`, "", "", "", "", ""},
		{"", "", "5", "1796559600", "", ""},
		{"", "", "5, 9", "1e300", "", ""},
		{"", "", "", "", "59", "6m0s"},
		{"", "", "", "", "1e16", "-1s"},
		{"", "", "", "", "", ""},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4], s[5], "2026-12-06T12:00:01Z")
	}
	f.Fuzz(func(t *testing.T, rl, policy, xrem, xreset, oaRem, oaReset, anReset string) {
		h := http.Header{}
		for name, v := range map[string]string{"RateLimit": rl, "RateLimit-Policy": policy,
			"X-RateLimit-Remaining": xrem, "X-RateLimit-Reset": xreset, "RateLimit-Remaining": xrem, "RateLimit-Reset": oaReset,
			"X-Ratelimit-Remaining-Tokens": oaRem, "X-Ratelimit-Reset-Tokens": oaReset,
			"Anthropic-Ratelimit-Requests-Remaining": oaRem, "Anthropic-Ratelimit-Requests-Reset": anReset} {
			if v != "" {
				h.Set(name, v)
			}
		}
		for _, q := range ReadQuotas(h, quotaNow) {
			switch {
			case q.Unit != QuotaRequests && q.Unit != QuotaTokens,
				q.Remaining < 0 || q.Remaining > maxQuotaCount, q.Limit < 0 || q.Limit > maxQuotaCount,
				q.ResetIn <= 0 || q.ResetIn > time.Duration(maxHeaderSeconds)*time.Second,
				h.Get(q.Source) == "":
				t.Fatalf("ReadQuotas(%v) gave %+v", h, q)
			}
		}
	})
}

// PaceQuota picks the quota that allows the fewest jobs of the cost per
// second: requests against tokens ÷ cost.
func TestPaceQuota(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	h.Set("X-Ratelimit-Remaining-Requests", "100")
	h.Set("X-Ratelimit-Reset-Requests", "10s") // 10 jobs/s
	h.Set("X-Ratelimit-Remaining-Tokens", "3000")
	h.Set("X-Ratelimit-Reset-Tokens", "10s") // 300 tokens/s
	for _, tc := range []struct {
		cost int64
		want string
	}{{1, QuotaRequests}, {29, QuotaRequests}, {31, QuotaTokens}, {500, QuotaTokens}} {
		q := PaceQuota(h, quotaNow, tc.cost)
		if q == nil || q.Unit != tc.want || q.ResetIn != 10*time.Second {
			t.Errorf("cost %d: %+v, want the %s quota", tc.cost, q, tc.want)
		}
	}
	if q := PaceQuota(h, quotaNow, 31); q.Remaining != 3000 || q.Source != "X-Ratelimit-Remaining-Tokens" {
		t.Errorf("tokens quota %+v", q)
	}
	if q := PaceQuota(http.Header{"Content-Type": {"text/plain"}}, quotaNow, 1); q != nil {
		t.Errorf("no quota fields: %+v, want nil", q)
	}
}
