package api

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/worker"
)

// runOnce runs one attempt of the tenant's next job as the worker does:
// pass, claim, the webhook executor (reading the tenant's result settings),
// finish; it returns the job's state after it.
func runOnce(t *testing.T, f *fixture, loopback []netip.Prefix, id string) store.State {
	t.Helper()
	return runOnceWithin(t, f, loopback, id, 10*time.Second)
}

// runOnceWithin is runOnce with the attempt's timeout.
func runOnceWithin(t *testing.T, f *fixture, loopback []netip.Prefix, id string, timeout time.Duration) store.State {
	t.Helper()
	ctx := context.Background()
	st := f.srv.opts.Store
	shard, _ := store.ShardOfJobID(id)
	pass, err := st.Pass(ctx, shard, store.PassConfig{Lead: time.Hour, Grace: time.Hour, MaxPromotions: 10, MaxTenants: 10, Capacity: -1})
	if err != nil || len(pass.Released) != 1 || pass.Released[0].ID != id {
		t.Fatalf("pass: %v released %+v, want %s", err, pass.Released, id)
	}
	cl, err := st.Claim(ctx, id, pass.Released[0].Gen, time.Hour)
	if err != nil || cl.Outcome != store.ClaimOK {
		t.Fatalf("claim: %v %+v", err, cl)
	}
	exec, _, err := worker.NewWebhookExecutor(loopback, policy.Overrides{}, nil, st, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(exec.Close)
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	state, err := st.Finish(ctx, id, cl.Job.Gen, exec.Execute(actx, cl.Job), store.FinishConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return state
}

// TestResultsInGet: an http job's status, allowed headers and body come
// back in GET; a non-UTF-8 body as body_base64; a body over the policy's
// max_result_bytes cut and marked truncated; the attempt log holds each
// attempt's first 4 KiB.
func TestResultsInGet(t *testing.T) {
	t.Parallel()
	text := strings.Repeat("0123456789", 600) // 6000 bytes
	binary := "\xff\xfe\x00binary"
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("X-RateLimit-Remaining", "41")
		w.Header().Set("Set-Cookie", "sid=upstream")
		w.Header().Set("ETag", `"v1"`)
		if r.URL.Path == "/bin" {
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(binary))
			return
		}
		_, _ = w.Write([]byte(text))
	}))
	t.Cleanup(receiver.Close)
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	f := newStoreFixture(t, func(o *Options, _ redis.UniversalClient, _ string) { o.EgressAllow = loopback })
	job := func(tenant, path string) string {
		return requireAccepted(t, f.post(t, "/v1/tenants/"+tenant+"/jobs", producerToken,
			fmt.Sprintf(`{"type":"http","method":"GET","url":%q}`, receiver.URL+path)), tenant, "queued")
	}

	id := job("acme-res", "/text")
	runOnce(t, f, loopback, id)
	r := f.get(t, "/v1/jobs/"+id, producerToken)
	res, _ := r.body["result"].(map[string]any)
	hdrs, _ := res["headers"].(map[string]any)
	if r.status != 200 || res["status"] != 200.0 || res["body"] != text || res["truncated"] != false || res["truncated_reason"] != nil || res["body_base64"] != nil ||
		hdrs["Content-Type"] != "text/plain" || hdrs["X-Ratelimit-Remaining"] != "41" || len(hdrs) != 2 {
		t.Fatalf("result %v (headers %v)", res, hdrs)
	}
	attempts, _ := r.body["attempts"].([]any)
	if a, _ := attempts[0].(map[string]any); len(attempts) != 1 || a["body"] != text[:4096] {
		t.Fatalf("attempt log %v: want the first 4 KiB of the body", attempts)
	}

	id = job("acme-res", "/bin")
	runOnce(t, f, loopback, id)
	r = f.get(t, "/v1/jobs/"+id, producerToken)
	res, _ = r.body["result"].(map[string]any)
	want := base64.StdEncoding.EncodeToString([]byte(binary))
	if res["status"] != 201.0 || res["body_base64"] != want || res["body"] != nil {
		t.Fatalf("non-UTF-8 result %v, want body_base64 %s", res, want)
	}
	if a := r.body["attempts"].([]any)[0].(map[string]any); a["body_base64"] != want {
		t.Fatalf("non-UTF-8 excerpt %v", a)
	}

	if p := f.put(t, "acme-small", adminToken, `{"max_result_bytes":"1KiB","result_headers":["ETag"]}`); p.status != 200 {
		t.Fatalf("PUT policy: %d %v", p.status, p.body)
	}
	id = job("acme-small", "/text")
	runOnce(t, f, loopback, id)
	res, _ = f.get(t, "/v1/jobs/"+id, producerToken).body["result"].(map[string]any)
	hdrs, _ = res["headers"].(map[string]any)
	if res["body"] != text[:1024] || res["truncated"] != true || res["truncated_reason"] != store.TruncatedMaxBytes ||
		hdrs["Etag"] != `"v1"` || len(hdrs) != 1 {
		t.Fatalf("result under max_result_bytes 1KiB, result_headers [ETag]: %v", res)
	}
}

// TestResultSettingsBadInput: out-of-range or malformed result settings
// are refused with 422 and the policy does not change.
func TestResultSettingsBadInput(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	for _, body := range []string{
		`{"max_result_bytes":"2MiB"}`,
		`{"max_result_bytes":0}`,
		`{"result_headers":["Bad Header"]}`,
		`{"result_headers":["X-*-*"]}`,
		`{"result_headers":"Content-Type"}`,
	} {
		if r := f.put(t, "acme-bad", adminToken, body); r.status < 400 || r.status > 499 {
			t.Errorf("PUT %s: %d %v, want 4xx", body, r.status, r.body)
		}
	}
	pol, _ := f.tenant(t, "acme-bad")["policy"].(map[string]any)
	if pol["max_result_bytes"] != "64KiB" || fmt.Sprint(pol["result_headers"]) != fmt.Sprint([]any{"Content-Type", "RateLimit", "RateLimit-Policy", "X-RateLimit-*", "Retry-After"}) {
		t.Fatalf("policy after refused PUTs: %v", pol)
	}
}

// TestCallbackBadInput: a malformed callback URL, and one naming an
// address the egress guard refuses, are 422 and store nothing; an allowed
// one is kept and shown.
func TestCallbackBadInput(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	const path = "/v1/tenants/acme-cb/jobs"
	for _, cb := range []string{`{"url":"ftp://example.com/x"}`, `{"url":""}`, `{"url":"http://127.0.0.1:9/x"}`,
		`{"url":"http://[::1]/x"}`, `{"url":"http://169.254.169.254/latest"}`, `{"uri":"https://example.com"}`, `"https://example.com"`} {
		body := `{"type":"webhook","url":"https://example.com/hook","event":"e","callback":` + cb + `}`
		if r := f.post(t, path, producerToken, body); r.status != http.StatusUnprocessableEntity && r.status != http.StatusBadRequest {
			t.Errorf("callback %s: %d %v, want 422 or 400", cb, r.status, r.body)
		} else if strings.Contains(cb, `"url"`) && !strings.Contains(fmt.Sprint(r.body), "callback.url") {
			t.Errorf("callback %s: %v does not name the callback", cb, r.body)
		}
	}
	if st := f.tenant(t, "acme-cb"); st["backlog"] != 0.0 {
		t.Fatalf("refused jobs stored: %v", st)
	}
	id := requireAccepted(t, f.post(t, path, producerToken,
		`{"type":"webhook","url":"https://example.com/hook","event":"e","callback":{"url":"https://hooks.example.com/done"}}`), "acme-cb", "queued")
	cb, _ := f.get(t, "/v1/jobs/"+id, producerToken).body["callback"].(map[string]any)
	if cb["url"] != "https://hooks.example.com/done" {
		t.Fatalf("GET callback %v", cb)
	}
}

// TestCallbackNeedsSigningSecret: an http job with a callback of a tenant
// with no signing secret (and not unsigned) is refused with 422
// no_webhook_secret and stores nothing; without the callback it is
// accepted (http jobs are not signed).
func TestCallbackNeedsSigningSecret(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, func(o *Options, _ redis.UniversalClient, _ string) { o.FileSigned = nil })
	const path = "/v1/tenants/acme-nosec/jobs"
	plain := `{"type":"http","method":"GET","url":"https://example.com/x"}`
	withCB := `{"type":"http","method":"GET","url":"https://example.com/x","callback":{"url":"https://hooks.example.com/done"}}`
	if r := f.post(t, path, producerToken, withCB); r.status != http.StatusUnprocessableEntity || errorCode(r) != "no_webhook_secret" {
		t.Fatalf("callback without a secret: %d %v, want 422 no_webhook_secret", r.status, r.body)
	}
	if st := f.tenant(t, "acme-nosec"); st["backlog"] != 0.0 {
		t.Fatalf("refused job stored: %v", st)
	}
	requireAccepted(t, f.post(t, path, producerToken, plain), "acme-nosec", "queued")
}

// An http result whose body the job's timeout cut says so: truncated, the
// reason "timeout", the part read, and the attempt's latency to the cut.
// The attempt counts by its status (a 200: succeeded): the upstream
// answered, and sending again could repeat what it did.
func TestResultCutByTimeout(t *testing.T) {
	t.Parallel()
	stall := make(chan struct{})
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		_, _ = w.Write([]byte("partial:"))
		w.(http.Flusher).Flush()
		select { // stall mid-body until the client gives up
		case <-r.Context().Done():
		case <-stall:
		}
	}))
	t.Cleanup(func() { close(stall); receiver.Close() })
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	f := newStoreFixture(t, func(o *Options, _ redis.UniversalClient, _ string) { o.EgressAllow = loopback })
	id := requireAccepted(t, f.post(t, "/v1/tenants/acme-cut/jobs", producerToken,
		fmt.Sprintf(`{"type":"http","method":"GET","url":%q}`, receiver.URL)), "acme-cut", "queued")
	const timeout = 300 * time.Millisecond
	if state := runOnceWithin(t, f, loopback, id, timeout); state != store.StateSucceeded {
		t.Fatalf("state %s, want succeeded (a 200 came back)", state)
	}
	r := f.get(t, "/v1/jobs/"+id, producerToken)
	res, _ := r.body["result"].(map[string]any)
	if res["status"] != 200.0 || res["body"] != "partial:" || res["truncated"] != true || res["truncated_reason"] != "timeout" {
		t.Fatalf("result %v, want the part read, truncated by the timeout", res)
	}
	attempts, _ := r.body["attempts"].([]any)
	a, _ := attempts[0].(map[string]any)
	// The timeout runs from before the executor's reads; the latency from the send.
	if ms, _ := a["latency_ms"].(float64); len(attempts) != 1 || ms < float64(timeout.Milliseconds()/2) || ms > float64(10*timeout.Milliseconds()) {
		t.Fatalf("attempt log %v: want a latency up to the cut, near the timeout %s", attempts, timeout)
	}
}

// TestResultsAtTheCap: NUL-filled and HTML bodies of max_result_bytes'
// largest value (1 MiB) come back whole in GET as the JSON string they
// are, and each job's record costs Redis at most 1.05 × the body plus a
// fixed overhead (the job, its attempt log with the 4 KiB excerpt; before,
// the body was stored JSON-escaped: 6 bytes a NUL or '<').
func TestResultsAtTheCap(t *testing.T) {
	t.Parallel()
	bodies := map[string]string{
		"/nul":  strings.Repeat("\x00", int(policy.MaxResultBytesLimit)),
		"/html": strings.Repeat(`<p class="x">a & b</p>`, int(policy.MaxResultBytesLimit)/22+1)[:policy.MaxResultBytesLimit],
	}
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(bodies[r.URL.Path]))
	}))
	t.Cleanup(receiver.Close)
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	var rdb redis.UniversalClient
	f := newStoreFixture(t, func(o *Options, c redis.UniversalClient, _ string) { o.EgressAllow, rdb = loopback, c })
	if p := f.put(t, "acme-cap", adminToken, `{"max_result_bytes":"1MiB"}`); p.status != 200 {
		t.Fatalf("PUT policy: %d %v", p.status, p.body)
	}
	const fixedOverhead = 32 << 10
	for path, body := range bodies {
		id := requireAccepted(t, f.post(t, "/v1/tenants/acme-cap/jobs", producerToken,
			fmt.Sprintf(`{"type":"http","method":"GET","url":%q}`, receiver.URL+path)), "acme-cap", "queued")
		runOnce(t, f, loopback, id)
		res, _ := f.get(t, "/v1/jobs/"+id, producerToken).body["result"].(map[string]any)
		if res["body"] != body || res["truncated"] != false || res["body_base64"] != nil {
			t.Fatalf("%s: result of %d bytes, truncated %v: want the whole body as text", path, len(fmt.Sprint(res["body"])), res["truncated"])
		}
		key, err := f.srv.opts.Store.JobKey(id)
		if err != nil {
			t.Fatal(err)
		}
		used, err := rdb.MemoryUsage(context.Background(), key, 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		if limit := int64(float64(len(body))*1.05) + fixedOverhead; used > limit {
			t.Errorf("%s: the record costs Redis %d bytes for a body of %d, want at most %d", path, used, len(body), limit)
		}
		t.Logf("%s: body %d bytes, record %d bytes of Redis (%.3f ×)", path, len(body), used, float64(used)/float64(len(body)))
	}
}
