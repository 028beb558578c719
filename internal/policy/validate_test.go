package policy

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bucket"
)

// fields returns the Field of every FieldError in err, sorted.
func fields(t *testing.T, err error) []string {
	t.Helper()
	var out []string
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		var fe *FieldError
		if !errors.As(e, &fe) {
			t.Errorf("problem %q is not a *FieldError", e)
			return
		}
		out = append(out, fe.Field)
	}
	if err != nil {
		walk(err)
	}
	slices.Sort(out)
	return out
}

func TestPolicyValidateListsEveryProblem(t *testing.T) {
	p := Policy{ // the zero value: every rule broken except the ≥ 0 ones
		Retry: Retry{MaxDoublings: -1, MaxRetryDuration: -time.Second},
	}
	p.WebhookSecrets = Secrets{secretA, "whsec_short", "nope"}
	p.ResultHeaders = []string{"Content-Type", "Bad Name", "X-*-*"}
	err := p.Validate()
	want := []string{
		"admit.burst", "admit.rate", "burst", "concurrency", "max_backlog", "max_backlog_bytes",
		"max_result_bytes", "pacing", "rate", "result_headers[1]", "result_headers[2]", "retry.max_attempts", "retry.max_backoff", "retry.max_doublings",
		"retry.max_retry_duration", "retry.min_backoff", "timeout",
		"webhook_secrets[1]", "webhook_secrets[2]", "weight",
	}
	if got := fields(t, err); !slices.Equal(got, want) {
		t.Errorf("problems in\n%v\n= %v\nwant %v", err, got, want)
	}
	for _, msg := range []string{
		"burst: must be at least 1, got 0",
		"retry.max_doublings: must be at least 0, got -1",
		"retry.max_retry_duration: must not be negative, got -1s",
		"timeout: must be positive, got 0s",
		"rate: must be set",
	} {
		if !strings.Contains(err.Error(), msg) {
			t.Errorf("error\n%v\ndoes not contain %q", err, msg)
		}
	}
}

func TestPolicyValidateRules(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Policy)
		field  string // "" = valid
	}{
		{"builtin", func(*Policy) {}, ""},
		{"burst at max", func(p *Policy) { p.Burst = MaxBurst }, ""},
		{"burst over max", func(p *Policy) { p.Burst = MaxBurst + 1 }, "burst"},
		{"admit burst over max", func(p *Policy) { p.Admit.Burst = MaxBurst + 1 }, "admit.burst"},
		{"burst at max at 1/h", func(p *Policy) { p.Rate, p.Burst = bucket.Rate{Tokens: 1, Per: time.Hour}, MaxBurst }, ""},
		{"burst at max span at 1/d", func(p *Policy) { p.Rate, p.Burst = bucket.Rate{Tokens: 1, Per: bucket.Day}, 41_666 }, ""},
		{"burst over max span at 1/d", func(p *Policy) { p.Rate, p.Burst = bucket.Rate{Tokens: 1, Per: bucket.Day}, 41_667 }, "burst"},
		{"admit burst over max span at 7/d", func(p *Policy) {
			p.Admit.Rate, p.Admit.Burst = bucket.Rate{Tokens: 7, Per: bucket.Day}, MaxSpan.Microseconds()/12_342_857_143+1
		}, "admit.burst"},
		{"negative weight", func(p *Policy) { p.Weight = -1 }, "weight"},
		{"one attempt", func(p *Policy) { p.Retry.MaxAttempts = 1 }, ""},
		{"zero attempts", func(p *Policy) { p.Retry.MaxAttempts = 0 }, "retry.max_attempts"},
		{"equal backoffs", func(p *Policy) { p.Retry.MinBackoff, p.Retry.MaxBackoff = time.Minute, time.Minute }, ""},
		{"max below min", func(p *Policy) { p.Retry.MinBackoff, p.Retry.MaxBackoff = time.Minute, time.Second }, "retry.max_backoff"},
		{"zero doublings", func(p *Policy) { p.Retry.MaxDoublings = 0 }, ""},
		{"unlimited retry duration", func(p *Policy) { p.Retry.MaxRetryDuration = 0 }, ""},
		{"timeout at max", func(p *Policy) { p.Timeout = MaxTimeout }, ""},
		{"timeout over max", func(p *Policy) { p.Timeout = MaxTimeout + time.Nanosecond }, "timeout"},
		{"negative timeout", func(p *Policy) { p.Timeout = -time.Second }, "timeout"},
		{"zero bytes", func(p *Policy) { p.MaxBacklogBytes = 0 }, "max_backlog_bytes"},
		{"two secrets", func(p *Policy) { p.WebhookSecrets = Secrets{secretA, secretB} }, ""},
		{"too many secrets", func(p *Policy) { p.WebhookSecrets = slices.Repeat(Secrets{secretA}, MaxWebhookSecrets+1) }, "webhook_secrets"},
	} {
		p := Builtin()
		tc.change(&p)
		got := fields(t, p.Validate())
		if tc.field == "" && len(got) != 0 || tc.field != "" && !slices.Equal(got, []string{tc.field}) {
			t.Errorf("%s: problems %v, want [%s]", tc.name, got, tc.field)
		}
	}
}

func TestOverridesValidate(t *testing.T) {
	if err := (Overrides{}).Validate(); err != nil {
		t.Errorf("empty overrides: %v", err)
	}
	if err := fullOverrides().Validate(); err != nil {
		t.Errorf("full overrides: %v", err)
	}

	bad := Overrides{
		Rate:            &bucket.Rate{},
		Burst:           ptr[int64](0),
		Concurrency:     ptr[int64](0),
		Weight:          ptr[int64](0),
		Admit:           AdmitOverrides{Rate: &bucket.Rate{}, Burst: ptr[int64](-3)},
		MaxBacklog:      ptr[int64](0),
		MaxBacklogBytes: ptr(ByteSize(0)),
		Retry: RetryOverrides{
			MaxAttempts:      ptr(0),
			MinBackoff:       ptr(Duration(time.Hour)),
			MaxBackoff:       ptr(Duration(time.Minute)),
			MaxDoublings:     ptr(-1),
			MaxRetryDuration: ptr(Duration(-time.Second)),
		},
		Timeout:        ptr(Duration(2 * time.Hour)),
		WebhookSecrets: Secrets{"whsec_"},
	}
	want := []string{
		"admit.burst", "admit.rate", "burst", "concurrency", "max_backlog", "max_backlog_bytes",
		"rate", "retry.max_attempts", "retry.max_backoff", "retry.max_doublings",
		"retry.max_retry_duration", "timeout", "webhook_secrets[0]", "weight",
	}
	err := bad.Validate()
	if got := fields(t, err); !slices.Equal(got, want) {
		t.Errorf("problems in\n%v\n= %v\nwant %v", err, got, want)
	}
	if !strings.Contains(err.Error(), "retry.max_backoff: must be at least retry.min_backoff (1h), got 1m") {
		t.Errorf("error\n%v\nlacks the backoff order message", err)
	}

	// burst × interval is checked when both are set here, else on the
	// resolved policy.
	day := bucket.Rate{Tokens: 1, Per: bucket.Day}
	if got := fields(t, (Overrides{Rate: &day, Burst: ptr[int64](50_000)}).Validate()); !slices.Equal(got, []string{"burst"}) {
		t.Errorf("1/d with burst 50 000: problems %v, want [burst]", got)
	}
	if err := (Overrides{Rate: &day}).Validate(); err != nil {
		t.Errorf("1/d alone: %v", err)
	}
	if got := fields(t, Resolve(Overrides{Rate: &day, Burst: ptr[int64](41_666)}).Validate()); len(got) != 0 {
		t.Errorf("1/d with burst 41 666 resolved: problems %v", got)
	}

	// The order of the backoffs is checked only when both are set here: the
	// other may come from another layer.
	onlyMin := Overrides{Retry: RetryOverrides{MinBackoff: ptr(Duration(2 * time.Hour))}}
	if err := onlyMin.Validate(); err != nil {
		t.Errorf("min_backoff alone: %v", err)
	}
	if got := fields(t, Resolve(onlyMin).Validate()); !slices.Equal(got, []string{"retry.max_backoff"}) {
		t.Errorf("resolved min_backoff 2h over builtin max_backoff 1h: problems %v", got)
	}
}

func TestWithPrefix(t *testing.T) {
	err := Overrides{Burst: ptr[int64](0), WebhookSecrets: Secrets{"x"}}.Validate()
	got := fields(t, WithPrefix("tenants.acme", err))
	want := []string{"tenants.acme.burst", "tenants.acme.webhook_secrets[0]"}
	if !slices.Equal(got, want) {
		t.Errorf("prefixed fields %v, want %v", got, want)
	}
	plain := WithPrefix("limits.x", errors.New("boom"))
	if plain.Error() != "limits.x: boom" {
		t.Errorf("prefixed plain error = %q", plain)
	}
	if WithPrefix("x", nil) != nil {
		t.Error("WithPrefix(nil) != nil")
	}
}

func TestParseWebhookSecret(t *testing.T) {
	good := map[string]int{
		secretA: 32,
		secretB: 24,
		"whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+Pw==": 64,
	}
	for s, n := range good {
		key, err := ParseWebhookSecret(s)
		if err != nil || len(key) != n {
			t.Errorf("ParseWebhookSecret(%q) = %d bytes, %v; want %d bytes", s, len(key), err, n)
		}
	}
	bad := []string{
		"",
		"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=", // no prefix
		"whsec_",                                 // empty
		"whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRY=", // 23 bytes
		"whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+P0A=", // 65 bytes
		"whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8",                                              // unpadded
		"whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh-=",                                             // URL alphabet
		"whsec_AAECAwQFBgcICQoLDA0O\nDxAREhMUFRYXGBkaGxwdHh8=",                                           // line break
		"WHSEC_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",                                             // prefix case
	}
	for _, s := range bad {
		_, err := ParseWebhookSecret(s)
		if !errors.Is(err, ErrInvalidSecret) {
			t.Errorf("ParseWebhookSecret(%q) error = %v, want ErrInvalidSecret", s, err)
			continue
		}
		if body := strings.TrimPrefix(s, "whsec_"); len(body) > 4 && strings.Contains(err.Error(), body) {
			t.Errorf("error %q echoes the secret", err)
		}
	}
	keys, err := Secrets{secretA, secretB}.Keys()
	if err != nil || len(keys) != 2 || len(keys[0]) != 32 || keys[0][31] != 31 || len(keys[1]) != 24 {
		t.Errorf("Keys() = %v, %v", keys, err)
	}
	if _, err := (Secrets{secretA, "whsec_x"}).Keys(); !errors.Is(err, ErrInvalidSecret) || !strings.Contains(err.Error(), "webhook secret 1") {
		t.Errorf("Keys() with a bad secret: %v", err)
	}
}

func TestValidTenantID(t *testing.T) {
	good := []string{"a", "acme", "A-Z_0.9@x", "...", ".a", "..a", strings.Repeat("x", MaxTenantIDLen), "user@example.com"}
	for _, id := range good {
		if err := ValidTenantID(id); err != nil {
			t.Errorf("ValidTenantID(%q) = %v", id, err)
		}
	}
	bad := []string{"", ".", "..", strings.Repeat("x", MaxTenantIDLen+1), "a/b", "a:b", "{s1}", "a b", "é", "a\x00", "a%2F", "a+b", "*"}
	for _, id := range bad {
		if err := ValidTenantID(id); !errors.Is(err, ErrInvalidTenantID) {
			t.Errorf("ValidTenantID(%q) = %v, want ErrInvalidTenantID", id, err)
		}
	}
	long := strings.Repeat("y", 5000)
	if err := ValidTenantID(long); strings.Contains(err.Error(), "yyyy") {
		t.Errorf("error echoes the id: %v", err)
	}
}

func TestValidTenantPrefix(t *testing.T) {
	for _, p := range []string{"", ".", "..", "acme-", "A-Z_0.9@", strings.Repeat("x", MaxTenantIDLen)} {
		if err := ValidTenantPrefix(p); err != nil {
			t.Errorf("ValidTenantPrefix(%q) = %v", p, err)
		}
	}
	for _, p := range []string{strings.Repeat("x", MaxTenantIDLen+1), "a/", "a:", "{s1", "a ", "é", "*", "a%"} {
		if err := ValidTenantPrefix(p); !errors.Is(err, ErrInvalidTenantID) {
			t.Errorf("ValidTenantPrefix(%q) = %v, want ErrInvalidTenantID", p, err)
		}
	}
}

// The store's bounds are Validate's, named in user terms (formerly the
// store's CheckStorable).
func TestValidateNamesStorageBoundsInUserTerms(t *testing.T) {
	if err := Builtin().Validate(); err != nil {
		t.Fatalf("builtin policy: %v", err)
	}
	p := Builtin()
	p.Concurrency, p.Retry.MaxDoublings, p.Retry.MaxRetryDuration = 2_000_000, 63, 200*24*time.Hour
	err := p.Validate()
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("got %v, want *FieldError values", err)
	}
	msg := err.Error()
	for _, want := range []string{"concurrency: must be at most 1000000", "retry.max_doublings: must be at most 62",
		"retry.max_retry_duration: must be at most 2777h46m40s"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
}

func TestResultSettingsBounds(t *testing.T) {
	big, zero := MaxResultBytesLimit+1, ByteSize(0)
	for _, o := range []Overrides{{MaxResultBytes: &big}, {MaxResultBytes: &zero},
		{ResultHeaders: []string{""}}, {ResultHeaders: make([]string, MaxResultHeaders+1)}} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v: want an error", o)
		}
	}
	ok := MaxResultBytesLimit
	if err := (Overrides{MaxResultBytes: &ok, ResultHeaders: []string{"X-Usage-*", "etag"}}).Validate(); err != nil {
		t.Errorf("valid result settings refused: %v", err)
	}
	allow := ResultHeadersDefault()
	for name, want := range map[string]bool{"content-type": true, "X-RateLimit-Remaining": true,
		"x-ratelimit-reset": true, "Retry-After": true, "ratelimit": true, "Set-Cookie": false, "X-Rate": false} {
		if got := ResultHeaderAllowed(allow, name); got != want {
			t.Errorf("ResultHeaderAllowed(default, %q) = %v, want %v", name, got, want)
		}
	}
}

// TestUpstreamsField: a policy's default upstreams are validated like a
// job's (at most 4 valid, distinct names), layer like result_headers (an
// empty list clears a lower layer's) and show in the view.
func TestUpstreamsField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ups  []string
		want []string // fields in error
	}{
		{nil, nil},
		{[]string{}, nil},
		{[]string{"sms", "llm"}, nil},
		{[]string{"a", "b", "c", "d", "e"}, []string{"upstreams"}},
		{[]string{"a", "a"}, []string{"upstreams[1]"}},
		{[]string{"a:b"}, []string{"upstreams[0]"}},
	} {
		if got := fields(t, (Overrides{Upstreams: tc.ups}).Validate()); strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("Overrides{Upstreams: %q}.Validate fields = %v, want %v", tc.ups, got, tc.want)
		}
		p := Builtin()
		p.Upstreams = tc.ups
		if (p.Validate() == nil) != (tc.want == nil) {
			t.Errorf("Policy{Upstreams: %q}.Validate = %v", tc.ups, p.Validate())
		}
	}
	defaults := Overrides{Upstreams: []string{"shared"}}
	if got := Resolve(defaults).View().Upstreams; !slices.Equal(got, []string{"shared"}) {
		t.Errorf("defaults' upstreams = %v", got)
	}
	if got := Resolve(defaults, Overrides{Upstreams: []string{}}).View().Upstreams; got == nil || len(got) != 0 {
		t.Errorf("an empty tenant list over the defaults' = %#v, want []", got)
	}
	if got := Resolve(defaults, Overrides{}).View().Upstreams; !slices.Equal(got, []string{"shared"}) {
		t.Errorf("an unset tenant list = %v, want the defaults'", got)
	}
	o, err := DecodeJSON(strings.NewReader(`{"upstreams":["x","y"]}`))
	if err != nil || !slices.Equal(o.Upstreams, []string{"x", "y"}) {
		t.Errorf("DecodeJSON upstreams = %v, %v", o.Upstreams, err)
	}
}

func TestPacingField(t *testing.T) {
	t.Parallel()
	if got := Builtin().Pacing; got != PacingHeaders {
		t.Fatalf("built-in pacing = %q, want %q", got, PacingHeaders)
	}
	for _, tc := range []struct {
		doc     string
		want    Pacing
		invalid bool
	}{
		{`{"pacing":"headers"}`, PacingHeaders, false},
		{`{"pacing":"off"}`, PacingOff, false},
		{`{"pacing":"Headers"}`, "Headers", true},
		{`{"pacing":""}`, "", true},
	} {
		o, err := DecodeJSON(strings.NewReader(tc.doc))
		if err != nil {
			t.Fatalf("DecodeJSON(%s): %v", tc.doc, err)
		}
		y, err := decodeYAML("pacing: \"" + string(*o.Pacing) + "\"\n")
		if err != nil || *y.Pacing != *o.Pacing {
			t.Errorf("YAML pacing %q = %v, %v", *o.Pacing, y.Pacing, err)
		}
		got := fields(t, o.Validate())
		if tc.invalid != slices.Equal(got, []string{"pacing"}) || (!tc.invalid && len(got) > 0) {
			t.Errorf("%s: Validate fields = %v, want invalid %v", tc.doc, got, tc.invalid)
		}
		if p := Resolve(o); p.Pacing != tc.want || (p.Validate() != nil) != tc.invalid {
			t.Errorf("%s: resolved pacing %q, Validate %v", tc.doc, p.Pacing, p.Validate())
		}
	}
	if got := Resolve(Overrides{Pacing: ptr(PacingOff)}, Overrides{}).View().Pacing; got != PacingOff {
		t.Errorf("an unset tenant pacing over defaults' off = %q", got)
	}
}
