package config

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/upstream"
)

// TestUpstreamsLoad: the upstreams map decodes with defaults applied, and
// a default policy may name upstreams.
func TestUpstreamsLoad(t *testing.T) {
	t.Parallel()
	c, err := loadString(t, `
defaults: {upstreams: [sms-account-7]}
tenants:
  acme: {upstreams: []}
upstreams:
  sms-account-7: {rate: 100/s, burst: 10, pause_scope: upstream}
  llm-org: {rate: 90000/m, cost_header: X-Usage-Tokens, adaptive: true, concurrency: 8, pacing: "off"}
`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]upstream.Config{
		"sms-account-7": {Rate: bucket.Rate{Tokens: 100, Per: time.Second}, Burst: 10, PauseScope: upstream.ScopeUpstream,
			Pacing: upstream.PacingHeaders},
		"llm-org": {Rate: bucket.Rate{Tokens: 90000, Per: time.Minute}, Burst: 1, Concurrency: 8, Adaptive: true,
			PauseScope: upstream.ScopeTenant, CostHeader: "X-Usage-Tokens", Pacing: upstream.PacingOff},
	}
	if len(c.Upstreams) != len(want) {
		t.Fatalf("upstreams = %+v", c.Upstreams)
	}
	for name, w := range want {
		if c.Upstreams[name] != w {
			t.Errorf("upstreams.%s = %+v, want %+v", name, c.Upstreams[name], w)
		}
	}
	if !slices.Equal(c.Defaults.Upstreams, []string{"sms-account-7"}) || c.Tenants["acme"].Upstreams == nil {
		t.Errorf("policy upstreams: defaults %v, acme %#v", c.Defaults.Upstreams, c.Tenants["acme"].Upstreams)
	}
}

// TestUpstreamsProblems: every bad entry is named by its path, all at once;
// unknown fields and bad rates are decoding errors with their line.
func TestUpstreamsProblems(t *testing.T) {
	t.Parallel()
	_, err := loadString(t, `
defaults: {upstreams: [a, a]}
upstreams:
  "bad:name": {rate: 1/s}
  noburst: {rate: 1/s, burst: -1, concurrency: -2}
  scope: {rate: 1/s, pause_scope: everyone, cost_header: "X Bad", pacing: slow}
  norate: {burst: 2}
`)
	want := []string{"defaults.upstreams[1]", `upstreams."bad:name"`, "upstreams.noburst.burst", "upstreams.noburst.concurrency",
		"upstreams.norate.rate", "upstreams.scope.cost_header", "upstreams.scope.pacing", "upstreams.scope.pause_scope"}
	if got := problemFields(t, err); !slices.Equal(got, want) {
		t.Errorf("problems = %v\nwant %v\n(%v)", got, want, err)
	}
	for content, wantMsg := range map[string]string{
		"upstreams:\n  x: {rate: 1/s, colour: blue}\n": "line 2: field colour not found",
		"upstreams:\n  x: {rate: fast}\n":              `line 2: rate "fast"`,
		"upstreams:\n  x: {rate: [1]}\n":               "line 2",
	} {
		if _, err := loadString(t, content); err == nil || !strings.Contains(err.Error(), wantMsg) {
			t.Errorf("%q: %v, want %q", content, err, wantMsg)
		}
	}
}
