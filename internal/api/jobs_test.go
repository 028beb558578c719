package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/store"
)

// webhookJob is a valid job body; hook(n) varies its payload.
const webhookJob = `{"type":"webhook","url":"https://example.com/hook","event":"invoice.paid","payload":{"n":1}}`

func hook(n int) string {
	return fmt.Sprintf(`{"type":"webhook","url":"https://example.com/hook","event":"invoice.paid","payload":{"n":%d}}`, n)
}

// newStoreFixture is newFixture with a store.Store on the test's prefix,
// the task queue "default" allowed, and every tenant signed by the
// configuration file (fileSigned), as a deployment whose tenants all have
// webhook_secrets; secrets_test.go drops that to test the secrets by API.
func newStoreFixture(t *testing.T, tweak func(o *Options, rdb redis.UniversalClient, prefix string)) *fixture {
	t.Helper()
	return newFixture(t, func(o *Options, rdb redis.UniversalClient, prefix string) {
		st, err := store.NewStore(rdb, store.Config{Prefix: prefix, Shards: 4})
		if err != nil {
			t.Fatal(err)
		}
		o.Store, o.TaskQueues, o.FileSigned = st, []string{"default"}, fileSigned
		if tweak != nil {
			tweak(o, rdb, prefix)
		}
	})
}

// setPolicy writes tenant's overrides straight to the store.
func (f *fixture) setPolicy(t *testing.T, tenant string, o store.Overrides) {
	t.Helper()
	if _, err := f.srv.opts.Store.PutTenantPolicy(context.Background(), tenant, o, store.AnyVersion); err != nil {
		t.Fatal(err)
	}
}

func p64(v int64) *int64 { return &v }

// fileSigned is Options.FileSigned of a configuration that gives every
// tenant webhook_secrets.
func fileSigned(string) bool { return true }

// slowAdmit refills admission tokens once an hour, so token counts do not
// move between requests.
var slowAdmit = store.Overrides{AdmitUS: p64(3_600_000_000)}

// send is do with a JSON body from r and extra headers as name, value pairs
// (a "Content-Type" pair replaces application/json).
func (f *fixture) send(t *testing.T, method, path, token string, body io.Reader, headers ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, f.http.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := f.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s %s: body %q is not a JSON object: %v", method, path, raw, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: m}
}

func (f *fixture) post(t *testing.T, path, token, body string, headers ...string) response {
	t.Helper()
	return f.send(t, "POST", path, token, strings.NewReader(body), headers...)
}

func (f *fixture) get(t *testing.T, path, token string) response {
	t.Helper()
	return f.send(t, "GET", path, token, nil)
}

// firstMember is the name of the first member of an RFC 9651 list header.
func firstMember(t *testing.T, h http.Header, field string) string {
	t.Helper()
	list, err := httpsfv.UnmarshalList(h.Values(field))
	if err != nil || len(list) == 0 {
		t.Fatalf("%s = %q: %v", field, h.Get(field), err)
	}
	return list[0].(httpsfv.Item).Value.(string)
}

var etaPattern = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)

// requireAccepted checks a jobRef body and returns its id.
func requireAccepted(t *testing.T, r response, tenant, state string) string {
	t.Helper()
	id, _ := r.body["id"].(string)
	eta, _ := r.body["eta"].(string)
	if r.status != http.StatusAccepted || !strings.HasPrefix(id, "j") || r.body["tenant"] != tenant ||
		r.body["state"] != state || !etaPattern.MatchString(eta) {
		t.Fatalf("got %d %v, want 202 {id, tenant %s, state %s, eta RFC 3339 ms}", r.status, r.body, tenant, state)
	}
	return id
}

func TestEnqueueAcceptsWithAdmitHeaders(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	r := f.post(t, "/v1/tenants/acme-1/jobs", producerToken, webhookJob)
	requireAccepted(t, r, "acme-1", "queued")
	pol, state := params(t, r.header, "RateLimit-Policy"), params(t, r.header, "RateLimit")
	// default admission: 100/s, burst 1000 → w = 10 s; one token back in 10 ms → t = 1
	if pol["admit"]["q"] != 1000 || pol["admit"]["w"] != 10 || state["admit"]["r"] != 999 || state["admit"]["t"] != 1 {
		t.Errorf("admit headers: policy %v state %v", pol["admit"], state["admit"])
	}
	if pol["api"]["q"] != 1000 || firstMember(t, r.header, "RateLimit-Policy") != AdmitLimit || firstMember(t, r.header, "RateLimit") != AdmitLimit {
		t.Errorf("want admit then api: RateLimit-Policy %q, RateLimit %q", r.header.Get("RateLimit-Policy"), r.header.Get("RateLimit"))
	}
	if r.header.Get("Retry-After") != "" || r.header.Get(HeaderReplayed) != "" {
		t.Errorf("202 with Retry-After %q / replayed %q", r.header.Get("Retry-After"), r.header.Get(HeaderReplayed))
	}

	before := time.Now()
	f.liveTaskWorker(t, "default")
	r = f.post(t, "/v1/tenants/acme-1/jobs", producerToken, `{"type":"task","task_type":"email:send","payload":{},"delay":"1h"}`)
	requireAccepted(t, r, "acme-1", "scheduled")
	eta, _ := time.Parse(time.RFC3339, r.body["eta"].(string))
	if d := eta.Sub(before); d < time.Hour-time.Second || d > time.Hour+5*time.Second {
		t.Errorf("delayed job eta %s is %s after the request, want about 1h", eta, d)
	}
	st := f.tenant(t, "acme-1")
	if tokens := st["admit_tokens"].(float64); st["backlog"] != 2.0 || st["queued"] != 1.0 || tokens < 998 || tokens > 1000 || st["next_eligible_at"] == nil {
		t.Errorf("tenant after 2 jobs: %v", st)
	}
}

func TestEnqueueAdmissionExactAtTheBoundary(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	f.setPolicy(t, "acme-b", store.Overrides{AdmitBurst: p64(3), AdmitUS: p64(3_600_000_000)}) // 1/h, burst 3
	for i := range 3 {
		r := f.post(t, "/v1/tenants/acme-b/jobs", producerToken, hook(i))
		requireAccepted(t, r, "acme-b", "queued")
		pol, st := params(t, r.header, "RateLimit-Policy"), params(t, r.header, "RateLimit")
		// t = until full: i+1 tokens missing at one per hour (minus the few ms elapsed).
		if pol["admit"]["q"] != 3 || pol["admit"]["w"] != 3*3600 || st["admit"]["r"] != int64(2-i) ||
			st["admit"]["t"] < int64(i+1)*3600-5 || st["admit"]["t"] > int64(i+1)*3600 {
			t.Fatalf("enqueue %d: policy %v state %v", i+1, pol["admit"], st["admit"])
		}
	}
	r := f.post(t, "/v1/tenants/acme-b/jobs", producerToken, hook(3))
	if r.status != http.StatusTooManyRequests || errorCode(r) != CodeRateLimited {
		t.Fatalf("4th enqueue: %d %v, want 429 rate_limited", r.status, r.body)
	}
	st := params(t, r.header, "RateLimit")["admit"]
	ra, err := strconv.ParseInt(r.header.Get("Retry-After"), 10, 64)
	if err != nil || ra < 1 || ra != st["t"] || st["r"] != 0 || ra > 3600 || ra < 3590 {
		t.Fatalf("Retry-After %q, RateLimit admit %v: want equal, ≈ 3600 s, r = 0", r.header.Get("Retry-After"), st)
	}
	if r.header.Get("X-RateLimit-Remaining") != "0" || r.header.Get("X-RateLimit-Limit") != "3" {
		t.Errorf("X-RateLimit = %s/%s, want the admit limit's 3/0", r.header.Get("X-RateLimit-Limit"), r.header.Get("X-RateLimit-Remaining"))
	}
	if ts := f.tenant(t, "acme-b"); ts["backlog"] != 3.0 || ts["admit_tokens"] != 0.0 {
		t.Errorf("tenant: %v, want 3 jobs and no tokens", ts)
	}
}

func TestEnqueueBacklogFull(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	f.setPolicy(t, "acme-full", store.Overrides{MaxBacklog: p64(2), RateUS: p64(1_000_000), AdmitUS: slowAdmit.AdmitUS})
	for i := range 2 {
		requireAccepted(t, f.post(t, "/v1/tenants/acme-full/jobs", producerToken, hook(i)), "acme-full", "queued")
	}
	r := f.post(t, "/v1/tenants/acme-full/jobs", producerToken, hook(2))
	if r.status != http.StatusTooManyRequests || errorCode(r) != CodeBacklogFull {
		t.Fatalf("3rd enqueue: %d %v, want 429 backlog_full", r.status, r.body)
	}
	st := params(t, r.header, "RateLimit")["admit"]
	if ra := r.header.Get("Retry-After"); ra == "" || ra == "0" || ra != strconv.FormatInt(st["t"], 10) || st["r"] != 998 {
		t.Fatalf("Retry-After %q, RateLimit admit %v: want ≥ 1, equal to t, tokens untouched", ra, st)
	}
	if ts := f.tenant(t, "acme-full"); ts["backlog"] != 2.0 || ts["admit_tokens"] != 998.0 {
		t.Errorf("tenant after a backlog_full refusal: %v", ts)
	}
}

// results returns a batch answer's results, each as a map.
func results(t *testing.T, r response) []map[string]any {
	t.Helper()
	list, ok := r.body["results"].([]any)
	if !ok {
		t.Fatalf("no results in %v", r.body)
	}
	out := make([]map[string]any, len(list))
	for i, v := range list {
		out[i] = v.(map[string]any)
		if out[i]["index"] != float64(i) {
			t.Fatalf("result %d has index %v", i, out[i]["index"])
		}
	}
	return out
}

func batch(items ...string) string { return `{"jobs":[` + strings.Join(items, ",") + `]}` }

func TestBatchPartiallyAdmitted(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	f.setPolicy(t, "acme-batch", store.Overrides{AdmitBurst: p64(2), AdmitUS: p64(3_600_000_000)})
	r := f.post(t, "/v1/tenants/acme-batch/jobs:batch", producerToken, batch(hook(0), hook(1), hook(2), hook(3)))
	if r.status != http.StatusAccepted || r.body["error"] != nil {
		t.Fatalf("batch: %d %v, want 202", r.status, r.body)
	}
	res := results(t, r)
	for i, item := range res {
		if i < 2 {
			id, _ := item["id"].(string)
			if item["status"] != 202.0 || item["state"] != "queued" || item["tenant"] != "acme-batch" || item["error"] != nil {
				t.Fatalf("item %d: %v, want accepted", i, item)
			}
			j := f.get(t, "/v1/jobs/"+id, producerToken)
			if j.status != 200 || j.body["id"] != id || j.body["state"] != "queued" || j.body["eta"] != item["eta"] ||
				j.body["tenant"] != "acme-batch" || j.body["job"].(map[string]any)["payload"].(map[string]any)["n"] != float64(i) {
				t.Fatalf("GET job %d: %d %v, want the accepted item %v", i, j.status, j.body, item)
			}
			continue
		}
		e, _ := item["error"].(map[string]any)
		if item["status"] != 429.0 || e["code"] != CodeRateLimited || item["retry_after"].(float64) < 1 || item["id"] != nil {
			t.Fatalf("item %d: %v, want 429 rate_limited with retry_after", i, item)
		}
	}
	if st := params(t, r.header, "RateLimit")["admit"]; st["r"] != 0 || r.header.Get("Retry-After") != "" {
		t.Errorf("202 batch: RateLimit admit %v, Retry-After %q", st, r.header.Get("Retry-After"))
	}

	// Nothing left to admit: the first refusal's status, error and Retry-After.
	r = f.post(t, "/v1/tenants/acme-batch/jobs:batch", producerToken, batch(hook(4), `{"type":"nope"}`))
	if r.status != http.StatusTooManyRequests || errorCode(r) != CodeRateLimited || len(results(t, r)) != 2 {
		t.Fatalf("all refused: %d %v, want 429 rate_limited with results", r.status, r.body)
	}
	st := params(t, r.header, "RateLimit")["admit"]
	if ra := r.header.Get("Retry-After"); ra != strconv.FormatInt(st["t"], 10) || ra != fmt.Sprint(results(t, r)[0]["retry_after"]) {
		t.Errorf("Retry-After %q, admit t %d, item retry_after %v: want all equal", ra, st["t"], results(t, r)[0]["retry_after"])
	}
	if ts := f.tenant(t, "acme-batch"); ts["backlog"] != 2.0 {
		t.Errorf("backlog %v, want 2", ts["backlog"])
	}
}

func TestBatchInvalidItemDoesNotBlockTheOthers(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	r := f.post(t, "/v1/tenants/acme-mixed/jobs:batch", producerToken,
		batch(hook(0), `{"type":"fax"}`, `{"type":"webhook","url":"https://x.example","event":"e","colour":1}`, `"just a string"`, hook(4)))
	if r.status != http.StatusAccepted {
		t.Fatalf("batch: %d %v, want 202", r.status, r.body)
	}
	res := results(t, r)
	for i, want := range []struct {
		status float64
		words  string
	}{{202, ""}, {422, "type"}, {422, "colour"}, {422, "body"}, {202, ""}} {
		e, _ := res[i]["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if res[i]["status"] != want.status || (want.status == 422 && (e["code"] != CodeInvalid || !strings.Contains(msg, want.words))) {
			t.Errorf("item %d: %v, want %v naming %q", i, res[i], want.status, want.words)
		}
	}
	if ts := f.tenant(t, "acme-mixed"); ts["backlog"] != 2.0 {
		t.Errorf("backlog %v, want the 2 valid items", ts["backlog"])
	}
	// No valid item at all: the first refusal's status, nothing stored, no admit header.
	r = f.post(t, "/v1/tenants/acme-mixed/jobs:batch", producerToken, batch(`{"type":"fax"}`, `{}`))
	if r.status != http.StatusUnprocessableEntity || errorCode(r) != CodeInvalid || len(results(t, r)) != 2 {
		t.Fatalf("all invalid: %d %v", r.status, r.body)
	}
	if _, ok := params(t, r.header, "RateLimit")["admit"]; ok {
		t.Error("admit headers without a store decision")
	}
}

func TestIdempotencyOverHTTP(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	path := "/v1/tenants/acme-idem/jobs"
	f.setPolicy(t, "acme-idem", slowAdmit)
	first := f.post(t, path, producerToken, webhookJob, HeaderIdempotencyKey, "order-1")
	id := requireAccepted(t, first, "acme-idem", "queued")
	again := f.post(t, path, producerToken, webhookJob, HeaderIdempotencyKey, "order-1")
	if requireAccepted(t, again, "acme-idem", "queued") != id || again.header.Get(HeaderReplayed) != "true" || again.body["eta"] != first.body["eta"] {
		t.Fatalf("replay: %v %v, want the original %v with Idempotent-Replayed", again.header, again.body, first.body)
	}
	if st := params(t, again.header, "RateLimit")["admit"]; st["r"] != 999 {
		t.Errorf("a replay charged admission: %v", st)
	}
	other := f.post(t, path, producerToken, hook(2), HeaderIdempotencyKey, "order-1")
	if other.status != http.StatusUnprocessableEntity || errorCode(other) != CodeIdempotencyMismat {
		t.Fatalf("same key, other body: %d %v, want 422 idempotency_mismatch", other.status, other.body)
	}

	// Batch items: the fingerprint covers the scheduling fields.
	item := func(key, extra string) string {
		return `{"type":"webhook","url":"https://example.com/h","event":"e","idempotency_key":"` + key + `"` + extra + `}`
	}
	r := f.post(t, path+":batch", producerToken, batch(item("b1", ""), item("b1", ""), item("b1", `,"delay":"1s"`),
		item("b2", `,"cost":1`), item("b2", ""), item("b3", `,"run_at":"2030-01-01T00:00:00Z"`), item("b3", `,"run_at":"2031-01-01T00:00:00Z"`)))
	res := results(t, r)
	codes := make([]string, len(res))
	for i, x := range res {
		codes[i] = fmt.Sprint(x["status"])
		if e, ok := x["error"].(map[string]any); ok {
			codes[i] = e["code"].(string)
		}
	}
	// cost 1 is the default: b2's two items are the same request.
	want := "202 202 idempotency_mismatch 202 202 202 idempotency_mismatch"
	if got := strings.Join(codes, " "); got != want || res[1]["id"] != res[0]["id"] || res[1]["idempotent_replayed"] != true || res[4]["id"] != res[3]["id"] {
		t.Fatalf("batch idempotency: %s, want %s (%v)", got, want, res)
	}
}

func TestIdempotencyUnderConcurrentRequests(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	f.setPolicy(t, "acme-race", slowAdmit)
	const n = 50
	ids := make([]string, n)
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			req, _ := http.NewRequest("POST", f.http.URL+"/v1/tenants/acme-race/jobs", strings.NewReader(webhookJob))
			req.Header.Set("Authorization", "Bearer "+producerToken)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(HeaderIdempotencyKey, "once")
			resp, err := f.http.Client().Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			var body jobRef
			_ = json.NewDecoder(resp.Body).Decode(&body)
			ids[i], statuses[i] = body.ID, resp.StatusCode
		})
	}
	wg.Wait()
	distinct := map[string]bool{}
	for i := range n {
		if statuses[i] != http.StatusAccepted {
			t.Fatalf("request %d: status %d", i, statuses[i])
		}
		distinct[ids[i]] = true
	}
	if len(distinct) != 1 {
		t.Fatalf("%d distinct ids, want exactly 1: %v", len(distinct), distinct)
	}
	if ts := f.tenant(t, "acme-race"); ts["backlog"] != 1.0 || ts["admit_tokens"] != 999.0 {
		t.Errorf("tenant: %v, want one job charged once", ts)
	}
}

// hidden hides a reader's length, so the request is sent chunked.
type hidden struct{ io.Reader }

func TestEnqueueBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, func(o *Options, _ redis.UniversalClient, _ string) { o.MaxJobBytes, o.MaxBatchBytes = 2048, 4096 })
	jobs, bat := "/v1/tenants/acme-bad/jobs", "/v1/tenants/acme-bad/jobs:batch"
	big := `{"type":"webhook","url":"https://e.example","event":"e","payload":"` + strings.Repeat("x", 3000) + `"}`
	cases := []struct {
		name, path, token, body string
		headers                 []string
		status                  int
		code, words             string
	}{
		{"no key", jobs, "", webhookJob, nil, 401, CodeUnauthorized, ""},
		{"tenant outside the key's globs", "/v1/tenants/globex/jobs", producerToken, webhookJob, nil, 403, CodeForbidden, "globex"},
		{"invalid tenant id", "/v1/tenants/acme-%7Bx%7D/jobs", producerToken, webhookJob, nil, 422, CodeInvalid, "tenant"},
		{"not JSON", jobs, producerToken, webhookJob, []string{"Content-Type", "text/plain"}, 415, CodeUnsupportedMedia, ""},
		{"too large", jobs, producerToken, big, nil, 413, CodeTooLarge, ""},
		{"malformed", jobs, producerToken, `{"type":`, nil, 400, CodeMalformed, ""},
		{"two values", jobs, producerToken, webhookJob + `{}`, nil, 400, CodeMalformed, ""},
		{"empty Idempotency-Key", jobs, producerToken, webhookJob, []string{HeaderIdempotencyKey, ""}, 400, CodeMalformed, HeaderIdempotencyKey},
		{"long Idempotency-Key", jobs, producerToken, webhookJob, []string{HeaderIdempotencyKey, strings.Repeat("k", 256)}, 400, CodeMalformed, HeaderIdempotencyKey},
		{"non-ASCII Idempotency-Key", jobs, producerToken, webhookJob, []string{HeaderIdempotencyKey, "clé"}, 400, CodeMalformed, HeaderIdempotencyKey},
		{"unknown field", jobs, producerToken, `{"type":"webhook","colour":"red"}`, nil, 422, CodeInvalid, "colour"},
		{"wrong type", jobs, producerToken, `{"type":"webhook","cost":"1"}`, nil, 422, CodeInvalid, "cost"},
		{"not an object", jobs, producerToken, `[1]`, nil, 422, CodeInvalid, "body"},
		{"no type", jobs, producerToken, `{}`, nil, 422, CodeInvalid, "type"},
		{"unknown type", jobs, producerToken, `{"type":"fax"}`, nil, 422, CodeInvalid, "type"},
		{"no url", jobs, producerToken, `{"type":"webhook","event":"e"}`, nil, 422, CodeInvalid, "url"},
		{"bad url", jobs, producerToken, `{"type":"webhook","event":"e","url":"ftp://x"}`, nil, 422, CodeInvalid, "url"},
		{"bad method", jobs, producerToken, `{"type":"http","url":"https://x.example","method":"BREW"}`, nil, 422, CodeInvalid, "method"},
		{"queue not allowed", jobs, producerToken, `{"type":"task","task_type":"t","queue":"vip"}`, nil, 422, CodeInvalid, "queue"},
		{"field of another type", jobs, producerToken, `{"type":"webhook","url":"https://x.example","event":"e","method":"GET"}`, nil, 422, CodeInvalid, "method"},
		{"zero cost", jobs, producerToken, `{"type":"webhook","url":"https://x.example","event":"e","cost":0}`, nil, 422, CodeInvalid, "cost"},
		{"cost above min(burst, admit.burst)", jobs, producerToken, `{"type":"webhook","url":"https://x.example","event":"e","cost":2}`, nil, 422, CodeInvalid, "cost"},
		{"negative delay", jobs, producerToken, `{"type":"webhook","url":"https://x.example","event":"e","delay":"-1s"}`, nil, 422, CodeInvalid, "delay"},
		{"delay and run_at", jobs, producerToken, `{"type":"webhook","url":"https://x.example","event":"e","delay":"1s","run_at":"2030-01-01T00:00:00Z"}`, nil, 422, CodeInvalid, "run_at"},
		{"bad run_at", jobs, producerToken, `{"type":"webhook","url":"https://x.example","event":"e","run_at":"tomorrow"}`, nil, 422, CodeInvalid, "run_at"},
		{"run_at past 2112", jobs, producerToken, `{"type":"webhook","url":"https://x.example","event":"e","run_at":"2200-01-01T00:00:00Z"}`, nil, 422, CodeInvalid, "run_at"},
		{"max_attempts 0", jobs, producerToken, `{"type":"webhook","url":"https://x.example","event":"e","max_attempts":0}`, nil, 422, CodeInvalid, "max_attempts"},
		{"idempotency_key in a single job", jobs, producerToken, `{"type":"webhook","url":"https://x.example","event":"e","idempotency_key":"k"}`, nil, 422, CodeInvalid, "Idempotency-Key"},
		{"every problem listed", jobs, producerToken, `{"type":"webhook","cost":0,"max_attempts":0}`, nil, 422, CodeInvalid, "url"},
		{"SSRF literal loopback", jobs, producerToken, `{"type":"webhook","url":"http://127.0.0.1:9/h","event":"e"}`, nil, 422, CodeInvalid, "egress"},
		{"SSRF metadata address", jobs, producerToken, `{"type":"http","method":"GET","url":"http://169.254.169.254/latest/meta-data"}`, nil, 422, CodeInvalid, "egress"},
		{"SSRF decimal-encoded loopback", jobs, producerToken, `{"type":"webhook","url":"http://2130706433/h","event":"e"}`, nil, 422, CodeInvalid, "url"},
		{"SSRF mapped IPv6 private", jobs, producerToken, `{"type":"webhook","url":"http://[::ffff:10.0.0.1]/h","event":"e"}`, nil, 422, CodeInvalid, "egress"},
		{"batch: no jobs", bat, producerToken, `{"jobs":[]}`, nil, 422, CodeInvalid, "jobs"},
		{"batch: too many", bat, producerToken, batch(strings.Repeat(`{},`, 1000) + `{}`), nil, 422, CodeInvalid, "jobs"},
		{"batch: unknown field", bat, producerToken, `{"jobs":[` + webhookJob + `],"x":1}`, nil, 422, CodeInvalid, "x"},
		{"batch: malformed", bat, producerToken, `{"jobs":[`, nil, 400, CodeMalformed, ""},
		{"batch: Idempotency-Key header", bat, producerToken, batch(webhookJob), []string{HeaderIdempotencyKey, "k"}, 400, CodeMalformed, ""},
		{"batch: too large", bat, producerToken, batch(big, big), nil, 413, CodeTooLarge, ""},
	}
	for _, tc := range cases {
		r := f.post(t, tc.path, tc.token, tc.body, tc.headers...)
		e, _ := r.body["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if r.status != tc.status || errorCode(r) != tc.code || !strings.Contains(msg, tc.words) {
			t.Errorf("%s: %d %q %q, want %d %q naming %q", tc.name, r.status, errorCode(r), msg, tc.status, tc.code, tc.words)
		}
	}
	// Chunked, so the size is found while reading.
	r := f.send(t, "POST", jobs, producerToken, hidden{strings.NewReader(big)})
	if r.status != http.StatusRequestEntityTooLarge || errorCode(r) != CodeTooLarge {
		t.Errorf("chunked too large: %d %v", r.status, r.body)
	}
	// A batch item above max_job_bytes gets its own 413; the other is stored.
	r = f.post(t, "/v1/tenants/acme-big/jobs:batch", producerToken, batch(big, hook(1)))
	if res := results(t, r); r.status != 202 || res[0]["status"] != 413.0 || res[1]["status"] != 202.0 {
		t.Errorf("batch with a big item: %d %v", r.status, r.body)
	}
	// One message lists every problem.
	r = f.post(t, jobs, producerToken, `{"type":"webhook","cost":0,"max_attempts":0}`)
	for _, field := range []string{"url", "event", "cost", "max_attempts"} {
		if msg := r.body["error"].(map[string]any)["message"].(string); !strings.Contains(msg, field+":") {
			t.Errorf("message %q does not list %s", msg, field)
		}
	}
	if ts := f.tenant(t, "acme-bad"); ts["backlog"] != 0.0 || ts["admit_tokens"] != 1000.0 {
		t.Errorf("after bad requests the tenant changed: %v", ts)
	}
}

func TestCancelOverHTTP(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	id := requireAccepted(t, f.post(t, "/v1/tenants/acme-c/jobs", producerToken, webhookJob, HeaderIdempotencyKey, "c1"), "acme-c", "queued")
	j := f.get(t, "/v1/jobs/"+id, producerToken)
	if j.status != 200 || j.body["type"] != "webhook" || j.body["cost"] != 1.0 || j.body["attempt_count"] != 0.0 ||
		j.body["idempotency_key"] != "c1" || j.body["created"] == nil || j.body["ended"] != nil || j.body["job"].(map[string]any)["event"] != "invoice.paid" {
		t.Fatalf("GET job: %d %v", j.status, j.body)
	}
	if attempts, ok := j.body["attempts"].([]any); !ok || len(attempts) != 0 {
		t.Errorf("attempts = %v, want []", j.body["attempts"])
	}
	if r := f.get(t, "/v1/jobs/"+id, plainToken); r.status != http.StatusForbidden || errorCode(r) != CodeForbidden {
		t.Errorf("GET by a key without the tenant: %d %v, want 403", r.status, r.body)
	}
	if r := f.send(t, "DELETE", "/v1/jobs/"+id, plainToken, nil); r.status != http.StatusForbidden {
		t.Errorf("DELETE by a key without the tenant: %d, want 403", r.status)
	}
	r := f.send(t, "DELETE", "/v1/jobs/"+id, producerToken, nil)
	if r.status != 200 || r.body["id"] != id || r.body["state"] != "canceled" || r.body["canceled_from"] != "queued" || r.body["ended"] == nil {
		t.Fatalf("DELETE: %d %v, want 200 canceled from queued", r.status, r.body)
	}
	if g := f.get(t, "/v1/jobs/"+id, producerToken); g.body["state"] != "canceled" || g.body["job"] != nil {
		t.Errorf("GET after cancel: %v", g.body)
	}
	if r := f.send(t, "DELETE", "/v1/jobs/"+id, producerToken, nil); r.status != http.StatusConflict || errorCode(r) != CodeConflict {
		t.Errorf("second DELETE: %d %v, want 409 conflict", r.status, r.body)
	}
	if ts := f.tenant(t, "acme-c"); ts["backlog"] != 0.0 {
		t.Errorf("backlog after cancel: %v", ts["backlog"])
	}
	missing, _ := store.NewJobID(0, time.Now())
	for _, path := range []string{"/v1/jobs/" + missing, "/v1/jobs/nonsense"} {
		if r := f.get(t, path, producerToken); r.status != http.StatusNotFound || errorCode(r) != CodeNotFound {
			t.Errorf("GET %s: %d, want 404", path, r.status)
		}
		if r := f.send(t, "DELETE", path, producerToken, nil); r.status != http.StatusNotFound {
			t.Errorf("DELETE %s: %d, want 404", path, r.status)
		}
	}
}

func TestEgressAllowOpensLoopbackAtEnqueue(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, func(o *Options, _ redis.UniversalClient, _ string) {
		o.EgressAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	})
	r := f.post(t, "/v1/tenants/acme-local/jobs", producerToken, `{"type":"webhook","url":"http://127.0.0.1:9/h","event":"e"}`)
	requireAccepted(t, r, "acme-local", "queued")
	r = f.post(t, "/v1/tenants/acme-local/jobs", producerToken, `{"type":"webhook","url":"http://10.0.0.1/h","event":"e"}`)
	if r.status != 422 || errorCode(r) != CodeInvalid {
		t.Errorf("10.0.0.1 outside the allow-list: %d %v, want 422", r.status, r.body)
	}
}
