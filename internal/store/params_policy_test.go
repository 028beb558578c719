package store

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/policy"
)

func TestParamsFromBuiltinPolicyAreTheDefaults(t *testing.T) {
	t.Parallel()
	want := Params{ // docs/design.md §7's built-in defaults in the scripts' units
		RateUS: 100_000, Burst: 1, Concurrency: 10, Weight: 1,
		AdmitUS: 10_000, AdmitBurst: 1000,
		MaxBacklog: 100_000, MaxBacklogBytes: 256 << 20,
		MaxAttempts: 8, MinBackoffUS: 1_000_000, MaxBackoffUS: 3_600_000_000, MaxDoublings: 5,
		MaxRetryDurationUS: 86_400_000_000, TimeoutUS: 15_000_000, Adaptive: 1, Pacing: 1,
		MaxResultBytes: 64 << 10, ResultHeaders: HeaderList(policy.ResultHeadersDefault()),
	}
	if got := ParamsOf(policy.Builtin()); !reflect.DeepEqual(got, want) {
		t.Fatalf("ParamsOf(Builtin) = %+v, want DefaultParams %+v", got, want)
	}
	if got := DefaultParams(); !reflect.DeepEqual(got, want) {
		t.Fatalf("DefaultParams() = %+v, want %+v", got, want)
	}
	if back := want.Policy(); !reflect.DeepEqual(back, policy.Builtin()) {
		t.Fatalf("DefaultParams().Policy() = %+v, want Builtin %+v", back, policy.Builtin())
	}
}

// TestLuaBuiltinIsPolicyBuiltin reads the scripts' BUILTIN defaults back: a
// tenant with no stored policy at all (no "*" entry either) has the
// effective policy policy.Builtin().
func TestLuaBuiltinIsPolicyBuiltin(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	st := e.state("acme")
	if !reflect.DeepEqual(st.Policy, ParamsOf(policy.Builtin())) {
		t.Fatalf("the scripts' BUILTIN = %+v, want ParamsOf(policy.Builtin()) = %+v", st.Policy, ParamsOf(policy.Builtin()))
	}
	if got, want := st.Policy.Policy().View(), policy.Builtin().View(); !reflect.DeepEqual(got, want) {
		t.Fatalf("the scripts' BUILTIN shows as %+v, want %+v", got, want)
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
		{"1/h", func(p *policy.Policy) { p.Rate = rate("1/h") }, func(p *Params) { p.RateUS = 3_600_000_000 }},
		{"1/d", func(p *policy.Policy) { p.Rate = rate("1/d") }, func(p *Params) { p.RateUS = MaxIntervalUS }},
		{"7/d rounds the interval up", func(p *policy.Policy) { p.Admit.Rate = rate("7/d") }, func(p *Params) { p.AdmitUS = 12_342_857_143 }},
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
		if got := ParamsOf(pol); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, want)
		}
	}
}

func TestOverridesOfKeepsUnsetFieldsUnset(t *testing.T) {
	t.Parallel()
	in := `{"rate":"20/s","admit":{"burst":7},"max_backlog_bytes":"1KiB","retry":{"min_backoff":"250ms","max_doublings":3},"adaptive":false}`
	o, err := policy.DecodeJSON(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(OverridesOf(o))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"rate_us":50000,"admit_burst":7,"max_backlog_bytes":1024,"min_backoff_us":250000,"max_doublings":3,"adaptive":0}`
	if string(got) != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	// Merging the converted overrides equals converting the merged policy.
	if a, b := OverridesOf(o).Apply(DefaultParams()), ParamsOf(policy.Resolve(o)); !reflect.DeepEqual(a, b) {
		t.Fatalf("Apply(converted) = %+v, convert(Resolve) = %+v", a, b)
	}
	if empty := OverridesOf(policy.Overrides{}); !reflect.DeepEqual(empty, Overrides{}) {
		t.Fatalf("empty overrides converted to %+v", empty)
	}
}

func TestParamsPolicyViewInUserUnits(t *testing.T) {
	t.Parallel()
	got, err := json.Marshal(DefaultParams().Policy().View())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"rate":"10/s","burst":1,"concurrency":10,"weight":1,"admit":{"rate":"100/s","burst":1000},` +
		`"max_backlog":100000,"max_backlog_bytes":"256MiB","retry":{"max_attempts":8,"min_backoff":"1s",` +
		`"max_backoff":"1h","max_doublings":5,"max_retry_duration":"24h"},"timeout":"15s","adaptive":true,"unsigned":false,"disable_on_gone":false,"pacing":"headers",` +
		`"max_result_bytes":"64KiB","result_headers":["Content-Type","RateLimit","RateLimit-Policy","X-RateLimit-*","Retry-After"],"upstreams":[]}`
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	// The view reads back as overrides that convert to the same params.
	o, err := policy.DecodeJSON(strings.NewReader(string(got)))
	if err != nil {
		t.Fatal(err)
	}
	if back := ParamsOf(policy.Resolve(o)); !reflect.DeepEqual(back, DefaultParams()) {
		t.Fatalf("round trip: %+v", back)
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

// OverridesOf's per-field "set" list lines up with Params: overrides that
// set every field convert to the full overrides of their policy.
func TestOverridesOfEveryField(t *testing.T) {
	t.Parallel()
	in := `{"rate":"20/s","burst":2,"concurrency":3,"weight":4,"admit":{"rate":"5/s","burst":6},"max_backlog":7,` +
		`"max_backlog_bytes":"8KiB","retry":{"max_attempts":9,"min_backoff":"10ms","max_backoff":"11s","max_doublings":12,` +
		`"max_retry_duration":"13m"},"timeout":"14s","adaptive":false,"unsigned":true,"disable_on_gone":true,"pacing":"off",` +
		`"max_result_bytes":"1KiB","result_headers":["ETag"]}`
	o, err := policy.DecodeJSON(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := OverridesOf(o).Apply(Params{}), ParamsOf(policy.Resolve(o)); !reflect.DeepEqual(got, want) {
		t.Fatalf("OverridesOf(every field) = %+v, want %+v", got, want)
	}
}
