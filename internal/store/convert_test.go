package store

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/policy"
)

func TestParamsFromBuiltinPolicyAreTheDefaults(t *testing.T) {
	t.Parallel()
	if got, want := ParamsFromPolicy(policy.Builtin()), DefaultParams(); got != want {
		t.Fatalf("ParamsFromPolicy(Builtin) = %+v, want DefaultParams %+v", got, want)
	}
}

func TestParamsFromPolicyUnits(t *testing.T) {
	t.Parallel()
	rate := func(s string) bucket.Rate {
		r, err := bucket.ParseRate(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	cases := []struct {
		name string
		edit func(*policy.Policy)
		want func(*Params)
	}{
		{"50/s", func(p *policy.Policy) { p.Rate = rate("50/s") }, func(p *Params) { p.RateUS = 20_000 }},
		{"3/s rounds the interval up", func(p *policy.Policy) { p.Rate = rate("3/s") }, func(p *Params) { p.RateUS = 333_334 }},
		{"600/m", func(p *policy.Policy) { p.Admit.Rate = rate("600/m") }, func(p *Params) { p.AdmitUS = 100_000 }},
		{"1/h", func(p *policy.Policy) { p.Rate = rate("1/h") }, func(p *Params) { p.RateUS = MaxIntervalUS }},
		{"durations in µs", func(p *policy.Policy) {
			p.Timeout, p.Retry.MinBackoff, p.Retry.MaxRetryDuration = 250*time.Millisecond, 1500*time.Nanosecond, 0
		}, func(p *Params) { p.TimeoutUS, p.MinBackoffUS, p.MaxRetryDurationUS = 250_000, 2, 0 }},
		{"adaptive off", func(p *policy.Policy) { p.Adaptive = false }, func(p *Params) { p.Adaptive = 0 }},
		{"counts", func(p *policy.Policy) {
			p.Burst, p.Concurrency, p.Weight, p.Admit.Burst, p.MaxBacklog, p.MaxBacklogBytes = 5, 7, 3, 20, 99, 4096
			p.Retry.MaxAttempts, p.Retry.MaxDoublings = 2, 9
		}, func(p *Params) {
			p.Burst, p.Concurrency, p.Weight, p.AdmitBurst, p.MaxBacklog, p.MaxBacklogBytes = 5, 7, 3, 20, 99, 4096
			p.MaxAttempts, p.MaxDoublings = 2, 9
		}},
	}
	for _, tc := range cases {
		pol := policy.Builtin()
		tc.edit(&pol)
		want := DefaultParams()
		tc.want(&want)
		if got := ParamsFromPolicy(pol); got != want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, want)
		}
	}
}

func TestOverridesFromPolicyKeepsUnsetFieldsUnset(t *testing.T) {
	t.Parallel()
	in := `{"rate":"20/s","admit":{"burst":7},"max_backlog_bytes":"1KiB","retry":{"min_backoff":"250ms","max_doublings":3},"adaptive":false}`
	o, err := policy.DecodeJSON(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(OverridesFromPolicy(o))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"rate_us":50000,"admit_burst":7,"max_backlog_bytes":1024,"min_backoff_us":250000,"max_doublings":3,"adaptive":0}`
	if string(got) != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	// Merging the converted overrides equals converting the merged policy.
	if a, b := OverridesFromPolicy(o).Apply(DefaultParams()), ParamsFromPolicy(policy.Resolve(o)); a != b {
		t.Fatalf("Apply(converted) = %+v, convert(Resolve) = %+v", a, b)
	}
	if empty := OverridesFromPolicy(policy.Overrides{}); empty != (Overrides{}) {
		t.Fatalf("empty overrides converted to %+v", empty)
	}
}

func TestIntervalRateShowsTheRateWithThatInterval(t *testing.T) {
	t.Parallel()
	cases := []struct {
		us   int64
		want string
	}{
		{1, `"1000000/s"`},
		{20_000, `"50/s"`},
		{100_000, `"10/s"`}, // 600/m has the same interval: the seconds form wins
		{333_334, `"3/s"`},  // the interval of 3/s, rounded up
		{8_571_429, `"7/m"`},
		{360_000, `"10000/h"`},
		{MaxIntervalUS, `"1/h"`},
		{MaxIntervalUS - 1, `0.0002777777778549383`}, // no N/s, N/m or N/h has it
		{0, `0`},
	}
	for _, tc := range cases {
		got, err := json.Marshal(IntervalRate(tc.us))
		if err != nil || string(got) != tc.want {
			t.Errorf("IntervalRate(%d) = %s (%v), want %s", tc.us, got, err, tc.want)
		}
		if r, ok := IntervalRate(tc.us).Rate(); ok && r.IntervalMicros() != tc.us {
			t.Errorf("IntervalRate(%d).Rate() = %s, whose interval is %d", tc.us, r, r.IntervalMicros())
		}
	}
}

func TestParamsViewInUserUnits(t *testing.T) {
	t.Parallel()
	got, err := json.Marshal(DefaultParams().View())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"rate":"10/s","burst":1,"concurrency":10,"weight":1,"admit":{"rate":"100/s","burst":1000},` +
		`"max_backlog":100000,"max_backlog_bytes":"256MiB","retry":{"max_attempts":8,"min_backoff":"1s",` +
		`"max_backoff":"1h","max_doublings":5,"max_retry_duration":"24h"},"timeout":"15s","adaptive":true}`
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	// The view reads back as overrides that convert to the same params.
	o, err := policy.DecodeJSON(strings.NewReader(string(got)))
	if err != nil {
		t.Fatal(err)
	}
	if back := ParamsFromPolicy(policy.Resolve(o)); back != DefaultParams() {
		t.Fatalf("round trip: %+v", back)
	}
}

func TestCheckStorableNamesFieldsInUserTerms(t *testing.T) {
	t.Parallel()
	if err := CheckStorable(policy.Builtin()); err != nil {
		t.Fatalf("builtin policy: %v", err)
	}
	p := policy.Builtin()
	p.Concurrency, p.Retry.MaxDoublings, p.Retry.MaxRetryDuration = 2_000_000, 63, 200*24*time.Hour
	p.Burst = 0 // a lower bound: policy.Validate's, not reported here
	err := CheckStorable(p)
	var fe *policy.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("got %v, want *policy.FieldError values", err)
	}
	msg := err.Error()
	for _, want := range []string{"concurrency: must be at most 1000000", "retry.max_doublings: must be at most 62",
		"retry.max_retry_duration: must be at most 2777h46m40s"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "burst") {
		t.Errorf("%q reports a lower bound", msg)
	}
}

// TestEnqueueReportsAdmissionState pins Result.Admit, the admission bucket
// after each item's decision (kept here, beside the conversions the API's
// "admit" headers use).
func TestEnqueueReportsAdmissionState(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.AdmitBurst, p.AdmitUS, p.MaxBacklog = 3, 10_000, 3 }))
	ms := time.Millisecond
	rs := e.enqueue("acme", item(`1`), item(`2`))
	want := []Admission{{2, 10 * ms, 10 * ms, 3}, {1, 20 * ms, 10 * ms, 3}}
	for i, r := range rs {
		if r.Admit != want[i] {
			t.Fatalf("item %d: Admit %+v, want %+v", i, r.Admit, want[i])
		}
	}
	e.clock.Advance(3 * ms)
	rs = e.enqueue("acme", idemItem("k", `3`), idemItem("k", `3`), item(`4`), item(`5`))
	wantAfter := []struct {
		outcome Outcome
		admit   Admission
	}{
		{Accepted, Admission{0, 27 * ms, 10 * ms, 3}},  // the partial 3ms carries over
		{Duplicate, Admission{0, 27 * ms, 10 * ms, 3}}, // charges nothing
		{Refused, Admission{0, 27 * ms, 10 * ms, 3}},   // rate_limited
		{Refused, Admission{0, 27 * ms, 10 * ms, 3}},
	}
	for i, r := range rs {
		if r.Outcome != wantAfter[i].outcome || r.Admit != wantAfter[i].admit {
			t.Fatalf("item %d: %+v, want outcome %d, Admit %+v", i, r, wantAfter[i].outcome, wantAfter[i].admit)
		}
	}
	e.clock.Advance(time.Hour)
	r := e.enqueue("acme", item(`6`))[0] // refill to 3 tokens, but the backlog is full
	if r.Code != CodeBacklogFull || r.Admit != (Admission{3, 0, 10 * ms, 3}) {
		t.Fatalf("backlog_full after a full refill: %+v", r)
	}
	e.requireConsistent()
}
