package api

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"testing"
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
