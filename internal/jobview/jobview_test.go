package jobview

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/store"
)

func TestOfShowsResultCallbackAndExcerpts(t *testing.T) {
	body := "ok"
	j := store.Job{ID: "j1_x", Tenant: "acme", Type: "http", State: store.StateSucceeded,
		Created: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), Callback: "https://hooks.example.com/done",
		Result:   &store.JobResult{Status: 200, Headers: map[string]string{"Content-Type": "text/plain"}, Body: &body},
		Attempts: []store.Attempt{{Status: 500, BodyBase64: "//4="}, {Status: 200, Body: "ok"}}}
	b, err := json.Marshal(Of(j))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"result":{"status":200,"headers":{"Content-Type":"text/plain"},"body":"ok","truncated":false}`,
		`"callback":{"url":"https://hooks.example.com/done"}`, `"body_base64":"//4="`, `"created":"2026-03-01T12:00:00.000Z"`,
		`"job":null`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("view %s lacks %s", b, want)
		}
	}
	j.Result, j.Callback = nil, ""
	if b, _ := json.Marshal(Of(j)); strings.Contains(string(b), `"result"`) || strings.Contains(string(b), `"callback"`) {
		t.Errorf("a job without result or callback shows them: %s", b)
	}
}

// TestOfShowsUpstreams: the view lists the upstreams of the job's
// canonical body, [] when it names none.
func TestOfShowsUpstreams(t *testing.T) {
	for body, want := range map[string]string{
		`{"type":"task","task_type":"t","upstreams":["llm","sms"]}`: `"upstreams":["llm","sms"]`,
		`{"type":"task","task_type":"t","upstreams":[]}`:            `"upstreams":[]`,
		`{"type":"task","task_type":"t"}`:                           `"upstreams":[]`,
		`not json`:                                                  `"upstreams":[]`,
	} {
		b, err := json.Marshal(Of(store.Job{ID: "j1_x", Tenant: "acme", Type: "task", Body: []byte(body)}))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), want) {
			t.Errorf("view of %s: %s lacks %s", body, b, want)
		}
	}
}
