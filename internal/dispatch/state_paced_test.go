package dispatch

import (
	"context"
	"io"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/upstream"
	"github.com/sluicehq/sluice/internal/wire"
)

// A tenant whose upstream reported a tight quota has a paced-rate series;
// one without a quota has none.
func TestStateCollectorPacedRate(t *testing.T) {
	t.Parallel()
	rdb, _, st := realStore(t, 1, 0)
	ctx := context.Background()
	for _, tn := range []string{"acme", "globex"} {
		if _, err := st.Enqueue(ctx, tn, []store.Item{{Type: "webhook", Body: []byte(`{}`)}}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := st.Pass(ctx, 0, store.PassConfig{Lead: time.Second, MinLead: -1, Capacity: -1})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Released {
		if r.Tenant != "acme" {
			continue
		}
		c, err := st.Claim(ctx, r.ID, r.Gen, time.Second)
		if err != nil || c.Outcome != store.ClaimOK {
			t.Fatalf("claim: %+v, %v", c, err)
		}
		o := wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200,
			Quota: &wire.Quota{Unit: wire.QuotaRequests, Remaining: 5, ResetIn: time.Hour, Source: "RateLimit"}}
		if _, err := st.Finish(ctx, r.ID, r.Gen, o, store.FinishConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	got := gatherGauges(t, NewStateCollector(st, rdb, StateConfig{}, nil, slog.New(slog.NewTextHandler(io.Discard, nil))), "sluice_tenant_paced_rate", "tenant")
	want := 5 * (1 - store.PaceMargin) / 3600 // 5 left over an hour, less the margin
	if len(got) != 1 || math.Abs(got["acme"]-want) > want/100 {
		t.Fatalf("sluice_tenant_paced_rate = %v, want acme ≈ %v only", got, want)
	}
}

// An upstream paced by a reported quota has a remaining series; one with
// pacing off, or none reported, has none.
func TestStateCollectorUpstreamQuota(t *testing.T) {
	t.Parallel()
	rdb, _, st := realStore(t, 1, 0)
	ctx := context.Background()
	for name, pacing := range map[string]string{"gh": upstream.PacingHeaders, "quiet": upstream.PacingHeaders, "off": upstream.PacingOff} {
		cfg := upstream.Config{Rate: bucket.Rate{Tokens: 10, Per: time.Second}, Burst: 1, PauseScope: upstream.ScopeUpstream, Pacing: pacing}
		if _, err := st.PutUpstream(ctx, name, cfg, quota.SourceAPI, ""); err != nil {
			t.Fatal(err)
		}
	}
	q := &wire.Quota{Unit: wire.QuotaRequests, Remaining: 42, Limit: 5000, ResetIn: time.Hour, Source: "X-RateLimit-Remaining"}
	for _, name := range []string{"gh", "off"} {
		if _, err := st.UpstreamAnswer(ctx, name, q, time.Now(), 1, 0); err != nil {
			t.Fatal(err)
		}
	}
	got := gatherGauges(t, NewStateCollector(st, rdb, StateConfig{}, nil, slog.New(slog.NewTextHandler(io.Discard, nil))), "sluice_upstream_quota_remaining", "upstream", "unit")
	if len(got) != 1 || got["gh/requests"] != 42 {
		t.Fatalf("sluice_upstream_quota_remaining = %v, want gh/requests 42 only", got)
	}
}

// gatherGauges collects c once and returns the gauge name's series by their
// labels' values (those named, joined by "/").
func gatherGauges(t *testing.T, c prometheus.Collector, name string, labels ...string) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			byName := map[string]string{}
			for _, l := range m.GetLabel() {
				byName[l.GetName()] = l.GetValue()
			}
			vals := make([]string, len(labels))
			for i, l := range labels {
				vals[i] = byName[l]
			}
			got[strings.Join(vals, "/")] = m.GetGauge().GetValue()
		}
	}
	return got
}
