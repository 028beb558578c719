package worker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/store"
)

func TestParseCost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in     string
		want   int64
		reason string // "" = valid
	}{
		{"7", 7, ""}, {" 42 ", 42, ""}, {"0", 0, ""}, {"1000000", 1_000_000, ""},
		{"1000001", 0, costOverflow}, {"99999999999999999999", 0, costOverflow},
		{"-1", 0, costNegative}, {"-99999999999999999999", 0, costNegative},
		{"7 tokens", 0, costNotInteger}, {"1.5", 0, costNotInteger}, {"", 0, costNotInteger}, {"0x10", 0, costNotInteger},
	} {
		got, err := ParseCost(tc.in)
		switch {
		case tc.reason == "" && (err != nil || got != tc.want):
			t.Errorf("ParseCost(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		case tc.reason != "" && (err == nil || err.Error() != tc.reason):
			t.Errorf("ParseCost(%q) = %d, %v; want error %q", tc.in, got, err, tc.reason)
		}
	}
}

// costSource is an UpstreamSettings source (the cost headers) that counts
// its calls.
type costSource struct {
	mu      sync.Mutex
	headers map[string]string
	asked   [][]string
	err     error
}

func (s *costSource) UpstreamSettings(_ context.Context, ups []string) ([]quota.UpstreamSettings, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, slices.Clone(ups))
	if s.err != nil {
		return nil, s.err
	}
	out := make([]quota.UpstreamSettings, len(ups))
	for i, u := range ups {
		out[i] = quota.UpstreamSettings{Found: true, CostHeader: s.headers[u]}
	}
	return out, nil
}

// The cost reader takes the first of the job's upstreams whose header the
// response carries with a valid value; bad values are ignored and counted;
// the header names are asked at most once a second per upstream.
func TestCostReaderHeadersAndCache(t *testing.T) {
	t.Parallel()
	src := &costSource{headers: map[string]string{"llm": "X-Usage-Tokens", "sms": "X-Cost", "plain": ""}}
	reg := prometheus.NewRegistry()
	ups := quota.NewUpstreamCache(src.UpstreamSettings, UpstreamCacheTTL)
	c, err := NewCostReader(ups, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ups.Clock = func() time.Time { return now }
	job := store.ClaimedJob{ID: "j", Tenant: "acme", Cost: 3, Upstreams: []string{"llm", "plain", "sms"}}
	resp := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	for _, tc := range []struct {
		h    http.Header
		want int64
	}{
		{resp("X-Usage-Tokens", "12"), 12},
		{resp("X-Usage-Tokens", "-4", "X-Cost", "5"), 5}, // the bad one skipped, the next upstream's taken
		{resp("X-Usage-Tokens", "0"), 1},                 // 0 is charged as 1
		{resp("X-Usage-Tokens", "lots"), 0},              // ignored: the reserved cost stands
		{resp("X-Other", "9"), 0},
		{nil, 0},
	} {
		if got := c.ActualCost(context.Background(), job, tc.h); got != tc.want {
			t.Errorf("headers %v: actual cost %d, want %d", tc.h, got, tc.want)
		}
	}
	if n := len(src.asked); n != 1 {
		t.Fatalf("header names asked %d times within a second, want once: %v", n, src.asked)
	}
	if got := testutil.ToFloat64(c.ignored.WithLabelValues(costNegative)) + testutil.ToFloat64(c.ignored.WithLabelValues(costNotInteger)); got != 2 {
		t.Fatalf("%v ignored values counted, want 2", got)
	}
	now = now.Add(UpstreamCacheTTL)
	src.headers["llm"] = "X-New"
	if got := c.ActualCost(context.Background(), job, resp("X-New", "8")); got != 8 || len(src.asked) != 2 {
		t.Fatalf("after a second: actual %d (asked %d times), want the new header's 8, asked again", got, len(src.asked))
	}
	if got := c.ActualCost(context.Background(), store.ClaimedJob{ID: "k", Cost: 1}, resp("X-New", "8")); got != 0 {
		t.Fatalf("a job naming no upstream: actual %d, want 0", got)
	}
	now = now.Add(UpstreamCacheTTL)
	src.err = errors.New("redis down")
	if got := c.ActualCost(context.Background(), job, resp("X-New", "8")); got != 0 {
		t.Fatalf("header names unreadable: actual %d, want 0 (the reserved cost stands)", got)
	}
}

// charger records ChargeUpstream calls.
type charger struct {
	calls []string
}

func (c *charger) ChargeUpstream(_ context.Context, name string, delta int64) error {
	c.calls = append(c.calls, fmt.Sprintf("%s:%+d", name, delta))
	return nil
}

func TestCorrectUpstreams(t *testing.T) {
	t.Parallel()
	job := store.ClaimedJob{ID: "j", Cost: 10, Upstreams: []string{"a", "b"}}
	var c charger
	CorrectUpstreams(context.Background(), &c, job, 2, nil)
	if want := []string{"a:-8", "b:-8"}; !slices.Equal(c.calls, want) {
		t.Fatalf("calls %v, want %v", c.calls, want)
	}
	c.calls = nil
	CorrectUpstreams(context.Background(), &c, job, 0, nil)  // unknown
	CorrectUpstreams(context.Background(), &c, job, 10, nil) // as reserved
	CorrectUpstreams(context.Background(), nil, job, 12, nil)
	if len(c.calls) != 0 {
		t.Fatalf("calls %v, want none", c.calls)
	}
}
