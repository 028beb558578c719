package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// The tenant view shows a reported quota until its reset, and the paced
// rate only while it binds.
func TestTenantViewQuota(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	st := store.TenantState{Now: now, IntervalUS: 20_000, PacedIntervalUS: 250_000, // 50/s, paced 4/s
		Quota: &store.Quota{Unit: wire.QuotaRequests, Remaining: 40, Limit: 100, ResetAt: now.Add(10 * time.Second),
			Source: "X-RateLimit-Remaining", InFlight: 2}}
	q, rate := quotaViewOf(st)
	b, err := json.Marshal(q)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"remaining":40,"limit":100,"reset_at":"2026-12-06T12:00:10.000Z","unit":"requests","source_header":"X-RateLimit-Remaining","in_flight":2}`
	if string(b) != want || rate == nil || *rate != 4 {
		t.Fatalf("quota %s, paced rate %v; want %s, 4", b, rate, want)
	}
	st.PacedIntervalUS = 10_000 // faster than the rate: does not bind
	if _, rate := quotaViewOf(st); rate != nil {
		t.Errorf("a roomy quota's paced rate = %v, want null", *rate)
	}
	st.Now = st.Quota.ResetAt
	if q, rate := quotaViewOf(st); q != nil || rate != nil {
		t.Errorf("at the reset: %+v, %v; want null, null", q, rate)
	}
}

// TestGetUpstreamQuota: GET /v1/upstreams/{name} shows the quota the
// upstream's answers reported and the paced rate while pacing headers and
// pause_scope upstream pace it; pacing off shows neither; a bad pacing is
// a 422 naming the field.
func TestGetUpstreamQuota(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	if r := f.putUpstream(t, "gh", adminToken, `{"rate":"10/s","pause_scope":"upstream"}`); r.status != http.StatusCreated ||
		r.body["config"].(map[string]any)["pacing"] != "headers" {
		t.Fatalf("create: %d %v", r.status, r.body)
	}
	q := &wire.Quota{Unit: wire.QuotaRequests, Remaining: 300, Limit: 5000, ResetIn: 20 * time.Minute, Source: "X-RateLimit-Remaining"}
	if ok, err := f.srv.opts.Store.UpstreamAnswer(context.Background(), "gh", q, time.Now(), 1, 0); !ok || err != nil {
		t.Fatalf("answer: %v, %v", ok, err)
	}
	rt, _ := f.get(t, "/v1/upstreams/gh", adminToken).body["runtime"].(map[string]any)
	quota, _ := rt["quota"].(map[string]any)
	rate, _ := rt["paced_rate"].(float64)
	if quota["remaining"] != 300.0 || quota["limit"] != 5000.0 || quota["unit"] != "requests" ||
		quota["source_header"] != "X-RateLimit-Remaining" || quota["in_flight"] != 0.0 || quota["reset_at"] == nil {
		t.Fatalf("quota %v", rt["quota"])
	}
	if want := 300 * (1 - store.PaceMargin) / 1200; rate < want*0.99 || rate > want*1.01 {
		t.Fatalf("paced rate %v, want about %v (300 over 20 min, 5 %% margin)", rt["paced_rate"], want)
	}
	if r := f.putUpstream(t, "gh", adminToken, `{"rate":"10/s","pause_scope":"upstream","pacing":"off"}`); r.status != http.StatusOK {
		t.Fatalf("pacing off: %d %v", r.status, r.body)
	}
	rt, _ = f.get(t, "/v1/upstreams/gh", adminToken).body["runtime"].(map[string]any)
	if rt["quota"] != nil || rt["paced_rate"] != nil {
		t.Errorf("pacing off: quota %v, paced rate %v; want null, null", rt["quota"], rt["paced_rate"])
	}
	r := f.putUpstream(t, "gh", adminToken, `{"rate":"10/s","pacing":"slow"}`)
	if r.status != http.StatusUnprocessableEntity || !strings.Contains(errorMessage(r), "pacing") {
		t.Errorf("bad pacing: %d %v, want 422 naming pacing", r.status, r.body)
	}
}
