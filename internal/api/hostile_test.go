package api

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/redistest"
)

// keyspace is every key under a test's prefix: key → its type, whether it
// has a TTL, and the SHA-256 of its DUMP.
type keyspace map[string]string

// snapshot reads the keyspace under prefix, leaving out the API limiter's
// own keys (skip): a refused request is still charged against the API
// limit, by design, and nothing else may change.
func snapshot(t *testing.T, rdb redis.UniversalClient, prefix string, skip map[string]bool) keyspace {
	t.Helper()
	ctx := context.Background()
	out := keyspace{}
	keys, err := redistest.Keys(ctx, rdb, prefix+"*")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if skip[k] {
			continue
		}
		typ, err := rdb.Type(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		ttl, err := rdb.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(contents(t, rdb, k, typ)))
		out[k] = fmt.Sprintf("%s ttl=%v %s", typ, ttl >= 0, hex.EncodeToString(sum[:8]))
	}
	return out
}

// contents is key k's value as bytes that depend on the value only: a
// hash's or a set's members sorted (DUMP walks a hash table in an order that
// a lookup's incremental rehash step may change), DUMP for other types.
func contents(t *testing.T, rdb redis.UniversalClient, k, typ string) string {
	t.Helper()
	ctx := context.Background()
	var parts []string
	var err error
	switch typ {
	case "hash":
		var h map[string]string
		h, err = rdb.HGetAll(ctx, k).Result()
		for f, v := range h {
			parts = append(parts, strconv.Quote(f)+"="+strconv.Quote(v))
		}
	case "set":
		parts, err = rdb.SMembers(ctx, k).Result()
	default:
		var dump string
		dump, err = rdb.Dump(ctx, k).Result()
		parts = []string{dump}
	}
	if err != nil {
		t.Fatalf("read %s %s: %v", typ, k, err)
	}
	slices.Sort(parts)
	return strings.Join(parts, "\n")
}

// diff lists the keys added, removed or changed from a to b.
func (a keyspace) diff(b keyspace) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(a)) {
		switch v, ok := b[k]; {
		case !ok:
			out = append(out, "removed "+k)
		case v != a[k]:
			out = append(out, fmt.Sprintf("changed %s: %s → %s", k, a[k], v))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(b)) {
		if _, ok := a[k]; !ok {
			out = append(out, "added "+k+" "+b[k])
		}
	}
	return out
}

// hostileCase is one bad request. Empty method is POST, empty token the
// producer key, empty ctype application/json; "-" leaves the header out.
type hostileCase struct {
	name, method, path, token, ctype string
	body                             string
	chunked                          bool     // send without Content-Length
	headers                          []string // name, value pairs, added
	status                           int
	code                             string
	allow                            string // the Allow header of a 405
}

// hj is a webhook job with extra members (",..." or "").
func hj(extra string) string {
	return `{"type":"webhook","url":"https://example.com/hook","event":"e"` + extra + `}`
}

// hurl is a webhook job to url (a JSON string's contents).
func hurl(url string) string {
	return `{"type":"webhook","url":"` + url + `","event":"e"}`
}

// hhdr is an http job with one header (JSON-encoded name and value).
func hhdr(name, value string) string {
	n, _ := json.Marshal(name)
	v, _ := json.Marshal(value)
	return `{"type":"http","method":"POST","url":"https://example.com/x","headers":{` + string(n) + `:` + string(v) + `}}`
}

// deep is a task job whose payload nests n arrays.
func deep(n int) string {
	return `{"type":"task","task_type":"t","payload":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}`
}

// TestHostileRequestsChangeNothing sends bad requests of every kind (#18)
// and checks that each gets its documented status and error code in the
// JSON error shape, and that the keyspace under the test's prefix is the
// same afterwards, key by key (type, TTL presence, DUMP), except the API
// limiter's keys <prefix>:rl:{api:<key name>} (docs/api.md "Conventions and errors": a refused
// request is still counted against its API key).
func TestHostileRequestsChangeNothing(t *testing.T) {
	t.Parallel()
	var rdb redis.UniversalClient
	var prefix string
	const jobBytes, batchBytes = 32 << 10, 64 << 10
	f := newStoreFixture(t, func(o *Options, c redis.UniversalClient, p string) {
		rdb, prefix = c, p
		o.MaxJobBytes, o.MaxBatchBytes = jobBytes, batchBytes
	})
	skip := map[string]bool{}
	for _, name := range []string{"producer", "ops", "plain"} {
		skip[prefix+":rl:{"+ReservedLimit+":"+name+"}"] = true
	}

	// State for the bad requests to leave alone: a queued job under an
	// idempotency key, a delayed task job, a tenant policy, a search bucket.
	f.liveTaskWorker(t, "default")
	f.setPolicy(t, "acme-1", slowAdmit)
	id := requireAccepted(t, f.post(t, "/v1/tenants/acme-1/jobs", producerToken, hook(1), HeaderIdempotencyKey, "k1"), "acme-1", "queued")
	requireAccepted(t, f.post(t, "/v1/tenants/acme-1/jobs", producerToken, `{"type":"task","task_type":"t","delay":"1h"}`), "acme-1", "scheduled")
	if r := f.check(t, producerToken, `{"key":"user-1","cost":1}`); r.status != http.StatusOK {
		t.Fatalf("seed check: %d %v", r.status, r.body)
	}

	jobs, bat := "/v1/tenants/acme-1/jobs", "/v1/tenants/acme-1/jobs:batch"
	policyPath, check := "/v1/tenants/acme-1/policy", "/v1/limits/search/check"
	bigJob := hj(`,"payload":"` + strings.Repeat("x", jobBytes) + `"`)
	bigItem := hj(`,"payload":"` + strings.Repeat("x", jobBytes/2) + `"`)
	utf16 := func(s string) string { // UTF-16LE with its BOM
		b := []byte{0xff, 0xfe}
		for _, c := range []byte(s) {
			b = append(b, c, 0)
		}
		return string(b)
	}
	const (
		malformed   = CodeMalformed
		invalid     = CodeInvalid
		unsupported = CodeUnsupportedMedia
	)
	cases := []hostileCase{
		// auth
		{name: "no Authorization", path: jobs, token: "-", body: webhookJob, status: 401, code: CodeUnauthorized},
		{name: "unknown API key", path: jobs, token: "nope", body: webhookJob, status: 401, code: CodeUnauthorized},
		{name: "Basic credentials", path: jobs, token: "-", body: webhookJob, headers: []string{"Authorization", "Basic cHJvZHVjZXI6eA=="}, status: 401, code: CodeUnauthorized},
		{name: "key without the tenant", path: jobs, token: plainToken, body: webhookJob, status: 403, code: CodeForbidden},
		{name: "tenant outside the key's globs", path: "/v1/tenants/globex/jobs", body: webhookJob, status: 403, code: CodeForbidden},
		{name: "policy by a non-admin key", method: "PUT", path: policyPath, body: `{"rate":"1/s"}`, status: 403, code: CodeForbidden},
		{name: "cancel by a key without the tenant", method: "DELETE", path: "/v1/jobs/" + id, token: plainToken, status: 403, code: CodeForbidden},

		// tenant ids
		{name: "tenant id too long", path: "/v1/tenants/acme-" + strings.Repeat("a", 300) + "/jobs", body: webhookJob, status: 422, code: invalid},
		{name: "tenant id ..", path: "/v1/tenants/%2E%2E/jobs", body: webhookJob, status: 422, code: invalid},
		{name: "tenant id .", path: "/v1/tenants/%2E/jobs", body: webhookJob, status: 422, code: invalid},
		{name: "tenant id with braces", path: "/v1/tenants/acme-%7Bx%7D/jobs", body: webhookJob, status: 422, code: invalid},
		{name: "tenant id with a colon", path: "/v1/tenants/acme-a:b/jobs", body: webhookJob, status: 422, code: invalid},
		{name: "tenant id in unicode", path: "/v1/tenants/acme-%C3%A9/jobs", body: webhookJob, status: 422, code: invalid},
		{name: "tenant id with an encoded slash", path: "/v1/tenants/acme-a%2Fb/jobs", body: webhookJob, status: 422, code: invalid},
		{name: "tenant id with NUL", path: "/v1/tenants/acme-%00/jobs", body: webhookJob, status: 422, code: invalid},

		// Content-Type and encodings
		{name: "no Content-Type", path: jobs, ctype: "-", body: webhookJob, status: 415, code: unsupported},
		{name: "text/plain", path: jobs, ctype: "text/plain", body: webhookJob, status: 415, code: unsupported},
		{name: "form encoded", path: jobs, ctype: "application/x-www-form-urlencoded", body: "type=webhook", status: 415, code: unsupported},
		{name: "unparseable Content-Type", path: jobs, ctype: "application/json;;=", body: webhookJob, status: 415, code: unsupported},
		{name: "charset utf-16, UTF-16 body", path: jobs, ctype: "application/json; charset=utf-16", body: utf16(webhookJob), status: 415, code: unsupported},
		{name: "charset latin1, UTF-8 body", path: jobs, ctype: "application/json; charset=iso-8859-1", body: webhookJob, status: 415, code: unsupported},
		{name: "UTF-16 BOM body", path: jobs, body: utf16(webhookJob), status: 400, code: malformed},
		{name: "UTF-8 BOM body", path: jobs, body: "\xef\xbb\xbf" + webhookJob, status: 400, code: malformed},
		{name: "invalid UTF-8 in payload", path: jobs, body: hj(`,"payload":{"s":"a` + "\xff" + `"}`), status: 400, code: malformed},
		{name: "invalid UTF-8 in event", path: jobs, body: `{"type":"webhook","url":"https://example.com/hook","event":"e` + "\xc3\x28" + `"}`, status: 400, code: malformed},
		{name: "invalid UTF-8 in url", path: jobs, body: hurl("https://example.com/\xed\xa0\x80"), status: 400, code: malformed},
		{name: "invalid UTF-8 in a batch item", path: bat, body: batch(hj(`,"payload":"` + "\xfe" + `"`)), status: 400, code: malformed},
		{name: "lone surrogate escape in a task payload", path: jobs, body: `{"type":"task","task_type":"t","payload":"\ud800"}`, status: 400, code: malformed},

		// sizes
		{name: "empty body", path: jobs, body: "", status: 400, code: malformed},
		{name: "whitespace body", path: jobs, body: " \n\t ", status: 400, code: malformed},
		{name: "over max_job_bytes", path: jobs, body: bigJob, status: 413, code: CodeTooLarge},
		{name: "over max_job_bytes, chunked", path: jobs, body: bigJob, chunked: true, status: 413, code: CodeTooLarge},
		{name: "over max_batch_bytes", path: bat, body: batch(bigItem, bigItem, bigItem, bigItem), status: 413, code: CodeTooLarge},
		{name: "batch of 0 items", path: bat, body: `{"jobs":[]}`, status: 422, code: invalid},
		{name: "batch of 1001 items", path: bat, body: batch(strings.Repeat(`{},`, 1000) + `{}`), status: 422, code: invalid},
		{name: "batch without jobs", path: bat, body: `{}`, status: 422, code: invalid},
		{name: "batch of null", path: bat, body: `{"jobs":null}`, status: 422, code: invalid},

		// nesting
		{name: "10 000 [ unclosed", path: jobs, body: strings.Repeat("[", 10_000), status: 400, code: malformed},
		{name: "payload 10 001 deep", path: jobs, body: deep(10_001), status: 400, code: malformed},
		{name: "task payload 1 000 deep", path: jobs, body: deep(1000), status: 422, code: invalid},
		{name: "task payload past the depth bound", path: jobs, body: deep(job.MaxPayloadDepth + 1), status: 422, code: invalid},
		{name: "batch nested 10 000 deep", path: bat, body: `{"jobs":` + strings.Repeat("[", 10_000) + strings.Repeat("]", 10_000) + `}`, status: 400, code: malformed},

		// numbers
		{name: "cost 0", path: jobs, body: hj(`,"cost":0`), status: 422, code: invalid},
		{name: "cost -1", path: jobs, body: hj(`,"cost":-1`), status: 422, code: invalid},
		{name: "cost 1e309", path: jobs, body: hj(`,"cost":1e309`), status: 422, code: invalid},
		{name: "cost 1.5", path: jobs, body: hj(`,"cost":1.5`), status: 422, code: invalid},
		{name: "cost 1e0", path: jobs, body: hj(`,"cost":1e0`), status: 422, code: invalid},
		{name: "cost above int64", path: jobs, body: hj(`,"cost":99999999999999999999`), status: 422, code: invalid},
		{name: "cost max int64", path: jobs, body: hj(`,"cost":9223372036854775807`), status: 422, code: invalid},
		{name: "cost above capacity", path: jobs, body: hj(`,"cost":2`), status: 422, code: invalid},
		{name: "cost as a string", path: jobs, body: hj(`,"cost":"1"`), status: 422, code: invalid},
		{name: "negative delay", path: jobs, body: hj(`,"delay":"-1s"`), status: 422, code: invalid},
		{name: "delay above the bound", path: jobs, body: hj(`,"delay":"1000000h"`), status: 422, code: invalid},
		{name: "delay as a number", path: jobs, body: hj(`,"delay":5`), status: 422, code: invalid},
		{name: "delay and run_at", path: jobs, body: hj(`,"delay":"1s","run_at":"2030-01-01T00:00:00Z"`), status: 422, code: invalid},
		{name: "run_at unparseable", path: jobs, body: hj(`,"run_at":"tomorrow"`), status: 422, code: invalid},
		{name: "run_at past 2112", path: jobs, body: hj(`,"run_at":"9999-12-31T23:59:59Z"`), status: 422, code: invalid},
		{name: "max_attempts 101", path: jobs, body: hj(`,"max_attempts":101`), status: 422, code: invalid},
		{name: "check cost 1e309", path: check, body: `{"key":"user-1","cost":1e309}`, status: 422, code: invalid},
		{name: "check cost 0", path: check, body: `{"key":"user-1","cost":0}`, status: 422, code: invalid},

		// headers
		{name: "http job: Connection", path: jobs, body: hhdr("Connection", "close"), status: 422, code: invalid},
		{name: "http job: Transfer-Encoding", path: jobs, body: hhdr("transfer-encoding", "chunked"), status: 422, code: invalid},
		{name: "http job: Proxy-Authorization", path: jobs, body: hhdr("Proxy-Authorization", "Basic x"), status: 422, code: invalid},
		{name: "http job: CR LF in a value", path: jobs, body: hhdr("X-A", "1\r\nX-Injected: 1"), status: 422, code: invalid},
		{name: "http job: LF in a value", path: jobs, body: hhdr("X-A", "1\nX-B: 2"), status: 422, code: invalid},
		{name: "http job: header name with a space", path: jobs, body: hhdr("X A", "1"), status: 422, code: invalid},
		{name: "Idempotency-Key too long", path: jobs, body: webhookJob, headers: []string{HeaderIdempotencyKey, strings.Repeat("k", 256)}, status: 400, code: malformed},
		{name: "Idempotency-Key with a tab", path: jobs, body: webhookJob, headers: []string{HeaderIdempotencyKey, "a\tb"}, status: 400, code: malformed},
		{name: "Idempotency-Key twice", path: jobs, body: webhookJob, headers: []string{HeaderIdempotencyKey, "a", HeaderIdempotencyKey, "b"}, status: 400, code: malformed},
		{name: "Idempotency-Key on a batch", path: bat, body: batch(webhookJob), headers: []string{HeaderIdempotencyKey, "a"}, status: 400, code: malformed},
		{name: "If-Match not a number", method: "PUT", path: policyPath, token: adminToken, body: `{"rate":"1/s"}`, headers: []string{"If-Match", "abc"}, status: 400, code: malformed},
		{name: "If-Match negative", method: "PUT", path: policyPath, token: adminToken, body: `{"rate":"1/s"}`, headers: []string{"If-Match", `"-1"`}, status: 400, code: malformed},
		{name: "If-Match weak", method: "PUT", path: policyPath, token: adminToken, body: `{"rate":"1/s"}`, headers: []string{"If-Match", `W/"1"`}, status: 400, code: malformed},
		{name: "If-Match stale", method: "PUT", path: policyPath, token: adminToken, body: `{"rate":"1/s"}`, headers: []string{"If-Match", `"7"`}, status: 409, code: CodeConflict},

		// methods
		{name: "PUT on the jobs route", method: "PUT", path: jobs, body: webhookJob, status: 405, code: CodeMethodNotAllowed, allow: "GET, POST"},
		{name: "PATCH on the jobs route", method: "PATCH", path: jobs, body: webhookJob, status: 405, code: CodeMethodNotAllowed, allow: "GET, POST"},
		{name: "GET on the batch route", method: "GET", path: bat, status: 405, code: CodeMethodNotAllowed, allow: "POST"},
		{name: "DELETE on a tenant", method: "DELETE", path: "/v1/tenants/acme-1", status: 405, code: CodeMethodNotAllowed, allow: "GET"},
		{name: "POST on a job", path: "/v1/jobs/" + id, body: `{}`, status: 405, code: CodeMethodNotAllowed, allow: "GET, DELETE"},
		{name: "unknown route", path: "/v1/tenants/acme-1/jobz", body: webhookJob, status: 404, code: CodeNotFound},

		// schemes, userinfo, IPv6 zones, hosts
		{name: "ftp URL", path: jobs, body: hurl("ftp://example.com/x"), status: 422, code: invalid},
		{name: "file URL", path: jobs, body: hurl("file:///etc/passwd"), status: 422, code: invalid},
		{name: "javascript URL", path: jobs, body: hurl("javascript:alert(1)"), status: 422, code: invalid},
		{name: "gopher URL", path: jobs, body: hurl("gopher://example.com:70/_x"), status: 422, code: invalid},
		{name: "data URL", path: jobs, body: hurl("data:text/plain,x"), status: 422, code: invalid},
		{name: "relative URL", path: jobs, body: hurl("/hook"), status: 422, code: invalid},
		{name: "user and password in the URL", path: jobs, body: hurl("http://u:p@example.com/"), status: 422, code: invalid},
		{name: "user in the URL", path: jobs, body: hurl("https://u@example.com/"), status: 422, code: invalid},
		{name: "IPv6 link-local with a zone", path: jobs, body: hurl("http://[fe80::1%25eth0]/"), status: 422, code: invalid},
		{name: "IPv6 global with a zone", path: jobs, body: hurl("http://[2606:4700:4700::1111%25eth0]/"), status: 422, code: invalid},
		{name: "no host", path: jobs, body: hurl("http://"), status: 422, code: invalid},
		{name: "empty host", path: jobs, body: hurl("http:///x"), status: 422, code: invalid},
		{name: "port only", path: jobs, body: hurl("http://:80/x"), status: 422, code: invalid},
		{name: "port above 65535", path: jobs, body: hurl("http://example.com:99999/x"), status: 422, code: invalid},
		{name: "space in the URL", path: jobs, body: hurl("http://example.com/a b"), status: 422, code: invalid},

		// unknown fields and other routes
		{name: "unknown field", path: jobs, body: hj(`,"colour":"red"`), status: 422, code: invalid},
		{name: "unknown field in a batch", path: bat, body: `{"jobs":[` + webhookJob + `],"x":1}`, status: 422, code: invalid},
		{name: "type a number", path: jobs, body: `{"type":1}`, status: 422, code: invalid},
		{name: "policy: unknown field", method: "PUT", path: policyPath, token: adminToken, body: `{"rat":"1/s"}`, status: 422, code: invalid},
		{name: "policy: rate 0", method: "PUT", path: policyPath, token: adminToken, body: `{"rate":"0/s"}`, status: 422, code: invalid},
		{name: "policy: webhook_secrets", method: "PUT", path: policyPath, token: adminToken, body: `{"webhook_secrets":["whsec_x"]}`, status: 422, code: invalid},
		{name: "pause until the past", path: "/v1/tenants/acme-1/pause", token: adminToken, body: `{"until":"2001-01-01T00:00:00Z"}`, status: 422, code: invalid},
		{name: "replay of a queued job", path: "/v1/jobs/" + id + "/replay", token: adminToken, body: `{}`, status: 409, code: CodeConflict},
		{name: "cancel of no job", method: "DELETE", path: "/v1/jobs/nonsense", status: 404, code: CodeNotFound},
	}
	if len(cases) < 40 {
		t.Fatalf("%d cases, #18 asks for at least 40", len(cases))
	}
	for _, tc := range cases {
		before := snapshot(t, rdb, prefix, skip)
		status, header, body := f.hostile(t, tc)
		after := snapshot(t, rdb, prefix, skip)
		if status != tc.status || errorShape(body, tc.code) != "" {
			t.Errorf("%s: %d %s, want %d %q in the error shape: %s", tc.name, status, trim(body), tc.status, tc.code, errorShape(body, tc.code))
		}
		if ctype := header.Get("Content-Type"); ctype != "application/json" {
			t.Errorf("%s: Content-Type %q, want application/json", tc.name, ctype)
		}
		if allow := header.Get("Allow"); allow != tc.allow {
			t.Errorf("%s: Allow %q, want %q", tc.name, allow, tc.allow)
		}
		if d := before.diff(after); len(d) > 0 {
			t.Errorf("%s: the request changed Redis:\n  %s", tc.name, strings.Join(d, "\n  "))
		}
	}

	// The snapshot sees writes: a valid enqueue changes it.
	before := snapshot(t, rdb, prefix, skip)
	requireAccepted(t, f.post(t, jobs, producerToken, hook(2)), "acme-1", "queued")
	if len(before.diff(snapshot(t, rdb, prefix, skip))) == 0 {
		t.Error("an accepted job left the snapshot as it was: the snapshot misses writes")
	}
}

// hostile sends tc as it is (no redirect followed) and returns the status,
// the header and the raw body.
func (f *fixture) hostile(t *testing.T, tc hostileCase) (int, http.Header, []byte) {
	t.Helper()
	var body io.Reader = strings.NewReader(tc.body)
	if tc.chunked {
		body = hidden{body}
	}
	req, err := http.NewRequest(cmp.Or(tc.method, "POST"), f.http.URL+tc.path, body)
	if err != nil {
		t.Fatalf("%s: %v", tc.name, err)
	}
	switch tc.token {
	case "":
		req.Header.Set("Authorization", "Bearer "+producerToken)
	case "-":
	default:
		req.Header.Set("Authorization", "Bearer "+tc.token)
	}
	switch tc.ctype {
	case "":
		req.Header.Set("Content-Type", "application/json")
	case "-":
	default:
		req.Header.Set("Content-Type", tc.ctype)
	}
	for i := 0; i+1 < len(tc.headers); i += 2 {
		req.Header.Add(tc.headers[i], tc.headers[i+1])
	}
	client := *f.http.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", tc.name, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, raw
}

// errorShape is "" when raw is {"error":{"code":code,"message":"…"}}
// (a batch answer may add "results"), else what is wrong.
func errorShape(raw []byte, code string) string {
	var body map[string]json.RawMessage
	if err := json.Unmarshal(raw, &body); err != nil {
		return "not a JSON object: " + err.Error()
	}
	for k := range body {
		if k != "error" && k != "results" {
			return "unexpected member " + k
		}
	}
	var e map[string]any
	if err := json.Unmarshal(body["error"], &e); err != nil || len(e) != 2 {
		return fmt.Sprintf("error is not {code, message}: %s", body["error"])
	}
	msg, _ := e["message"].(string)
	if e["code"] != code || msg == "" {
		return fmt.Sprintf("code %v message %q", e["code"], msg)
	}
	return ""
}

func trim(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}
