package api

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/upstream"
)

func (f *fixture) putUpstream(t *testing.T, name, token, body string, headers ...string) response {
	t.Helper()
	return f.send(t, "PUT", "/v1/upstreams/"+name, token, strings.NewReader(body), headers...)
}

// createUpstream registers name (rate 10/s) straight in the store, as
// another process or the configuration file would.
func (f *fixture) createUpstream(t *testing.T, name string) {
	t.Helper()
	cfg := upstream.Config{Rate: bucket.Rate{Tokens: 10, Per: time.Second}}
	if _, err := f.srv.opts.Store.PutUpstream(context.Background(), name, cfg, quota.SourceConfig, ""); err != nil {
		t.Fatal(err)
	}
}

// TestPutAndGetUpstream: a PUT creates (201, ETag "u1"), replaces (200,
// "u2"), is guarded by If-Match (412 on a stale version, 400 on a malformed
// one) and is for admin keys only; GET shows the configuration with its
// defaults, version, source and pause, for any key.
func TestPutAndGetUpstream(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	body := `{"rate":"100/s","burst":10,"pause_scope":"upstream"}`
	r := f.putUpstream(t, "sms-7", adminToken, body, "If-Match", "0")
	cfg, _ := r.body["config"].(map[string]any)
	if r.status != http.StatusCreated || r.header.Get("ETag") != `"u1"` || r.body["name"] != "sms-7" || r.body["version"] != 1.0 ||
		r.body["source"] != "api" || r.body["paused"] != false || r.body["paused_until"] != nil || r.body["pause_reason"] != nil ||
		cfg["rate"] != "100/s" || cfg["burst"] != 10.0 || cfg["concurrency"] != 0.0 || cfg["adaptive"] != false ||
		cfg["pause_scope"] != "upstream" || cfg["cost_header"] != "" {
		t.Fatalf("create: %d %v %v", r.status, r.header, r.body)
	}
	if _, ok := r.body["runtime"]; !ok || r.body["runtime"] != nil {
		t.Errorf("runtime = %v, want null until the coordinator's state is wired", r.body["runtime"])
	}
	r = f.putUpstream(t, "sms-7", adminToken, `{"rate":"90000/m","cost_header":"X-Usage-Tokens"}`, "If-Match", `"u1"`)
	cfg, _ = r.body["config"].(map[string]any)
	if r.status != http.StatusOK || r.header.Get("ETag") != `"u2"` || cfg["rate"] != "90000/m" || cfg["burst"] != 1.0 ||
		cfg["pause_scope"] != "tenant" || cfg["cost_header"] != "X-Usage-Tokens" {
		t.Fatalf("replace: %d %v %v", r.status, r.header, r.body)
	}
	for _, tc := range []struct {
		name, token, ifMatch string
		status               int
		code                 string
	}{
		{"stale version", adminToken, `"u1"`, http.StatusPreconditionFailed, CodePreconditionFailed},
		{"create only, exists", adminToken, "0", http.StatusPreconditionFailed, CodePreconditionFailed},
		{"weak tag", adminToken, `W/"u2"`, http.StatusBadRequest, CodeMalformed},
		{"not a version", adminToken, "latest", http.StatusBadRequest, CodeMalformed},
		{"producer key", producerToken, "", http.StatusForbidden, CodeForbidden},
		{"key without tenants", plainToken, "", http.StatusForbidden, CodeForbidden},
		{"no key", "", "", http.StatusUnauthorized, CodeUnauthorized},
	} {
		r := f.putUpstream(t, "sms-7", tc.token, `{"rate":"1/s"}`, "If-Match", tc.ifMatch)
		if r.status != tc.status || errorCode(r) != tc.code {
			t.Errorf("%s: %d %v, want %d %s", tc.name, r.status, r.body, tc.status, tc.code)
		}
	}
	if r := f.putUpstream(t, "sms-7", adminToken, `{"rate":"1/s"}`, "If-Match", `"u1"`); !strings.Contains(errorMessage(r), `"u2"`) {
		t.Errorf("412 message %q does not name the current version", errorMessage(r))
	}
	// Nothing refused changed it; any key reads it.
	for _, token := range []string{adminToken, producerToken, plainToken} {
		g := f.get(t, "/v1/upstreams/sms-7", token)
		if g.status != http.StatusOK || g.header.Get("ETag") != `"u2"` || g.body["config"].(map[string]any)["rate"] != "90000/m" {
			t.Errorf("GET with %s: %d %v", token, g.status, g.body)
		}
	}
	if g := f.get(t, "/v1/upstreams/nope", adminToken); g.status != http.StatusNotFound || errorCode(g) != CodeNotFound {
		t.Errorf("GET unknown: %d %v", g.status, g.body)
	}
	if g := f.get(t, "/v1/upstreams/a:b", adminToken); g.status != http.StatusUnprocessableEntity {
		t.Errorf("GET a bad name: %d %v", g.status, g.body)
	}
}

func errorMessage(r response) string {
	e, _ := r.body["error"].(map[string]any)
	m, _ := e["message"].(string)
	return m
}

// TestPutUpstreamRefusesBadInput: every problem of a configuration in one
// 422; unknown fields, bad names and bad JSON refused; nothing stored.
func TestPutUpstreamRefusesBadInput(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	for _, tc := range []struct {
		name, path, body string
		status           int
		words            []string
	}{
		{"every problem", "up", `{"burst":-1,"concurrency":-1,"pause_scope":"all","cost_header":"a b"}`, 422,
			[]string{"rate:", "burst:", "concurrency:", "pause_scope:", "cost_header:"}},
		{"no rate", "up", `{}`, 422, []string{"rate:"}},
		{"bad rate", "up", `{"rate":"fast"}`, 422, []string{"rate"}},
		{"burst too large", "up", `{"rate":"1/s","burst":1000001}`, 422, []string{"burst:"}},
		{"unknown field", "up", `{"rate":"1/s","colour":"red"}`, 422, []string{"colour"}},
		{"wrong type", "up", `{"rate":"1/s","burst":"5"}`, 422, []string{"burst"}},
		{"malformed", "up", `{"rate":`, 400, nil},
		{"bad name", "a:b", `{"rate":"1/s"}`, 422, []string{"name:"}},
		{"long name", strings.Repeat("n", 65), `{"rate":"1/s"}`, 422, []string{"name:"}},
	} {
		r := f.putUpstream(t, tc.path, adminToken, tc.body)
		if r.status != tc.status {
			t.Errorf("%s: %d %v, want %d", tc.name, r.status, r.body, tc.status)
			continue
		}
		for _, w := range tc.words {
			if !strings.Contains(errorMessage(r), w) {
				t.Errorf("%s: message %q lacks %q", tc.name, errorMessage(r), w)
			}
		}
	}
	if names, err := f.srv.opts.Store.UpstreamNames(context.Background(), "", 10); err != nil || len(names) != 0 {
		t.Errorf("refused PUTs stored %v (%v)", names, err)
	}
}

// TestListUpstreams: pages by name with an opaque cursor, every upstream
// once; bad parameters are 400.
func TestListUpstreams(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	if r := f.get(t, "/v1/upstreams", plainToken); r.status != 200 || len(r.body["upstreams"].([]any)) != 0 || r.body["cursor"] != nil {
		t.Fatalf("empty listing: %d %v", r.status, r.body)
	}
	want := []string{"a", "b", "c", "d", "e"}
	for _, n := range slices.Backward(want) {
		f.createUpstream(t, n)
	}
	var got []string
	path := "/v1/upstreams?limit=2"
	for range 5 {
		r := f.get(t, path, producerToken)
		if r.status != http.StatusOK {
			t.Fatalf("GET %s: %d %v", path, r.status, r.body)
		}
		page := r.body["upstreams"].([]any)
		if len(page) > 2 {
			t.Fatalf("page of %d, limit 2", len(page))
		}
		for _, u := range page {
			got = append(got, u.(map[string]any)["name"].(string))
		}
		cur, _ := r.body["cursor"].(string)
		if cur == "" {
			break
		}
		path = "/v1/upstreams?limit=2&cursor=" + cur
	}
	if !slices.Equal(got, want) {
		t.Errorf("pages = %v, want %v", got, want)
	}
	for _, q := range []string{"limit=0", "limit=501", "limit=x", "cursor=!!!", "cursor=e30"} {
		if r := f.get(t, "/v1/upstreams?"+q, adminToken); r.status != http.StatusBadRequest || errorCode(r) != CodeMalformed {
			t.Errorf("?%s: %d %v, want 400", q, r.status, r.body)
		}
	}
}

// TestPauseAndResumeUpstream: a timed pause, a pause until resumed, a
// shorter pause that changes nothing, resume; admin only; 404, 422.
func TestPauseAndResumeUpstream(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	f.createUpstream(t, "llm")
	before := time.Now()
	r := f.post(t, "/v1/upstreams/llm/pause", adminToken, `{"for":"30s"}`)
	until, _ := time.Parse(time.RFC3339Nano, stringOf(r.body["paused_until"]))
	if r.status != 200 || r.body["paused"] != true || r.body["pause_reason"] != "manual" ||
		until.Before(before.Add(30*time.Second).Add(-time.Millisecond)) || until.After(time.Now().Add(30*time.Second)) {
		t.Fatalf("pause for 30s: %d %v", r.status, r.body)
	}
	r = f.post(t, "/v1/upstreams/llm/pause", adminToken, `{"for":"1s"}`) // shorter: kept
	if got, _ := time.Parse(time.RFC3339Nano, stringOf(r.body["paused_until"])); !got.Equal(until) {
		t.Errorf("a shorter pause moved the end from %s to %v", until, r.body["paused_until"])
	}
	r = f.send(t, "POST", "/v1/upstreams/llm/pause", adminToken, nil)
	if r.status != 200 || r.body["paused"] != true || r.body["paused_until"] != nil || r.body["pause_reason"] != "manual" {
		t.Fatalf("pause until resumed: %d %v", r.status, r.body)
	}
	if g := f.get(t, "/v1/upstreams/llm", plainToken); g.body["paused"] != true || g.body["paused_until"] != nil {
		t.Errorf("GET while paused until resumed: %v", g.body)
	}
	r = f.post(t, "/v1/upstreams/llm/resume", adminToken, "")
	if r.status != 200 || r.body["paused"] != false || r.body["paused_until"] != nil || r.body["pause_reason"] != nil {
		t.Fatalf("resume: %d %v", r.status, r.body)
	}
	for _, tc := range []struct {
		name, path, token, body string
		status                  int
	}{
		{"zero for", "/v1/upstreams/llm/pause", adminToken, `{"for":"0s"}`, 422},
		{"negative for", "/v1/upstreams/llm/pause", adminToken, `{"for":"-1m"}`, 422},
		{"not a duration", "/v1/upstreams/llm/pause", adminToken, `{"for":"soon"}`, 422},
		{"too long", "/v1/upstreams/llm/pause", adminToken, `{"for":"10000h"}`, 422},
		{"unknown field", "/v1/upstreams/llm/pause", adminToken, `{"until":"2030-01-01T00:00:00Z"}`, 400},
		{"producer pause", "/v1/upstreams/llm/pause", producerToken, "", 403},
		{"producer resume", "/v1/upstreams/llm/resume", producerToken, "", 403},
		{"unknown pause", "/v1/upstreams/ghost/pause", adminToken, "", 404},
		{"unknown resume", "/v1/upstreams/ghost/resume", adminToken, "", 404},
		{"bad name", "/v1/upstreams/..%3A/pause", adminToken, "", 422},
	} {
		var r response
		if tc.body == "" {
			r = f.send(t, "POST", tc.path, tc.token, nil)
		} else {
			r = f.post(t, tc.path, tc.token, tc.body)
		}
		if r.status != tc.status {
			t.Errorf("%s: %d %v, want %d", tc.name, r.status, r.body, tc.status)
		}
	}
	if g := f.get(t, "/v1/upstreams/llm", adminToken); g.body["paused"] != false {
		t.Errorf("a refused pause paused it: %v", g.body)
	}
}

func stringOf(v any) string { s, _ := v.(string); return s }

// TestEnqueueUpstreams: a job's upstreams are checked (at most 4, distinct,
// valid, registered — 422 unknown_upstream naming the unknown ones), stored
// sorted and shown by GET; without "upstreams" the tenant policy's default
// applies, [] names none; an upstream registered by another process after
// this one read the registry is accepted at once.
func TestEnqueueUpstreams(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	f.createUpstream(t, "sms")
	f.createUpstream(t, "llm")
	f.setPolicy(t, "acme-dflt", store.Overrides{Upstreams: store.HeaderList{"sms"}})
	f.setPolicy(t, "acme-ghost", store.Overrides{Upstreams: store.HeaderList{"ghost"}})
	job := func(ups string) string {
		if ups == "" {
			return webhookJob
		}
		return strings.TrimSuffix(webhookJob, "}") + `,"upstreams":` + ups + `}`
	}
	for _, tc := range []struct {
		name, tenant, ups string
		status            int
		code              string
		want              []string // accepted: the job's upstreams; refused: words of the message
	}{
		{"named, sorted", "acme-u", `["sms","llm"]`, 202, "", []string{"llm", "sms"}},
		{"none", "acme-u", ``, 202, "", []string{}},
		{"policy default", "acme-dflt", ``, 202, "", []string{"sms"}},
		{"explicit none over the default", "acme-dflt", `[]`, 202, "", []string{}},
		{"named over the default", "acme-dflt", `["llm"]`, 202, "", []string{"llm"}},
		{"unknown", "acme-u", `["sms","nope","zilch"]`, 422, CodeUnknownUpstream, []string{`"nope"`, `"zilch"`, "PUT /v1/upstreams"}},
		{"unknown policy default", "acme-ghost", ``, 422, CodeUnknownUpstream, []string{`"ghost"`, "policy"}},
		{"more than 4", "acme-u", `["a","b","c","d","e"]`, 422, CodeInvalid, []string{"upstreams: at most 4"}},
		{"duplicate", "acme-u", `["sms","sms"]`, 422, CodeInvalid, []string{"upstreams[1]", "twice"}},
		{"bad name", "acme-u", `["sms","a:b"]`, 422, CodeInvalid, []string{"upstreams[1]", "invalid upstream name"}},
		{"not a list", "acme-u", `"sms"`, 422, CodeInvalid, []string{"upstreams"}},
	} {
		r := f.post(t, "/v1/tenants/"+tc.tenant+"/jobs", producerToken, job(tc.ups))
		if r.status != tc.status || (tc.code != "" && errorCode(r) != tc.code) {
			t.Errorf("%s: %d %v, want %d %s", tc.name, r.status, r.body, tc.status, tc.code)
			continue
		}
		if tc.status != 202 {
			for _, w := range tc.want {
				if !strings.Contains(errorMessage(r), w) {
					t.Errorf("%s: message %q lacks %q", tc.name, errorMessage(r), w)
				}
			}
			continue
		}
		g := f.get(t, "/v1/jobs/"+r.body["id"].(string), producerToken)
		var got []string
		for _, u := range g.body["upstreams"].([]any) {
			got = append(got, u.(string))
		}
		stored, hasKey := g.body["job"].(map[string]any)["upstreams"]
		if !slices.Equal(got, tc.want) || (len(tc.want) > 0 && mustJSON(stored) != mustJSON(tc.want)) || (len(tc.want) == 0 && hasKey) {
			t.Errorf("%s: the job's upstreams = %v (stored %v, key present %v), want %v", tc.name, got, stored, hasKey, tc.want)
		}
	}
	// Registered elsewhere after this process read the registry: accepted.
	f.createUpstream(t, "late")
	requireAccepted(t, f.post(t, "/v1/tenants/acme-u/jobs", producerToken, job(`["late"]`)), "acme-u", "queued")

	// A batch refuses only the items naming unknown upstreams.
	r := f.post(t, "/v1/tenants/acme-u/jobs:batch", producerToken,
		`{"jobs":[`+job(`["sms"]`)+`,`+job(`["ghost"]`)+`,`+job(`["sms","sms"]`)+`]}`)
	res, _ := r.body["results"].([]any)
	if r.status != 202 || len(res) != 3 {
		t.Fatalf("batch: %d %v", r.status, r.body)
	}
	for i, want := range []string{"", CodeUnknownUpstream, CodeInvalid} {
		item := res[i].(map[string]any)
		e, _ := item["error"].(map[string]any)
		if code, _ := e["code"].(string); code != want {
			t.Errorf("batch item %d: %v, want code %q", i, item, want)
		}
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestPutPolicyUpstreams: a tenant policy's default upstreams are part of
// the PUT body and reply, validated like a job's.
func TestPutPolicyUpstreams(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	r := f.put(t, "acme-pu", adminToken, `{"upstreams":["sms","llm"]}`)
	if ups := r.body["policy"].(map[string]any)["upstreams"]; r.status != 200 || mustJSON(ups) != `["sms","llm"]` {
		t.Fatalf("PUT policy upstreams: %d %v", r.status, r.body)
	}
	if g := f.get(t, "/v1/tenants/acme-pu", adminToken); mustJSON(g.body["policy"].(map[string]any)["upstreams"]) != `["sms","llm"]` {
		t.Errorf("GET tenant after PUT: policy %v", g.body["policy"])
	}
	for _, body := range []string{`{"upstreams":["a","b","c","d","e"]}`, `{"upstreams":["a","a"]}`, `{"upstreams":["a b"]}`} {
		if r := f.put(t, "acme-pu", adminToken, body); r.status != 422 || !strings.Contains(errorMessage(r), "upstreams") {
			t.Errorf("PUT %s: %d %v, want 422 naming upstreams", body, r.status, r.body)
		}
	}
}

// TestUpstreamCaches: enqueue's reads of an upstream's settings and of a
// tenant's default upstreams are used for the cache's ttl, then read
// again; a name not registered is read again at every use (an upstream
// another process creates is accepted at once).
func TestUpstreamCaches(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	st := f.srv.opts.Store
	reg := newUpstreamSettings(st, time.Second)
	reg.Clock = clock
	pol := &policyUpstreams{store: st, ttl: time.Second, clock: clock}
	found := func(names ...string) []bool {
		t.Helper()
		got, err := reg.Settings(ctx, names)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]bool, len(got))
		for i, s := range got {
			out[i] = s.Found
		}
		return out
	}

	f.createUpstream(t, "a")
	if got := found("a", "b"); !slices.Equal(got, []bool{true, false}) {
		t.Fatalf("found %v, want [true false]", got)
	}
	f.createUpstream(t, "b") // within the ttl: a miss is read again
	if got := found("a", "b"); !slices.Equal(got, []bool{true, true}) {
		t.Fatalf("after b's PUT: found %v, want both", got)
	}
	if err := st.DeleteUpstream(ctx, "b", ""); err != nil {
		t.Fatal(err)
	}
	now = now.Add(999 * time.Millisecond)
	if got := found("b"); !got[0] {
		t.Error("deleted within the ttl: not the cached answer")
	}
	now = now.Add(time.Millisecond)
	if got := found("b"); got[0] {
		t.Error("deleted, after the ttl: still found")
	}

	f.setPolicy(t, "acme-c", store.Overrides{Upstreams: store.HeaderList{"a"}})
	if got, err := pol.of(ctx, "acme-c"); err != nil || !slices.Equal(got, []string{"a"}) {
		t.Fatalf("default upstreams = %v, %v", got, err)
	}
	f.setPolicy(t, "acme-c", store.Overrides{Upstreams: store.HeaderList{"b"}})
	now = now.Add(999 * time.Millisecond)
	if got, _ := pol.of(ctx, "acme-c"); !slices.Equal(got, []string{"a"}) {
		t.Errorf("within the ttl: %v, want the cached [a]", got)
	}
	now = now.Add(time.Millisecond)
	if got, _ := pol.of(ctx, "acme-c"); !slices.Equal(got, []string{"b"}) {
		t.Errorf("after the ttl: %v, want [b]", got)
	}
}

// TestEnqueueCostOverUpstreamBurst: a job whose cost exceeds the burst of
// an upstream it names (or its policy's default names) is refused with 422
// cost_exceeds_upstream_burst naming the upstream and both numbers, single
// or in a batch, and nothing is stored; a cost equal to the burst is
// accepted.
func TestEnqueueCostOverUpstreamBurst(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	if r := f.putUpstream(t, "big", adminToken, `{"rate":"10/s","burst":5}`); r.status != http.StatusCreated {
		t.Fatalf("PUT big: %d %v", r.status, r.body)
	}
	f.createUpstream(t, "sms") // burst 1
	f.setPolicy(t, "acme-b", store.Overrides{Upstreams: store.HeaderList{"sms"}, Burst: p64(10)})
	f.setPolicy(t, "acme-c", store.Overrides{Burst: p64(10)})
	job := func(cost int, ups string) string {
		j := strings.TrimSuffix(webhookJob, "}") + `,"cost":` + strconv.Itoa(cost)
		if ups != "" {
			j += `,"upstreams":` + ups
		}
		return j + "}"
	}
	if r := f.post(t, "/v1/tenants/acme-c/jobs", producerToken, job(5, `["big"]`)); r.status != http.StatusAccepted {
		t.Fatalf("cost = burst: %d %v, want 202", r.status, r.body)
	}
	for _, tc := range []struct {
		tenant, body string
		words        []string
	}{
		{"acme-c", job(6, `["big"]`), []string{"6", "burst 5", `"big"`, "the job names"}},
		{"acme-c", job(2, `["big","sms"]`), []string{"2", "burst 1", `"sms"`}},
		{"acme-b", job(2, ""), []string{"2", "burst 1", `"sms"`, "policy"}},
	} {
		r := f.post(t, "/v1/tenants/"+tc.tenant+"/jobs", producerToken, tc.body)
		if r.status != http.StatusUnprocessableEntity || errorCode(r) != CodeCostExceedsUpstreamBurst {
			t.Errorf("%s: %d %v, want 422 %s", tc.body, r.status, r.body, CodeCostExceedsUpstreamBurst)
			continue
		}
		for _, w := range tc.words {
			if !strings.Contains(errorMessage(r), w) {
				t.Errorf("%s: message %q lacks %q", tc.body, errorMessage(r), w)
			}
		}
	}
	r := f.post(t, "/v1/tenants/acme-c/jobs:batch", producerToken,
		`{"jobs":[`+job(6, `["big"]`)+`,`+job(1, `["sms"]`)+`,`+job(2, `["sms"]`)+`]}`)
	res, _ := r.body["results"].([]any)
	if r.status != http.StatusAccepted || len(res) != 3 {
		t.Fatalf("batch: %d %v", r.status, r.body)
	}
	for i, want := range []string{CodeCostExceedsUpstreamBurst, "", CodeCostExceedsUpstreamBurst} {
		item := res[i].(map[string]any)
		e, _ := item["error"].(map[string]any)
		if code, _ := e["code"].(string); code != want {
			t.Errorf("batch item %d: %v, want code %q", i, item, want)
		}
	}
	// Stored: the job of cost 5 on big, the batch's cost 1 on sms; nothing else.
	for name, want := range map[string]string{"big": `{"acme-c":1}`, "sms": `{"acme-c":1}`} {
		g := f.get(t, "/v1/upstreams/"+name, adminToken)
		rt, _ := g.body["runtime"].(map[string]any)
		if got := mustJSON(rt["waiting_by_tenant"]); got != want {
			t.Errorf("jobs waiting on %s: %s, want %s", name, got, want)
		}
	}
}

// TestGetUpstreamRuntime: GET shows the coordinator's state — the effective
// rate, the tokens now and the jobs waiting on the upstream by tenant,
// limited to the tenants the key may see, and the jobs running under its
// concurrency; PUT answers without it.
func TestGetUpstreamRuntime(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	f.createUpstream(t, "sms") // 10/s, burst 1
	job := strings.TrimSuffix(webhookJob, "}") + `,"upstreams":["sms"]}`
	for _, tenant := range []string{"acme-a", "acme-a", "other"} {
		token := producerToken
		if tenant == "other" {
			token = adminToken
		}
		if r := f.post(t, "/v1/tenants/"+tenant+"/jobs", token, job); r.status != http.StatusAccepted {
			t.Fatalf("enqueue for %s: %d %v", tenant, r.status, r.body)
		}
	}
	for _, tc := range []struct {
		token string
		want  map[string]any
	}{
		{adminToken, map[string]any{"acme-a": 2.0, "other": 1.0}},
		{producerToken, map[string]any{"acme-a": 2.0}},
	} {
		g := f.get(t, "/v1/upstreams/sms", tc.token)
		rt, _ := g.body["runtime"].(map[string]any)
		if g.status != http.StatusOK || rt["effective_rate"] != 10.0 || rt["tokens"] != 1.0 ||
			mustJSON(rt["waiting_by_tenant"]) != mustJSON(tc.want) || rt["running"] != 0.0 {
			t.Errorf("GET with %s: %d runtime %v, want rate 10, 1 token, waiting %v, none running", tc.token, g.status, rt, tc.want)
		}
	}
	// A job running under the upstream's concurrency shows as running.
	cfg := upstream.Config{Rate: bucket.Rate{Tokens: 10, Per: time.Second}, Concurrency: 3}
	if _, err := f.srv.opts.Store.PutUpstream(context.Background(), "sms", cfg, quota.SourceAPI, ""); err != nil {
		t.Fatal(err)
	}
	if held, err := f.srv.opts.Store.AcquireUpstreamRun(context.Background(), "sms", "j:1", time.Minute); !held || err != nil {
		t.Fatalf("lease: %v, %v", held, err)
	}
	if rt, _ := f.get(t, "/v1/upstreams/sms", adminToken).body["runtime"].(map[string]any); rt["running"] != 1.0 {
		t.Errorf("runtime %v, want 1 running", rt)
	}
}

// deleteUpstream sends DELETE /v1/upstreams/{name} with an optional
// If-Match and returns the status and the error code ("" for none).
func (f *fixture) deleteUpstream(t *testing.T, name, token, ifMatch string) (int, string) {
	t.Helper()
	r := f.do(t, "DELETE", "/v1/upstreams/"+name, token, "", "", "If-Match", ifMatch)
	if r.status == http.StatusNoContent {
		return r.status, ""
	}
	return r.status, errorCode(r)
}

// TestDeleteUpstream: DELETE is for admin keys; 404 for an unknown
// upstream; 409 upstream_in_use while a job waits on it; 412 on a stale
// If-Match, 400 on a malformed one; 204, then GET is 404, the listing
// lacks it and new jobs naming it are refused with unknown_upstream at
// once by this process.
func TestDeleteUpstream(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	f.createUpstream(t, "sms")
	job := strings.TrimSuffix(webhookJob, "}") + `,"upstreams":["sms"]}`
	r := f.post(t, "/v1/tenants/acme-d/jobs", producerToken, job)
	if r.status != http.StatusAccepted {
		t.Fatalf("enqueue: %d %v", r.status, r.body)
	}
	for _, tc := range []struct {
		name, token, ifMatch string
		status               int
		code                 string
	}{
		{"nope", adminToken, "", 404, CodeNotFound},
		{"sms", producerToken, "", 403, CodeForbidden},
		{"sms", adminToken, "", 409, CodeUpstreamInUse},
		{"a:b", adminToken, "", 422, CodeInvalid},
	} {
		if status, code := f.deleteUpstream(t, tc.name, tc.token, tc.ifMatch); status != tc.status || code != tc.code {
			t.Errorf("DELETE %s (%s, If-Match %q): %d %s, want %d %s", tc.name, tc.token, tc.ifMatch, status, code, tc.status, tc.code)
		}
	}
	if c := f.send(t, "DELETE", "/v1/jobs/"+r.body["id"].(string), producerToken, nil); c.status != http.StatusOK {
		t.Fatalf("cancel: %d %v", c.status, c.body)
	}
	for _, tc := range []struct {
		ifMatch string
		status  int
		code    string
	}{
		{`"u9"`, 412, CodePreconditionFailed},
		{`W/"u1"`, 400, CodeMalformed},
		{`"u1"`, 204, ""},
		{"", 404, CodeNotFound}, // gone
	} {
		if status, code := f.deleteUpstream(t, "sms", adminToken, tc.ifMatch); status != tc.status || code != tc.code {
			t.Errorf("DELETE sms (If-Match %q): %d %s, want %d %s", tc.ifMatch, status, code, tc.status, tc.code)
		}
	}
	if g := f.get(t, "/v1/upstreams/sms", adminToken); g.status != http.StatusNotFound {
		t.Errorf("GET after the delete: %d %v", g.status, g.body)
	}
	if l := f.get(t, "/v1/upstreams", adminToken); mustJSON(l.body["upstreams"]) != "[]" {
		t.Errorf("listing after the delete: %v", l.body)
	}
	if r := f.post(t, "/v1/tenants/acme-d/jobs", producerToken, job); r.status != 422 || errorCode(r) != CodeUnknownUpstream {
		t.Errorf("a job naming the deleted upstream: %d %v, want 422 %s", r.status, r.body, CodeUnknownUpstream)
	}
}

// A job delayed when its upstream is deleted (issue #15): DELETE answers
// 204 (its check cannot see the delayed set); once the job is due, a pass
// asking the coordinator is told the upstream does not exist and the job
// is dead-lettered (as the dispatcher does): the job view shows
// dead_reason unknown_upstream, no attempt used. After a PUT creates the
// upstream again, dead:replay with that reason queues it once more.
func TestDeleteUpstreamDeadLettersDelayedJobs(t *testing.T) {
	t.Parallel()
	var st *store.Store
	f := newStoreFixture(t, func(o *Options, _ redis.UniversalClient, _ string) { st = o.Store })
	f.createUpstream(t, "sms")
	job := strings.TrimSuffix(webhookJob, "}") + `,"upstreams":["sms"],"delay":"1ms"}`
	r := f.post(t, "/v1/tenants/acme-o/jobs", producerToken, job)
	if r.status != http.StatusAccepted {
		t.Fatalf("enqueue: %d %v", r.status, r.body)
	}
	id := r.body["id"].(string)
	if status, code := f.deleteUpstream(t, "sms", adminToken, ""); status != http.StatusNoContent {
		t.Fatalf("DELETE sms with only a delayed job naming it: %d %s, want 204", status, code)
	}
	ctx := context.Background()
	shard := store.ShardOf("acme-o", st.Shards())
	redistest.Poll(t, 5*time.Second, "the job dead-lettered", func() bool {
		res, err := st.PassGranted(ctx, shard, store.PassConfig{Capacity: -1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = st.GrantUpstreams(ctx, shard, res.Demand, quota.GrantConfig{Horizon: 100 * time.Millisecond})
		for _, name := range quota.MissingUpstreams(err) {
			if _, _, err := st.DeadLetterUnknownUpstream(ctx, shard, name, store.OrphanConfig{Before: res.Now}); err != nil {
				t.Fatal(err)
			}
		}
		g := f.get(t, "/v1/jobs/"+id, producerToken)
		return g.body["state"] == "dead"
	})
	g := f.get(t, "/v1/jobs/"+id, producerToken)
	if g.body["dead_reason"] != "unknown_upstream" || g.body["attempt_count"] != 0.0 {
		t.Fatalf("job view: %v, want dead_reason unknown_upstream and no attempt used", g.body)
	}
	f.createUpstream(t, "sms")
	rp := f.post(t, "/v1/tenants/acme-o/dead:replay", adminToken, `{"reason":"unknown_upstream"}`)
	if rp.status != http.StatusOK || rp.body["replayed"] != 1.0 {
		t.Fatalf("dead:replay by reason: %d %v, want 1 replayed", rp.status, rp.body)
	}
	if g := f.get(t, "/v1/jobs/"+id, producerToken); g.body["state"] != "queued" || g.body["dead_reason"] != nil {
		t.Fatalf("replayed job: %v, want queued without a dead_reason", g.body)
	}
}
