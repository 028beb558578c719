package api

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

const (
	producerToken = "producer-secret"
	adminToken    = "ops-secret"
	plainToken    = "plain-secret"
)

var (
	searchLimit = bucket.Limit{Algorithm: bucket.TokenBucket, Rate: bucket.Rate{Tokens: 1, Per: time.Hour}, Burst: 3}
	apiLimit    = bucket.Limit{Algorithm: bucket.SlidingWindow, Limit: 1000, Window: time.Minute}
)

type fixture struct {
	srv     *Server
	http    *httptest.Server
	metrics *Metrics
}

// newFixture serves the API on real Redis. tweak may change the options
// (e.g. point the API limiter elsewhere) before the server is built.
func newFixture(t *testing.T, tweak func(o *Options, rdb redis.UniversalClient, prefix string)) *fixture {
	t.Helper()
	rdb, prefix := redistest.New(t)
	search := newLimiter(t, rdb, prefix, "search", searchLimit)
	opts := Options{
		Keys: config.AuthConfig{Keys: []config.KeyConfig{
			{Name: "producer", SHA256: config.HashKey(producerToken), Tenants: []string{"acme-*"}, Limits: []string{"search"}},
			{Name: "ops", SHA256: config.HashKey(adminToken), Tenants: []string{"*"}, Admin: true},
			{Name: "plain", SHA256: config.HashKey(plainToken)},
		}}.ByHash(),
		APILimiter:  newLimiter(t, rdb, prefix, ReservedLimit, apiLimit),
		APILimit:    apiLimit,
		APIFailOpen: true,
		Limits:      map[string]Limit{"search": {Limiter: search, Limit: searchLimit}},
		Redis:       rdb,
		Registry:    prometheus.NewRegistry(),
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if tweak != nil {
		tweak(&opts, rdb, prefix)
	}
	return serveFixture(t, opts)
}

// serveFixture builds the API from opts and serves it until t ends.
func serveFixture(t *testing.T, opts Options) *fixture {
	t.Helper()
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &fixture{srv: srv, http: hs, metrics: srv.metrics}
}

func newLimiter(t *testing.T, rdb redis.UniversalClient, prefix, name string, l bucket.Limit) *bucket.Limiter {
	t.Helper()
	lim, err := bucket.NewLimiter(rdb, prefix, name, l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	return lim
}

type response struct {
	status int
	header http.Header
	body   map[string]any
}

// do sends one request; headers are extra name, value pairs (an empty
// value is left out).
func (f *fixture) do(t *testing.T, method, path, token, contentType, body string, headers ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, f.http.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] != "" {
			req.Header.Set(headers[i], headers[i+1])
		}
	}
	resp, err := f.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil && resp.Header.Get("Content-Type") == "application/json" && resp.StatusCode != http.StatusNoContent {
		t.Fatalf("%s %s: body %q is not JSON: %v", method, path, raw, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: m}
}

func (f *fixture) check(t *testing.T, token, body string) response {
	return f.do(t, "POST", "/v1/limits/search/check", token, "application/json", body)
}

func errorCode(r response) string {
	e, _ := r.body["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

// params parses an RFC 9651 list header into name → params.
func params(t *testing.T, h http.Header, field string) map[string]map[string]int64 {
	t.Helper()
	list, err := httpsfv.UnmarshalList(h.Values(field))
	if err != nil {
		t.Fatalf("%s = %q: %v", field, h.Get(field), err)
	}
	out := map[string]map[string]int64{}
	for _, m := range list {
		item := m.(httpsfv.Item)
		p := map[string]int64{}
		for _, k := range item.Params.Names() {
			v, _ := item.Params.Get(k)
			p[k] = v.(int64)
		}
		out[item.Value.(string)] = p
	}
	return out
}

func TestCheckAdmitsBurstThenRefusesWithHeaders(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	for i := range 3 {
		r := f.check(t, producerToken, `{"key":"user-1","cost":1}`)
		if r.status != http.StatusOK || r.body["allowed"] != true {
			t.Fatalf("check %d: status %d body %v, want 200 allowed", i+1, r.status, r.body)
		}
		if got := r.body["remaining"].(float64); got != float64(2-i) {
			t.Errorf("check %d: remaining %v, want %d", i+1, got, 2-i)
		}
		pol := params(t, r.header, "RateLimit-Policy")
		if pol["search"]["q"] != 3 || pol["api"]["q"] != 1000 || pol["api"]["w"] != 60 {
			t.Errorf("RateLimit-Policy = %v", pol)
		}
	}
	r := f.check(t, producerToken, `{"key":"user-1","cost":1}`)
	if r.status != http.StatusTooManyRequests || r.body["allowed"] != false || errorCode(r) != CodeRateLimited {
		t.Fatalf("4th check: status %d body %v, want 429 rate_limited", r.status, r.body)
	}
	state := params(t, r.header, "RateLimit")
	// one token per hour: the next one is about an hour away.
	if tt := state["search"]["t"]; tt < 3590 || tt > 3600 || state["search"]["r"] != 0 {
		t.Errorf("RateLimit search = %v, want r=0 t≈3600", state["search"])
	}
	if ra := r.header.Get("Retry-After"); ra != strconv.FormatInt(state["search"]["t"], 10) {
		t.Errorf("Retry-After = %q, want t = %d", ra, state["search"]["t"])
	}
	if r.header.Get("X-RateLimit-Remaining") != "0" || r.header.Get("X-RateLimit-Limit") != "3" {
		t.Errorf("X-RateLimit = %s/%s, want the search limit's 3/0", r.header.Get("X-RateLimit-Limit"), r.header.Get("X-RateLimit-Remaining"))
	}
	// another key has its own bucket
	if r := f.check(t, producerToken, `{"key":"user-2","cost":3}`); r.status != http.StatusOK {
		t.Errorf("other key: status %d, want 200", r.status)
	}
	if got := testutil.ToFloat64(f.metrics.Decisions.WithLabelValues("search", "limited")); got != 1 {
		t.Errorf("limited decisions metric = %v, want 1", got)
	}
	if got := testutil.ToFloat64(f.metrics.Decisions.WithLabelValues("search", "allowed")); got != 4 {
		t.Errorf("allowed decisions metric = %v, want 4", got)
	}
}

func TestCheckBadInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	big := `{"key":"` + strings.Repeat("k", MaxBodyBytesDefault) + `","cost":1}`
	cases := []struct {
		name, path, token, ctype, body string
		status                         int
		code                           string
	}{
		{"no key", "/v1/limits/search/check", "", "application/json", `{"key":"a","cost":1}`, 401, CodeUnauthorized},
		{"unknown key", "/v1/limits/search/check", "nope", "application/json", `{"key":"a","cost":1}`, 401, CodeUnauthorized},
		{"unknown limit", "/v1/limits/nope/check", producerToken, "application/json", `{"key":"a","cost":1}`, 404, CodeNotFound},
		{"reserved api limit", "/v1/limits/api/check", adminToken, "application/json", `{"key":"a","cost":1}`, 403, CodeForbidden},
		{"key may not check", "/v1/limits/search/check", plainToken, "application/json", `{"key":"a","cost":1}`, 403, CodeForbidden},
		{"malformed JSON", "/v1/limits/search/check", producerToken, "application/json", `{"key":`, 400, CodeMalformed},
		{"unknown field", "/v1/limits/search/check", producerToken, "application/json", `{"key":"a","cost":1,"x":2}`, 400, CodeMalformed},
		{"two values", "/v1/limits/search/check", producerToken, "application/json", `{"key":"a","cost":1}{}`, 400, CodeMalformed},
		{"not JSON type", "/v1/limits/search/check", producerToken, "text/plain", `{"key":"a","cost":1}`, 415, CodeUnsupportedMedia},
		{"too large", "/v1/limits/search/check", producerToken, "application/json", big, 413, CodeTooLarge},
		{"missing cost", "/v1/limits/search/check", producerToken, "application/json", `{"key":"a"}`, 422, CodeInvalid},
		{"zero cost", "/v1/limits/search/check", producerToken, "application/json", `{"key":"a","cost":0}`, 422, CodeInvalid},
		{"negative cost", "/v1/limits/search/check", producerToken, "application/json", `{"key":"a","cost":-2}`, 422, CodeInvalid},
		{"cost above capacity", "/v1/limits/search/check", producerToken, "application/json", `{"key":"a","cost":4}`, 422, CodeInvalid},
		{"string cost", "/v1/limits/search/check", producerToken, "application/json", `{"key":"a","cost":"1"}`, 422, CodeInvalid},
		{"missing key field", "/v1/limits/search/check", producerToken, "application/json", `{"cost":1}`, 422, CodeInvalid},
		{"unknown route", "/v1/nothing", producerToken, "", ``, 404, CodeNotFound},
	}
	for _, tc := range cases {
		r := f.do(t, "POST", tc.path, tc.token, tc.ctype, tc.body)
		if r.status != tc.status || errorCode(r) != tc.code {
			t.Errorf("%s: status %d code %q, want %d %q (body %v)", tc.name, r.status, errorCode(r), tc.status, tc.code, r.body)
		}
	}
	// Nothing above consumed a token of key "a": the full burst is still there.
	if r := f.check(t, producerToken, `{"key":"a","cost":3}`); r.status != http.StatusOK {
		t.Errorf("after bad requests, a cost-3 check got %d: bad input changed state", r.status)
	}
}

func TestAPILimiterRefusesAndNamesItself(t *testing.T) {
	t.Parallel()
	small := bucket.Limit{Algorithm: bucket.SlidingWindow, Limit: 2, Window: time.Minute}
	f := newFixture(t, func(o *Options, rdb redis.UniversalClient, prefix string) {
		o.APILimiter = newLimiter(t, rdb, prefix, ReservedLimit, small)
		o.APILimit = small
	})
	for i := range 2 {
		if r := f.do(t, "GET", "/v1/nothing", producerToken, "", ""); r.status != http.StatusNotFound {
			t.Fatalf("request %d: %d, want 404 through the limiter", i+1, r.status)
		}
	}
	r := f.do(t, "GET", "/v1/nothing", producerToken, "", "")
	if r.status != http.StatusTooManyRequests || errorCode(r) != CodeRateLimited {
		t.Fatalf("3rd request: %d %q, want 429 rate_limited", r.status, errorCode(r))
	}
	if st := params(t, r.header, "RateLimit"); st["api"]["r"] != 0 || st["api"]["t"] < 1 {
		t.Errorf("RateLimit = %v, want api r=0 t≥1", st)
	}
	if r.header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	// Another API key has its own window.
	if r := f.do(t, "GET", "/v1/nothing", adminToken, "", ""); r.status != http.StatusNotFound {
		t.Errorf("other key: %d, want 404", r.status)
	}
}

func deadRedis(t *testing.T) redis.UniversalClient {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestAPILimiterFailsOpenOrClosed(t *testing.T) {
	t.Parallel()
	for _, failOpen := range []bool{true, false} {
		var logs bytes.Buffer
		f := newFixture(t, func(o *Options, _ redis.UniversalClient, prefix string) {
			o.APILimiter = newLimiter(t, deadRedis(t), prefix, ReservedLimit, apiLimit)
			o.APIFailOpen = failOpen
			o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		})
		for range 3 {
			r := f.do(t, "GET", "/v1/nothing", producerToken, "", "")
			want := http.StatusNotFound // the route answers: the limiter let it through
			if !failOpen {
				want = http.StatusServiceUnavailable
			}
			if r.status != want {
				t.Fatalf("fail_open=%v: status %d, want %d", failOpen, r.status, want)
			}
		}
		if failOpen {
			if got := testutil.ToFloat64(f.metrics.FailOpen); got != 3 {
				t.Errorf("fail-open metric = %v, want 3", got)
			}
			if n := strings.Count(logs.String(), "failing open"); n != 1 {
				t.Errorf("fail-open log lines = %d, want 1 per episode:\n%s", n, logs.String())
			}
		}
	}
}

func TestHealthReadyMetrics(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	if r := f.do(t, "GET", "/healthz", "", "", ""); r.status != 200 {
		t.Errorf("healthz %d", r.status)
	}
	if r := f.do(t, "GET", "/readyz", "", "", ""); r.status != 200 || r.body["status"] != "ready" {
		t.Errorf("readyz %d %v, want 200 ready", r.status, r.body)
	}
	f.check(t, producerToken, `{"key":"m","cost":1}`)
	req, _ := http.NewRequest("GET", f.http.URL+"/metrics", nil)
	resp, err := f.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`sluice_limit_decisions_total{limit="search",outcome="allowed"} 1`, `sluice_http_request_duration_seconds_count{code="200",route="POST /v1/limits/{name}/check"} 1`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	down := newFixture(t, func(o *Options, _ redis.UniversalClient, _ string) { o.Redis = deadRedis(t) })
	if r := down.do(t, "GET", "/readyz", "", "", ""); r.status != 503 || errorCode(r) != CodeUnavailable {
		t.Errorf("readyz with Redis down: %d %q, want 503 unavailable", r.status, errorCode(r))
	}
}
