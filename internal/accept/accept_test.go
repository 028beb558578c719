package accept

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/policy"
)

// tenant is an in-memory Tenant that counts its reads.
type tenant struct {
	capacity int64
	defaults []string
	bursts   map[string]int64 // registered upstreams
	signs    bool
	fail     error // every read fails with it when set

	capacityReads, defaultReads, upstreamReads int
}

var _ Tenant = (*tenant)(nil)

func (t *tenant) Name() string { return "acme" }

func (t *tenant) Capacity(context.Context) (int64, error) {
	t.capacityReads++
	return t.capacity, t.fail
}

func (t *tenant) DefaultUpstreams(context.Context) ([]string, error) {
	t.defaultReads++
	return t.defaults, t.fail
}

func (t *tenant) Upstreams(_ context.Context, names []string) ([]Upstream, error) {
	t.upstreamReads++
	if t.fail != nil {
		return nil, t.fail
	}
	out := make([]Upstream, len(names))
	for i, n := range names {
		b, ok := t.bursts[n]
		out[i] = Upstream{Found: ok, Burst: b}
	}
	return out, nil
}

func (t *tenant) SignsWebhooks() bool { return t.signs }

var rules = Rules{TaskQueues: []string{"default", "emails"}}

func parse(t *testing.T, body string) job.Spec {
	t.Helper()
	s, err := job.Parse([]byte(body))
	if err != nil {
		t.Fatalf("parse %s: %v", body, err)
	}
	return s
}

func fields(t *testing.T, err error) []string {
	t.Helper()
	var inv *InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("error %v (%T), want an *InvalidError", err, err)
	}
	var out []string
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, inner := range j.Unwrap() {
				walk(inner)
			}
			return
		}
		out = append(out, e.(*job.FieldError).Field)
	}
	walk(inv.Err)
	return out
}

func TestJobListsEveryFieldProblem(t *testing.T) {
	t.Parallel()
	spec := parse(t, `{"type":"webhook","url":"http://127.0.0.1/hook","cost":0,"delay":"-1s",
		"callback":{"url":"http://10.0.0.1/cb"},"upstreams":["a","a"]}`)
	ten := &tenant{}
	_, err := Job(context.Background(), spec, ten, rules)
	want := []string{"event", "cost", "delay", "upstreams[1]", "url", "callback.url"}
	if got := fields(t, err); !slices.Equal(got, want) {
		t.Errorf("problems of %v, want %v", got, want)
	}
	if ten.defaultReads+ten.upstreamReads+ten.capacityReads != 0 {
		t.Errorf("an invalid job read the tenant (%+v)", ten)
	}
	if !strings.HasPrefix(err.Error(), "invalid job: ") {
		t.Errorf("message %q, want it to start with %q", err, "invalid job: ")
	}
}

func TestJobEgressAllowOpensARange(t *testing.T) {
	t.Parallel()
	spec := parse(t, `{"type":"http","method":"GET","url":"http://10.1.2.3/x"}`)
	if _, err := Job(context.Background(), spec, &tenant{}, rules); err == nil {
		t.Fatal("a private address literal was accepted without an egress allow-list")
	}
	open := Rules{TaskQueues: rules.TaskQueues, EgressAllow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	j, err := Job(context.Background(), spec, &tenant{}, open)
	if err != nil {
		t.Fatalf("with 10.0.0.0/8 allowed: %v", err)
	}
	if j.Unless != nil {
		t.Errorf("an http job without a callback carries %+v", j.Unless)
	}
}

func TestJobCapacityReadOnlyAboveMaxBurst(t *testing.T) {
	t.Parallel()
	ten := &tenant{capacity: policy.MaxBurst + 10, signs: true}
	if _, err := Job(context.Background(), parse(t, `{"type":"task","task_type":"t","cost":5}`), ten, rules); err != nil {
		t.Fatal(err)
	}
	if ten.capacityReads != 0 {
		t.Errorf("cost 5 read the capacity %d times, want 0", ten.capacityReads)
	}
	big := parse(t, `{"type":"task","task_type":"t","cost":`+itoa(policy.MaxBurst+11)+`}`)
	_, err := Job(context.Background(), big, ten, rules)
	if got := fields(t, err); !slices.Equal(got, []string{"cost"}) || ten.capacityReads != 1 {
		t.Errorf("cost above the capacity: problems %v after %d reads, want [cost] after 1", got, ten.capacityReads)
	}
	if !strings.Contains(err.Error(), itoa(policy.MaxBurst+10)) {
		t.Errorf("message %q does not name the tenant's capacity %d", err, policy.MaxBurst+10)
	}
}

func TestJobResolvesDefaultUpstreams(t *testing.T) {
	t.Parallel()
	ten := &tenant{defaults: []string{"b", "a"}, bursts: map[string]int64{"a": 5, "b": 5}, signs: true}
	j, err := Job(context.Background(), parse(t, `{"type":"task","task_type":"t","cost":2}`), ten, rules)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(j.Upstreams, []string{"a", "b"}) || !slices.Equal(j.Spec.Upstreams, []string{"a", "b"}) {
		t.Errorf("upstreams %v (spec %v), want [a b]", j.Upstreams, j.Spec.Upstreams)
	}
	if strings.Contains(string(j.Sent), "upstreams") || !strings.Contains(string(j.Body), `"upstreams":["a","b"]`) {
		t.Errorf("sent %s, body %s: want the default in the body only", j.Sent, j.Body)
	}
	if j.Spec.Queue != "default" || j.Cost != 2 {
		t.Errorf("queue %q cost %d, want the default queue and cost 2", j.Spec.Queue, j.Cost)
	}

	// An explicit [] names none, whatever the policy: stored without the key.
	j, err = Job(context.Background(), parse(t, `{"type":"task","task_type":"t","upstreams":[]}`), ten, rules)
	if err != nil {
		t.Fatal(err)
	}
	if len(j.Upstreams) != 0 || strings.Contains(string(j.Body), "upstreams") || !strings.Contains(string(j.Sent), `"upstreams":[]`) {
		t.Errorf("explicit []: upstreams %v, body %s, sent %s", j.Upstreams, j.Body, j.Sent)
	}
}

func TestJobRefusesUnknownUpstreamsAndBurst(t *testing.T) {
	t.Parallel()
	ten := &tenant{bursts: map[string]int64{"a": 3}}
	_, err := Job(context.Background(), parse(t, `{"type":"task","task_type":"t","upstreams":["z","a","y"]}`), ten, rules)
	var r *Refusal
	if !errors.As(err, &r) || r.Code != CodeUnknownUpstream || !strings.Contains(r.Message, `["y" "z"]`) {
		t.Errorf("unknown upstreams: %v, want %s naming y and z", err, CodeUnknownUpstream)
	}
	_, err = Job(context.Background(), parse(t, `{"type":"task","task_type":"t","cost":4,"upstreams":["a"]}`), ten, rules)
	if !errors.As(err, &r) || r.Code != CodeCostExceedsUpstreamBurst || !strings.Contains(r.Message, "burst 3") {
		t.Errorf("cost 4 over burst 3: %v, want %s", err, CodeCostExceedsUpstreamBurst)
	}
	ten.defaults = []string{"gone"}
	_, err = Job(context.Background(), parse(t, `{"type":"task","task_type":"t"}`), ten, rules)
	if !errors.As(err, &r) || r.Code != CodeUnknownUpstream || !strings.Contains(r.Message, "the tenant's policy names") {
		t.Errorf("unknown default upstream: %v, want %s naming the policy", err, CodeUnknownUpstream)
	}
}

func TestJobWebhookSecret(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body   string
		signs  bool
		refuse bool
	}{
		{`{"type":"webhook","url":"https://example.com/h","event":"e"}`, false, true},
		{`{"type":"webhook","url":"https://example.com/h","event":"e"}`, true, false},
		{`{"type":"task","task_type":"t","callback":{"url":"https://example.com/cb"}}`, false, true},
		{`{"type":"task","task_type":"t"}`, false, false},
	} {
		j, err := Job(context.Background(), parse(t, tc.body), &tenant{signs: tc.signs}, rules)
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		if (j.Unless != nil) != tc.refuse {
			t.Errorf("%s (signs %v): Unless %+v, want a refusal: %v", tc.body, tc.signs, j.Unless, tc.refuse)
		}
		if j.Unless != nil && (j.Unless.Code != CodeNoWebhookSecret || !strings.Contains(j.Unless.Message, "tenants.acme.webhook_secrets")) {
			t.Errorf("%s: Unless %+v", tc.body, j.Unless)
		}
	}
}

func TestJobLookupFailures(t *testing.T) {
	t.Parallel()
	down := errors.New("redis down")
	for _, tc := range []struct {
		body string
		ten  *tenant
		op   string
	}{
		{`{"type":"task","task_type":"t","cost":` + itoa(policy.MaxBurst+1) + `}`, &tenant{fail: down}, "get_policy"},
		{`{"type":"task","task_type":"t"}`, &tenant{fail: down}, "get_policy"},
		{`{"type":"task","task_type":"t","upstreams":["a"]}`, &tenant{fail: down}, "get_upstreams"},
	} {
		_, err := Job(context.Background(), parse(t, tc.body), tc.ten, rules)
		var le *LookupError
		if !errors.As(err, &le) || le.Op != tc.op || !errors.Is(err, down) {
			t.Errorf("%s: %v, want a *LookupError of %s wrapping the read's error", tc.body, err, tc.op)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
