package upstream_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/upstream"
)

func rate(n int64, per time.Duration) bucket.Rate { return bucket.Rate{Tokens: n, Per: per} }

// fields lists the Field of every *upstream.FieldError in err, in order.
func fields(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("error %v is not joined", err)
	}
	var out []string
	for _, e := range j.Unwrap() {
		var fe *upstream.FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("%v is not a *FieldError", e)
		}
		out = append(out, fe.Field)
	}
	return out
}

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := upstream.Config{Rate: rate(20, time.Second)}.WithDefaults()
	for _, tc := range []struct {
		name string
		c    upstream.Config
		want []string // fields with problems, in Validate's order
	}{
		{"defaults", ok, nil},
		{"every field", upstream.Config{Rate: rate(90000, time.Minute), Burst: 500, Concurrency: 8, Adaptive: true,
			PauseScope: upstream.ScopeUpstream, CostHeader: "X-Usage-Tokens", Pacing: "headers"}, nil},
		{"slowest rate", upstream.Config{Rate: rate(1, time.Hour), Burst: 1, PauseScope: "tenant", Pacing: "off"}, nil},
		{"largest burst", upstream.Config{Rate: rate(1, time.Second), Burst: upstream.MaxBurst, PauseScope: "tenant", Pacing: "off"}, nil},
		{"no rate", upstream.Config{}.WithDefaults(), []string{"rate"}},
		{"slower than 1/h", upstream.Config{Rate: rate(1, 2*time.Hour), Burst: 1, PauseScope: "tenant", Pacing: "off"}, []string{"rate"}},
		{"zero burst without defaults", upstream.Config{Rate: rate(1, time.Second), PauseScope: "tenant", Pacing: "off"}, []string{"burst"}},
		{"burst too large", upstream.Config{Rate: rate(1, time.Second), Burst: upstream.MaxBurst + 1, PauseScope: "tenant", Pacing: "off"}, []string{"burst"}},
		{"negative burst", upstream.Config{Rate: rate(1, time.Second), Burst: -1, PauseScope: "tenant", Pacing: "off"}, []string{"burst"}},
		{"negative concurrency", upstream.Config{Rate: rate(1, time.Second), Burst: 1, Concurrency: -1, PauseScope: "tenant", Pacing: "off"}, []string{"concurrency"}},
		{"concurrency too large", upstream.Config{Rate: rate(1, time.Second), Burst: 1, Concurrency: upstream.MaxConcurrency + 1, PauseScope: "tenant", Pacing: "off"}, []string{"concurrency"}},
		{"bad scope", upstream.Config{Rate: rate(1, time.Second), Burst: 1, PauseScope: "global", Pacing: "headers"}, []string{"pause_scope"}},
		{"header with a space", upstream.Config{Rate: rate(1, time.Second), Burst: 1, PauseScope: "tenant", Pacing: "off", CostHeader: "X Usage"}, []string{"cost_header"}},
		{"header with a colon", upstream.Config{Rate: rate(1, time.Second), Burst: 1, PauseScope: "tenant", Pacing: "off", CostHeader: "X-Usage:"}, []string{"cost_header"}},
		{"header too long", upstream.Config{Rate: rate(1, time.Second), Burst: 1, PauseScope: "tenant", Pacing: "off", CostHeader: strings.Repeat("X", upstream.MaxCostHeaderLen+1)}, []string{"cost_header"}},
		{"every problem at once", upstream.Config{Burst: -5, Concurrency: -1, PauseScope: "x", CostHeader: "é", Pacing: "on"},
			[]string{"rate", "burst", "concurrency", "pause_scope", "cost_header", "pacing"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := fields(t, tc.c.Validate())
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("Validate problems = %v, want %v (err: %v)", got, tc.want, tc.c.Validate())
			}
		})
	}
}

func TestWithDefaults(t *testing.T) {
	t.Parallel()
	c := upstream.Config{Rate: rate(5, time.Second)}.WithDefaults()
	if c.Burst != upstream.BurstDefault || c.PauseScope != upstream.ScopeTenant || c.Concurrency != 0 || c.Adaptive {
		t.Errorf("WithDefaults = %+v", c)
	}
	set := upstream.Config{Rate: rate(5, time.Second), Burst: 7, PauseScope: upstream.ScopeUpstream}.WithDefaults()
	if set.Burst != 7 || set.PauseScope != upstream.ScopeUpstream {
		t.Errorf("WithDefaults changed set fields: %+v", set)
	}
}

// TestBoundsMatchPolicy ties the bounds declared here to the policy's,
// which the scripts' arithmetic is checked against.
func TestBoundsMatchPolicy(t *testing.T) {
	t.Parallel()
	if upstream.MaxBurst != policy.MaxBurst || upstream.MaxConcurrency != policy.MaxCount {
		t.Errorf("MaxBurst %d, MaxConcurrency %d; policy: %d, %d", upstream.MaxBurst, upstream.MaxConcurrency, policy.MaxBurst, policy.MaxCount)
	}
	if got := rate(1, time.Hour).IntervalMicros(); got != upstream.MaxIntervalUS {
		t.Errorf("1/h is %d µs, MaxIntervalUS %d", got, upstream.MaxIntervalUS)
	}
}

func TestParams(t *testing.T) {
	t.Parallel()
	c := upstream.Config{Rate: rate(20, time.Second), Burst: 3, Concurrency: 2, Adaptive: true, PauseScope: upstream.ScopeUpstream}
	p := c.Params()
	want := upstream.Params{IntervalUS: 50_000, Burst: 3, Concurrency: 2, Adaptive: true, ScopeUpstream: true}
	if p != want {
		t.Fatalf("Params = %+v, want %+v", p, want)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"iv":50000,"b":3,"c":2,"a":1,"s":1}` {
		t.Errorf("Params JSON = %s", b)
	}
	var back upstream.Params
	if err := json.Unmarshal(b, &back); err != nil || back != p {
		t.Errorf("round trip = %+v, %v", back, err)
	}
	tenant := upstream.Config{Rate: rate(3, time.Second), Burst: 1, PauseScope: upstream.ScopeTenant}.Params()
	if tenant.IntervalUS != 333_334 || tenant.ScopeUpstream || tenant.Adaptive || tenant.Paced() {
		t.Errorf("Params of 3/s tenant scope = %+v", tenant)
	}
	// Pacing: headers paces an upstream-scope upstream; off is "np": 1,
	// and a p without "np" (written before the field) reads as headers.
	paced := upstream.Config{Rate: rate(3, time.Second), Burst: 1, PauseScope: upstream.ScopeUpstream, Pacing: upstream.PacingHeaders}.Params()
	off := upstream.Config{Rate: rate(3, time.Second), Burst: 1, PauseScope: upstream.ScopeUpstream, Pacing: upstream.PacingOff}.Params()
	if !paced.Paced() || off.Paced() || !off.NoPacing {
		t.Errorf("Params paced %+v, off %+v", paced, off)
	}
	if b, _ := json.Marshal(off); !strings.Contains(string(b), `"np":1`) {
		t.Errorf("pacing off = %s, want np 1", b)
	}
	var old upstream.Params
	if err := json.Unmarshal([]byte(`{"iv":10,"b":1,"c":0,"a":0,"s":1}`), &old); err != nil || !old.Paced() {
		t.Errorf("p without np = %+v, %v; want paced", old, err)
	}
}

func TestViewAndDecode(t *testing.T) {
	t.Parallel()
	c := upstream.Config{Rate: rate(90000, time.Minute), CostHeader: "X-Usage-Tokens"}
	v := c.View()
	want := upstream.View{Rate: "90000/m", Burst: 1, PauseScope: "tenant", CostHeader: "X-Usage-Tokens", Pacing: "headers"}
	if v != want {
		t.Fatalf("View = %+v, want %+v", v, want)
	}
	b, _ := json.Marshal(v)
	if string(b) != `{"rate":"90000/m","burst":1,"concurrency":0,"adaptive":false,"pause_scope":"tenant","cost_header":"X-Usage-Tokens","pacing":"headers"}` {
		t.Errorf("View JSON = %s", b)
	}
	back, err := upstream.DecodeJSON(strings.NewReader(string(b)))
	if err != nil || back != c.WithDefaults() {
		t.Errorf("DecodeJSON(view) = %+v, %v; want %+v", back, err, c.WithDefaults())
	}
	for _, bad := range []string{`null`, `{"rate":"1/s","burst":1,"extra":1}`, `{"rate":"fast"}`, `{"rate":"1/s"} {}`, `{"burst":"1"}`, `[]`} {
		if c, err := upstream.DecodeJSON(strings.NewReader(bad)); err == nil {
			t.Errorf("DecodeJSON(%s) = %+v, want an error", bad, c)
		}
	}
}

func TestValidName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"sms-account-7", true},
		{"a", true},
		{"llm.org_1@eu", true},
		{strings.Repeat("x", upstream.MaxNameLen), true},
		{strings.Repeat("x", upstream.MaxNameLen+1), false},
		{"", false},
		{".", false},
		{"..", false},
		{"a:b", false},
		{"{u}", false},
		{"a b", false},
		{"a/b", false},
		{"é", false},
	} {
		err := upstream.ValidName(tc.name)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, upstream.ErrInvalidName)) {
			t.Errorf("ValidName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		// Within the length bound, the rules are a tenant id's.
		if len(tc.name) <= upstream.MaxNameLen && (policy.ValidTenantID(tc.name) == nil) != tc.ok {
			t.Errorf("ValidName(%q) and policy.ValidTenantID disagree", tc.name)
		}
	}
}

func TestCheckNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		names []string
		want  []string
	}{
		{"none", nil, nil},
		{"empty", []string{}, nil},
		{"four", []string{"a", "b", "c", "d"}, nil},
		{"five", []string{"a", "b", "c", "d", "e"}, []string{"upstreams"}},
		{"duplicate", []string{"a", "b", "a"}, []string{"upstreams[2]"}},
		{"bad name", []string{"ok", "no:colon"}, []string{"upstreams[1]"}},
		{"every problem", []string{"", "x", "x", "y", "z"}, []string{"upstreams", "upstreams[0]", "upstreams[2]"}},
	} {
		var got []string
		for _, fe := range upstream.CheckNames(tc.names) {
			got = append(got, fe.Field)
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s: CheckNames(%q) fields = %v, want %v", tc.name, tc.names, got, tc.want)
		}
	}
}

func TestSorted(t *testing.T) {
	t.Parallel()
	in := []string{"b", "c", "a"}
	got := upstream.Sorted(in)
	if strings.Join(got, ",") != "a,b,c" || strings.Join(in, ",") != "b,c,a" {
		t.Errorf("Sorted = %v, input now %v", got, in)
	}
	if upstream.Sorted(nil) != nil {
		t.Error("Sorted(nil) is not nil")
	}
	if e := upstream.Sorted([]string{}); e == nil || len(e) != 0 {
		t.Errorf("Sorted([]) = %#v, want an empty non-nil slice", e)
	}
}
