package api

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

func (f *fixture) put(t *testing.T, tenant, token, body string, headers ...string) response {
	t.Helper()
	return f.send(t, "PUT", "/v1/tenants/"+tenant+"/policy", token, strings.NewReader(body), headers...)
}

// tenant is GET /v1/tenants/{tenant} by the admin key, required to be 200.
func (f *fixture) tenant(t *testing.T, tenant string) map[string]any {
	t.Helper()
	r := f.get(t, "/v1/tenants/"+tenant, adminToken)
	if r.status != http.StatusOK {
		t.Fatalf("GET tenant %s: %d %v", tenant, r.status, r.body)
	}
	return r.body
}

func TestGetTenantShowsPolicyAndState(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	r := f.get(t, "/v1/tenants/acme-view", producerToken)
	pol, _ := r.body["policy"].(map[string]any)
	if r.status != 200 || r.body["tenant"] != "acme-view" || r.body["version"] != 0.0 || r.header.Get("ETag") != `"0"` ||
		pol["rate"] != "10/s" || pol["timeout"] != "15s" || pol["max_backlog_bytes"] != "256MiB" ||
		r.body["backlog"] != 0.0 || r.body["admit_tokens"] != 1000.0 || r.body["next_eligible_at"] != nil ||
		r.body["paused_until"] != nil || r.body["admin_paused"] != false || r.body["disabled"] != false {
		t.Fatalf("fresh tenant: %d %v %v", r.status, r.header, r.body)
	}
	if _, ok := pol["webhook_secrets"]; ok {
		t.Error("the view shows webhook_secrets")
	}
	requireAccepted(t, f.post(t, "/v1/tenants/acme-view/jobs", producerToken, webhookJob), "acme-view", "queued")
	r = f.get(t, "/v1/tenants/acme-view", producerToken)
	if next, _ := r.body["next_eligible_at"].(string); r.body["backlog"] != 1.0 || r.body["queued"] != 1.0 ||
		r.body["queued_tokens"] != 1.0 || r.body["backlog_bytes"].(float64) < 50 || !etaPattern.MatchString(next) {
		t.Errorf("after one job: %v", r.body)
	}
	for _, tc := range []struct {
		path, token string
		status      int
	}{
		{"/v1/tenants/globex", producerToken, http.StatusForbidden},
		{"/v1/tenants/acme-view", plainToken, http.StatusForbidden},
		{"/v1/tenants/acme..x%3A", producerToken, http.StatusUnprocessableEntity},
		{"/v1/tenants/acme-view", "", http.StatusUnauthorized},
	} {
		if r := f.get(t, tc.path, tc.token); r.status != tc.status {
			t.Errorf("GET %s: %d, want %d", tc.path, r.status, tc.status)
		}
	}
}

func TestPutPolicy(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, func(o *Options, _ redis.UniversalClient, _ string) {
		o.Defaults = policy.Overrides{Retry: policy.RetryOverrides{MaxBackoff: durationPtr(time.Minute)}}
	})
	body := `{"rate":"3/s","burst":2,"admit":{"rate":"1/h","burst":2},"retry":{"min_backoff":"2s"},"adaptive":false,"unsigned":false,"disable_on_gone":false}`
	if r := f.put(t, "acme-p", producerToken, body); r.status != http.StatusForbidden || errorCode(r) != CodeForbidden {
		t.Fatalf("PUT by a non-admin key: %d %v, want 403", r.status, r.body)
	}
	r := f.put(t, "acme-p", adminToken, body)
	pol, _ := r.body["policy"].(map[string]any)
	admit, _ := pol["admit"].(map[string]any)
	retry, _ := pol["retry"].(map[string]any)
	if r.status != 200 || r.body["tenant"] != "acme-p" || r.body["version"] != 1.0 || r.header.Get("ETag") != `"1"` ||
		pol["rate"] != "3/s" || pol["burst"] != 2.0 || admit["rate"] != "1/h" || admit["burst"] != 2.0 ||
		retry["min_backoff"] != "2s" || pol["adaptive"] != false || pol["concurrency"] != 10.0 {
		t.Fatalf("PUT by admin: %d %v %v", r.status, r.header, r.body)
	}
	// The next enqueue sees the new admission bucket.
	e := f.post(t, "/v1/tenants/acme-p/jobs", producerToken, `{"type":"webhook","url":"https://x.example","event":"e","cost":2}`)
	requireAccepted(t, e, "acme-p", "queued")
	if p, s := params(t, e.header, "RateLimit-Policy")["admit"], params(t, e.header, "RateLimit")["admit"]; p["q"] != 2 || p["w"] != 7200 || s["r"] != 0 {
		t.Errorf("admit after PUT: policy %v state %v, want q=2 w=7200 r=0", p, s)
	}

	if r := f.put(t, "acme-p", adminToken, `{"burst":3}`, "If-Match", `"0"`); r.status != http.StatusConflict || errorCode(r) != CodeConflict {
		t.Errorf("stale If-Match: %d %v, want 409", r.status, r.body)
	}
	r = f.put(t, "acme-p", adminToken, `{"burst":3}`, "If-Match", `"1"`)
	if r.status != 200 || r.body["version"] != 2.0 || r.header.Get("ETag") != `"2"` || r.body["policy"].(map[string]any)["rate"] != "10/s" {
		t.Errorf("current If-Match: %d %v, want version 2, overrides replaced", r.status, r.body)
	}
	if g := f.get(t, "/v1/tenants/acme-p", producerToken); g.body["version"] != 2.0 || g.header.Get("ETag") != `"2"` {
		t.Errorf("GET after PUT: %v", g.body)
	}
}

func TestPutPolicyRefusesBadInputListingEveryProblem(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, func(o *Options, _ redis.UniversalClient, _ string) {
		o.Defaults = policy.Overrides{Retry: policy.RetryOverrides{MaxBackoff: durationPtr(time.Minute)}}
	})
	secret := "whsec_" + strings.Repeat("A", 32)
	cases := []struct {
		name, tenant, body string
		headers            []string
		status             int
		code               string
		words              []string
	}{
		{"every problem", "acme-q", `{"burst":0,"concurrency":2000000,"max_backlog":0,"timeout":"2h","retry":{"min_backoff":"2m","max_doublings":63}}`, nil,
			422, CodeInvalid, []string{"burst:", "concurrency:", "max_backlog:", "timeout:", "retry.max_backoff:", "retry.max_doublings:"}},
		{"unknown field", "acme-q", `{"colour":"red"}`, nil, 422, CodeInvalid, []string{"colour"}},
		{"bad rate", "acme-q", `{"rate":"fast"}`, nil, 422, CodeInvalid, []string{"rate"}},
		{"webhook secrets", "acme-q", `{"webhook_secrets":["` + secret + `","nope"]}`, nil, 422, CodeInvalid,
			[]string{"webhook_secrets[1]:", "configuration file"}},
		{"malformed", "acme-q", `{"burst":`, nil, 400, CodeMalformed, nil},
		{"null", "acme-q", `null`, nil, 422, CodeInvalid, nil},
		{"bad If-Match", "acme-q", `{}`, []string{"If-Match", `W/"1"`}, 400, CodeMalformed, []string{"If-Match"}},
		{"invalid tenant", "a%7Bb", `{}`, nil, 422, CodeInvalid, []string{"tenant"}},
		{"not JSON", "acme-q", `{}`, []string{"Content-Type", "text/plain"}, 415, CodeUnsupportedMedia, nil},
	}
	for _, tc := range cases {
		r := f.put(t, tc.tenant, adminToken, tc.body, tc.headers...)
		msg, _ := r.body["error"].(map[string]any)["message"].(string)
		if r.status != tc.status || errorCode(r) != tc.code {
			t.Errorf("%s: %d %q, want %d %q (%q)", tc.name, r.status, errorCode(r), tc.status, tc.code, msg)
		}
		for _, w := range tc.words {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: message %q does not name %q", tc.name, msg, w)
			}
		}
	}
	if g := f.get(t, "/v1/tenants/acme-q", adminToken); g.body["version"] != 0.0 {
		t.Errorf("refused PUTs wrote a policy: %v", g.body)
	}
}

func durationPtr(d time.Duration) *policy.Duration {
	v := policy.Duration(d)
	return &v
}

func TestStoreDownIsUnavailable(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, func(o *Options, _ redis.UniversalClient, prefix string) {
		st, err := store.NewStore(deadRedis(t), store.Config{Prefix: prefix, Shards: 4})
		if err != nil {
			t.Fatal(err)
		}
		o.Store = st
	})
	id, _ := store.NewJobID(1, time.Now())
	for _, req := range []struct{ method, path, token, body string }{
		{"POST", "/v1/tenants/acme-down/jobs", producerToken, webhookJob},
		{"POST", "/v1/tenants/acme-down/jobs:batch", producerToken, batch(webhookJob)},
		{"GET", "/v1/jobs/" + id, producerToken, ""},
		{"DELETE", "/v1/jobs/" + id, producerToken, ""},
		{"GET", "/v1/tenants/acme-down", producerToken, ""},
		{"PUT", "/v1/tenants/acme-down/policy", adminToken, `{"burst":2}`},
	} {
		r := f.send(t, req.method, req.path, req.token, strings.NewReader(req.body))
		if r.status != http.StatusServiceUnavailable || errorCode(r) != CodeUnavailable || r.header.Get("Retry-After") != "1" {
			t.Errorf("%s %s with Redis down: %d %q Retry-After %q, want 503 unavailable, 1", req.method, req.path, r.status, errorCode(r), r.header.Get("Retry-After"))
		}
	}
}

// The view shows the adaptive rate: the factor as a fraction and the
// effective rate in tokens per second; a 5xx halves both (docs/design.md §4.2).
func TestGetTenantShowsTheEffectiveRate(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	if r := f.tenant(t, "acme-ad"); r["effective_rate"] != 10.0 || r["rate_factor"] != 1.0 {
		t.Fatalf("fresh tenant: effective_rate %v, rate_factor %v; want 10, 1", r["effective_rate"], r["rate_factor"])
	}
	id := requireAccepted(t, f.post(t, "/v1/tenants/acme-ad/jobs", producerToken, hook(1)), "acme-ad", "queued")
	shard, _ := store.ShardOfJobID(id)
	attempt(t, f.srv.opts.Store, shard, wire.AttemptOutcome{Kind: wire.FinishRetry, Status: 503, Error: "http_503"})
	if r := f.tenant(t, "acme-ad"); r["effective_rate"] != 5.0 || r["rate_factor"] != 0.5 {
		t.Fatalf("after a 503: effective_rate %v, rate_factor %v; want 5, 0.5", r["effective_rate"], r["rate_factor"])
	}
}
