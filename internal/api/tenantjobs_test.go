package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/webhook"
	"github.com/sluicehq/sluice/internal/worker"
)

// walkTenantJobs walks GET /v1/tenants/{tenant}/jobs with query q, limit at a
// time, failing on a bad page or a repeat; it returns the ids in walk order.
func (f *fixture) walkTenantJobs(t *testing.T, tenant, q string, limit int) []string {
	t.Helper()
	var ids []string
	cursor := ""
	for pages := 0; ; pages++ {
		path := "/v1/tenants/" + tenant + "/jobs?limit=" + strconv.Itoa(limit) + "&" + q
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		r := f.get(t, path, producerToken)
		items, _ := r.body["jobs"].([]any)
		if r.status != http.StatusOK || len(items) > limit || pages > 100 {
			t.Fatalf("GET %s: %d %v", path, r.status, r.body)
		}
		for _, it := range items {
			v := it.(map[string]any)
			id := v["id"].(string)
			if slices.Contains(ids, id) || v["tenant"] != tenant {
				t.Fatalf("%s: job %v listed twice or not the tenant's", q, v)
			}
			ids = append(ids, id)
		}
		next, _ := r.body["cursor"].(string)
		if next == "" {
			return ids
		}
		cursor = next
	}
}

// A tenant's jobs are listed by state through a real throttler, page by
// page both ways, each once; bad parameters are 400 malformed.
func TestListTenantJobs(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	dead := f.deadJobs(t, "acme-jobs", 2)
	var queued, delayed []string
	for range 5 {
		queued = append(queued, requireAccepted(t, f.post(t, "/v1/tenants/acme-jobs/jobs", producerToken, webhookJob), "acme-jobs", "queued"))
	}
	for range 3 {
		delayed = append(delayed, requireAccepted(t, f.post(t, "/v1/tenants/acme-jobs/jobs", producerToken,
			`{"type":"webhook","url":"https://example.com/hook","event":"e","payload":{},"delay":"1h"}`), "acme-jobs", "scheduled"))
	}
	for _, tc := range []struct {
		state string
		want  []string
	}{{"", queued}, {"state=queued", queued}, {"state=delayed", delayed}, {"state=dead", dead}, {"state=running", nil}} {
		for _, limit := range []int{2, 500} {
			if got := f.walkTenantJobs(t, "acme-jobs", tc.state, limit); !slices.Equal(got, tc.want) {
				t.Errorf("%s, limit %d: %q, want %q", tc.state, limit, got, tc.want)
			}
			newest := slices.Clone(tc.want)
			slices.Reverse(newest)
			if got := f.walkTenantJobs(t, "acme-jobs", tc.state+"&order=newest", limit); !slices.Equal(got, newest) {
				t.Errorf("%s newest, limit %d: %q, want %q", tc.state, limit, got, newest)
			}
		}
	}
	first := f.get(t, "/v1/tenants/acme-jobs/jobs?state=queued&limit=1", producerToken)
	cur, _ := first.body["cursor"].(string)
	for _, q := range []string{"state=done", "order=random", "limit=0", "limit=501", "limit=x", "cursor=%25%25",
		"state=dead&cursor=" + url.QueryEscape(cur), "order=newest&cursor=" + url.QueryEscape(cur)} {
		r := f.get(t, "/v1/tenants/acme-jobs/jobs?"+q, producerToken)
		if e, _ := r.body["error"].(map[string]any); r.status != http.StatusBadRequest || e["code"] != CodeMalformed {
			t.Errorf("?%s: %d %v, want 400 malformed", q, r.status, r.body)
		}
	}
	if r := f.get(t, "/v1/tenants/globex/jobs", producerToken); r.status != http.StatusForbidden {
		t.Errorf("another tenant's jobs: %d, want 403", r.status)
	}
}

// POST /v1/tenants/{tenant}/jobs:cancel through a real throttler cancels
// the jobs of one event, a few per call along the cursor, leaves the
// others queued in order, and a real callback sender tells each canceled
// job's callback; a repeat cancels nothing; bad input is 400 and cancels
// nothing; a producer key is refused.
func TestCancelTenantJobsByAPI(t *testing.T) {
	t.Parallel()
	var rdb redis.UniversalClient
	var prefix string
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	f := newStoreFixture(t, func(o *Options, r redis.UniversalClient, p string) {
		o.EgressAllow, rdb, prefix = loopback, r, p
	})
	var mu sync.Mutex
	var told []string
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var cb struct {
			Data struct {
				JobID string `json:"job_id"`
				State string `json:"state"`
			} `json:"data"`
		}
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &cb)
		mu.Lock()
		told = append(told, cb.Data.JobID+" "+cb.Data.State+" "+string(body))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(receiver.Close)

	var cancel, keep []string
	for i := range 6 {
		event := "order.kept"
		if i%2 == 0 {
			event = "order.stale"
		}
		body := `{"type":"webhook","url":"https://example.com/hook","event":"` + event + `","payload":{},"callback":{"url":"` + receiver.URL + `/cb"}}`
		id := requireAccepted(t, f.post(t, "/v1/tenants/acme-bulk/jobs", producerToken, body), "acme-bulk", "queued")
		if i%2 == 0 {
			cancel = append(cancel, id)
		} else {
			keep = append(keep, id)
		}
	}
	for _, body := range []string{`{"state":"running"}`, `{"state":"dead"}`, `{"limit":0}`, `{"limit":1001}`,
		`{"before":"yesterday"}`, `{"cursor":"zz"}`} {
		r := f.post(t, "/v1/tenants/acme-bulk/jobs:cancel", adminToken, body)
		if e, _ := r.body["error"].(map[string]any); r.status != http.StatusBadRequest || e["code"] != CodeMalformed {
			t.Errorf("%s: %d %v, want 400 malformed", body, r.status, r.body)
		}
	}
	if r := f.post(t, "/v1/tenants/acme-bulk/jobs:cancel", producerToken, `{}`); r.status != http.StatusForbidden {
		t.Errorf("a producer key: %d, want 403", r.status)
	}
	total, calls := 0, 0
	for cursor := ""; ; calls++ {
		body := `{"event":"order.stale","limit":2,"before":"` + time.Now().Add(time.Hour).Format(time.RFC3339) + `"`
		if cursor != "" {
			body += `,"cursor":"` + cursor + `"`
		}
		r := f.post(t, "/v1/tenants/acme-bulk/jobs:cancel", adminToken, body+"}")
		n, _ := r.body["canceled"].(float64)
		if r.status != http.StatusOK || n > 2 || calls > 10 {
			t.Fatalf("call %d: %d %v", calls, r.status, r.body)
		}
		total += int(n)
		next, _ := r.body["cursor"].(string)
		if next == "" {
			break
		}
		cursor = next
	}
	if total != len(cancel) {
		t.Fatalf("canceled %d, want %d", total, len(cancel))
	}
	if got := f.walkTenantJobs(t, "acme-bulk", "state=queued", 10); !slices.Equal(got, keep) {
		t.Fatalf("queued after: %q, want %q", got, keep)
	}
	if r := f.post(t, "/v1/tenants/acme-bulk/jobs:cancel", adminToken, `{"event":"order.stale"}`); r.status != 200 || r.body["canceled"] != 0.0 {
		t.Fatalf("repeated: %d %v, want none canceled", r.status, r.body)
	}

	key, err := policy.ParseWebhookSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	client := webhook.NewClient(webhook.ClientConfig{Allow: loopback})
	t.Cleanup(client.CloseIdleConnections)
	cb, err := worker.NewCallbacks(worker.CallbacksConfig{Store: f.srv.opts.Store, Client: client, Redis: rdb, Prefix: prefix,
		Poll: 50 * time.Millisecond, Signing: &worker.SigningKeys{File: func(string) [][]byte { return [][]byte{key} }}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	if err := cb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cb.Stop)
	var got []string
	redistest.PollMsg(t, 10*time.Second, func() (bool, string) {
		mu.Lock()
		got = slices.Clone(told)
		mu.Unlock()
		return len(got) >= len(cancel), fmt.Sprintf("callbacks told %q, want the %d canceled jobs", got, len(cancel))
	})
	for _, id := range cancel {
		if !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, id) && strings.Contains(s, "canceled") }) {
			t.Fatalf("callbacks %q: none tells canceled job %s", got, id)
		}
	}
}
