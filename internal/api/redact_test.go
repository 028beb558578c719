package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/jobview"
	"github.com/sluicehq/sluice/internal/store"
)

func TestSecretHeader(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"Authorization": true, "authorization": true, "Proxy-Authorization": true, "Cookie": true,
		"X-Api-Key": true, "X-API-KEY": true, "x_api_key": true, "ApiKey": true, "X-Auth-Token": true,
		"X-Client-Secret": true, "X-Amz-Security-Token": true, "X-Password": true, "X-Session-Id": true,
		"X-Hub-Signature-256": true, "X-Credentials": true,
		"Content-Type": false, "X-Account": false, "Accept": false, "User-Agent": false, "X-Request-Id": false,
		"Idempotency-Key": false,
	} {
		if got := jobview.SecretHeader(name); got != want {
			t.Errorf("secretHeader(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestRedactedJobLeavesOtherJobsAlone(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		webhookJob,
		`{"type":"http","url":"https://example.com/x","method":"POST","headers":{"X-Account":"7"},"body":"hi"}`,
		`{"type":"task","task_type":"t","payload":{"authorization":"not a header"},"queue":"default"}`,
	} {
		if got := jobview.RedactedJob(json.RawMessage(body)); string(got) != body {
			t.Errorf("redactedJob(%s) = %s, want it unchanged", body, got)
		}
	}
}

// secretHeaders are the credentials an http job carries upstream; none of
// their values may come back from the API.
var secretHeaders = map[string]string{
	"Authorization":   "Bearer upstream-bearer-1",
	"Cookie":          "sid=upstream-cookie-2",
	"X-Api-Key":       "upstream-apikey-3",
	"X-Session-Id":    "upstream-session-4", // (Proxy-Authorization is hop-by-hop: refused at enqueue)
	"X-Auth-Token":    "upstream-token-5",
	"X-Client-Secret": "upstream-secret-6",
}

// requireRedacted fails unless the view r shows job id with every secret
// header redacted (when it shows the job at all) and no secret value
// anywhere in its body.
func requireRedacted(t *testing.T, what string, r response, showsJob bool) {
	t.Helper()
	raw, _ := json.Marshal(r.body)
	for name, v := range secretHeaders {
		if strings.Contains(string(raw), v) {
			t.Errorf("%s shows %s in clear: %s", what, name, raw)
		}
	}
	if !showsJob {
		return
	}
	j, _ := r.body["job"].(map[string]any)
	h, _ := j["headers"].(map[string]any)
	for name := range secretHeaders {
		if h[name] != jobview.Redacted {
			t.Errorf("%s: headers[%s] = %v, want %q", what, name, h[name], jobview.Redacted)
		}
	}
	if h["X-Account"] != "7" || j["url"] == nil || j["method"] != "POST" || j["body"] != "hi" {
		t.Errorf("%s: job = %v, want the non-secret parts as sent", what, j)
	}
}

// TestViewsRedactUpstreamCredentials: GET, the dead-letter list, replay and
// DELETE never show an http job's credentials, and the worker still sends
// the real values upstream.
func TestViewsRedactUpstreamCredentials(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got http.Header
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Clone()
		mu.Unlock()
		w.WriteHeader(http.StatusNotFound) // a permanent failure: the job goes dead
	}))
	t.Cleanup(receiver.Close)
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	f := newStoreFixture(t, func(o *Options, _ redis.UniversalClient, _ string) { o.EgressAllow = loopback })

	headers := map[string]string{"X-Account": "7"}
	for k, v := range secretHeaders {
		headers[k] = v
	}
	hj, _ := json.Marshal(headers)
	body := fmt.Sprintf(`{"type":"http","method":"POST","url":%q,"headers":%s,"body":"hi"}`, receiver.URL+"/send", hj)
	enq := f.post(t, "/v1/tenants/acme-r/jobs", producerToken, body)
	id := requireAccepted(t, enq, "acme-r", "queued")
	requireRedacted(t, "202", enq, false)
	requireRedacted(t, "GET", f.get(t, "/v1/jobs/"+id, producerToken), true)

	// One attempt as the worker runs it: pass, claim, send, finish.
	if state := runOnce(t, f, loopback, id); state != store.StateDead {
		t.Fatalf("attempt: %q, want dead", state)
	}
	ctx, st := context.Background(), f.srv.opts.Store
	mu.Lock()
	for name, v := range secretHeaders {
		if got.Get(name) != v {
			t.Errorf("receiver got %s = %q, want the real %q", name, got.Get(name), v)
		}
	}
	mu.Unlock()

	dead := f.get(t, "/v1/tenants/acme-r/dead", producerToken)
	jobs, _ := dead.body["jobs"].([]any)
	if dead.status != 200 || len(jobs) != 1 {
		t.Fatalf("dead letters: %d %v, want the one job", dead.status, dead.body)
	}
	requireRedacted(t, "dead letters", response{status: 200, body: jobs[0].(map[string]any)}, true)
	requireRedacted(t, "dead letters page", dead, false)
	requireRedacted(t, "GET dead", f.get(t, "/v1/jobs/"+id, producerToken), true)
	requireRedacted(t, "replay", f.post(t, "/v1/jobs/"+id+"/replay", producerToken, ""), true)
	stored, err := st.GetJob(ctx, id)
	if err != nil || !strings.Contains(string(stored.Body), "upstream-bearer-1") {
		t.Errorf("replayed job %s (%v): want the real Authorization kept for sending", stored.Body, err)
	}
	requireRedacted(t, "DELETE", f.send(t, "DELETE", "/v1/jobs/"+id, producerToken, nil), false)
}
