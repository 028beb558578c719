package api

import (
	"encoding/json"
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
