package api

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/store"
)

// Tests of the findings of a hostile probe (#18): job input refused at
// enqueue, changing nothing.

// errorOf is the code and message of an error body (or batch result).
func errorOf(m map[string]any) (code, msg string) {
	e, _ := m["error"].(map[string]any)
	code, _ = e["code"].(string)
	msg, _ = e["message"].(string)
	return code, msg
}

func TestEnqueueRefusesHostileInput(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	f.setPolicy(t, "acme-probe", store.Overrides{Burst: p64(50), AdmitBurst: p64(20)})
	jobs := "/v1/tenants/acme-probe/jobs"
	cases := []struct {
		name, body  string
		status      int
		code, words string
	}{
		{"invalid UTF-8 in payload", "{\"type\":\"webhook\",\"url\":\"https://x.example\",\"event\":\"e\",\"payload\":{\"p\":\"\xC0\xAF\"}}",
			400, CodeMalformed, "invalid UTF-8 in payload.p (byte "},
		{"invalid UTF-8 in event", "{\"type\":\"webhook\",\"url\":\"https://x.example\",\"event\":\"e\xC0\xAF\"}",
			400, CodeMalformed, "invalid UTF-8 in event"},
		{"invalid UTF-8 in an http body", "{\"type\":\"http\",\"method\":\"POST\",\"url\":\"https://x.example\",\"body\":\"\xff\"}",
			400, CodeMalformed, "invalid UTF-8 in body"},
		{"invalid UTF-8 in a key", "{\"type\":\"task\",\"task_type\":\"t\",\"payload\":{\"\xfe\":1}}",
			400, CodeMalformed, "a key of payload"},
		{"spaces in the url", `{"type":"http","method":"GET","url":"https://x.example/a b?c=d HTTP/1.0"}`,
			422, CodeInvalid, "url: byte 19 is a space"},
		{"tab in the url", `{"type":"http","method":"GET","url":"https://x.example/a?b=\tc"}`, 422, CodeInvalid, "url:"},
		{"control character in the url", `{"type":"webhook","url":"https://x.example/\u0001","event":"e"}`, 422, CodeInvalid, "url:"},
		{"raw non-ASCII query", `{"type":"http","method":"GET","url":"https://x.example/?q=\u00e9"}`, 422, CodeInvalid, "url: the query"},
		{"relative url", `{"type":"http","method":"GET","url":"/a"}`, 422, CodeInvalid, "url:"},
		{"Connection header", `{"type":"http","method":"GET","url":"https://x.example","headers":{"Connection":"Upgrade"}}`,
			422, CodeInvalid, `"Connection" is hop-by-hop`},
		{"lower-case transfer-encoding", `{"type":"http","method":"POST","url":"https://x.example","headers":{"transfer-encoding":"chunked"}}`,
			422, CodeInvalid, `"transfer-encoding" is hop-by-hop`},
		{"Proxy-Authorization", `{"type":"http","method":"GET","url":"https://x.example","headers":{"PROXY-AUTHORIZATION":"Basic eA=="}}`,
			422, CodeInvalid, `"PROXY-AUTHORIZATION" is hop-by-hop`},
		{"cost above every capacity", `{"type":"webhook","url":"https://x.example","event":"e","cost":1000001}`,
			422, CodeInvalid, "min(burst, admit.burst) = 20 and"},
		{"cost above the tenant's capacity", `{"type":"webhook","url":"https://x.example","event":"e","cost":21}`,
			422, CodeInvalid, "= 20"},
	}
	for _, tc := range cases {
		r := f.post(t, jobs, producerToken, tc.body)
		code, msg := errorOf(r.body)
		if r.status != tc.status || code != tc.code || !strings.Contains(msg, tc.words) {
			t.Errorf("%s: %d %q %q, want %d %q naming %q", tc.name, r.status, code, msg, tc.status, tc.code, tc.words)
		}
		if strings.Contains(msg, "1000000") {
			t.Errorf("%s: %q names policy.MaxBurst, not the tenant's capacity", tc.name, msg)
		}
	}
	if ts := f.tenant(t, "acme-probe"); ts["backlog"] != 0.0 || ts["admit_tokens"] != 20.0 {
		t.Errorf("after refused requests the tenant changed: %v", ts)
	}
	// The end-to-end headers and a percent-encoded URL still pass.
	requireAccepted(t, f.post(t, jobs, producerToken,
		`{"type":"http","method":"GET","url":"https://x.example/a%20b?c=%C3%A9","headers":{"Authorization":"x","X-Proxy-Id":"y"}}`),
		"acme-probe", "queued")
}

func TestBatchRefusesInvalidUTF8PerItem(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	bad := "{\"type\":\"webhook\",\"url\":\"https://x.example\",\"event\":\"e\",\"payload\":[\"ok\",\"\xC0\xAF\"]}"
	r := f.post(t, "/v1/tenants/acme-utf8/jobs:batch", producerToken,
		batch(hook(0), bad, `{"type":"webhook","url":"https://x.example/a b","event":"e"}`,
			`{"type":"webhook","url":"https://x.example","event":"e","cost":5000000}`))
	if r.status != http.StatusAccepted {
		t.Fatalf("batch: %d %v, want 202", r.status, r.body)
	}
	res := results(t, r)
	for i, want := range []struct {
		status      float64
		code, words string
	}{{202, "", ""}, {400, CodeMalformed, "invalid UTF-8 in payload[1]"}, {422, CodeInvalid, "url:"}, {422, CodeInvalid, "admit.burst) = 1 and"}} {
		code, msg := errorOf(res[i])
		if res[i]["status"] != want.status || code != want.code || !strings.Contains(msg, want.words) {
			t.Errorf("item %d: %v, want %v %q naming %q", i, res[i], want.status, want.code, want.words)
		}
	}
	if ts := f.tenant(t, "acme-utf8"); ts["backlog"] != 1.0 {
		t.Errorf("backlog %v, want the one valid item", ts["backlog"])
	}
	// Every item malformed: the batch answers the first refusal, 400.
	r = f.post(t, "/v1/tenants/acme-utf8/jobs:batch", producerToken, batch(bad))
	if code, msg := errorOf(r.body); r.status != http.StatusBadRequest || code != CodeMalformed ||
		!strings.Contains(msg, "payload[1]") || len(results(t, r)) != 1 {
		t.Errorf("all malformed: %d %v, want 400 malformed with results", r.status, r.body)
	}
}

func TestPauseRefusesAPastUntil(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	requireAccepted(t, f.post(t, "/v1/tenants/acme-pp/jobs", producerToken, hook(1)), "acme-pp", "queued")
	if r := f.post(t, "/v1/tenants/acme-pp/pause", adminToken, ""); r.status != 200 || r.body["admin_paused"] != true {
		t.Fatalf("pause: %d %v", r.status, r.body)
	}
	past := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	for _, until := range []string{past, "0001-01-01T00:00:00Z", "1970-01-01T00:00:00Z"} {
		r := f.post(t, "/v1/tenants/acme-pp/pause", adminToken, `{"until":"`+until+`"}`)
		if code, msg := errorOf(r.body); r.status != 422 || code != CodeInvalid || !strings.Contains(msg, "until:") ||
			!strings.Contains(msg, "not in the future") {
			t.Errorf("pause until %s: %d %v, want 422 invalid naming until", until, r.status, r.body)
		}
	}
	ts := f.tenant(t, "acme-pp")
	if ts["admin_paused"] != true || ts["admin_paused_until"] != nil || ts["next_eligible_at"] != nil {
		t.Errorf("after refused pauses the untimed pause changed: %v", ts)
	}
}
