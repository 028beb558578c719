package policy

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/bucket"
)

const (
	secretA = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=" // 32 bytes
	secretB = "whsec_ZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXp7"             // 24 bytes
)

func ptr[T any](v T) *T { return &v }

// fullOverrides sets every field; fullJSON and fullYAML spell it.
func fullOverrides() Overrides {
	return Overrides{
		Rate:            &bucket.Rate{Tokens: 50, Per: time.Second},
		Burst:           ptr[int64](5),
		Concurrency:     ptr[int64](3),
		Weight:          ptr[int64](2),
		Admit:           AdmitOverrides{Rate: &bucket.Rate{Tokens: 600, Per: time.Minute}, Burst: ptr[int64](20)},
		MaxBacklog:      ptr[int64](500),
		MaxBacklogBytes: ptr(MiB),
		Retry: RetryOverrides{
			MaxAttempts:      ptr(3),
			MinBackoff:       ptr(Duration(10 * time.Second)),
			MaxBackoff:       ptr(Duration(5 * time.Minute)),
			MaxDoublings:     ptr(3),
			MaxRetryDuration: ptr(Duration(0)),
		},
		Timeout:        ptr(Duration(200 * time.Millisecond)),
		Adaptive:       ptr(false),
		WebhookSecrets: Secrets{secretA, secretB},
	}
}

const fullJSON = `{"rate":"50/s","burst":5,"concurrency":3,"weight":2,` +
	`"admit":{"rate":"600/m","burst":20},"max_backlog":500,"max_backlog_bytes":"1MiB",` +
	`"retry":{"max_attempts":3,"min_backoff":"10s","max_backoff":"5m","max_doublings":3,"max_retry_duration":"0s"},` +
	`"timeout":"200ms","adaptive":false,"webhook_secrets":["` + secretA + `","` + secretB + `"]}`

const fullYAML = `
rate: 50/s
burst: 5
concurrency: 3
weight: 2
admit: {rate: 600/m, burst: 20}
max_backlog: 500
max_backlog_bytes: 1MiB
retry: {max_attempts: 3, min_backoff: 10s, max_backoff: 5m, max_doublings: 3, max_retry_duration: 0s}
timeout: 200ms
adaptive: false
webhook_secrets: ["` + secretA + `", "` + secretB + `"]
`

func decodeYAML(s string) (Overrides, error) {
	dec := yaml.NewDecoder(strings.NewReader(s))
	dec.KnownFields(true)
	var o Overrides
	err := dec.Decode(&o)
	return o, err
}

func TestDecodeJSONEveryField(t *testing.T) {
	got, err := DecodeJSON(strings.NewReader(fullJSON))
	if err != nil {
		t.Fatal(err)
	}
	if want := fullOverrides(); !reflect.DeepEqual(got, want) {
		t.Errorf("DecodeJSON =\n%+v\nwant\n%+v", got, want)
	}
}

func TestDecodeYAMLEveryField(t *testing.T) {
	got, err := decodeYAML(fullYAML)
	if err != nil {
		t.Fatal(err)
	}
	if want := fullOverrides(); !reflect.DeepEqual(got, want) {
		t.Errorf("yaml decode =\n%+v\nwant\n%+v", got, want)
	}
}

func TestJSONRoundTrip(t *testing.T) {
	for name, o := range map[string]Overrides{
		"full":        fullOverrides(),
		"empty":       {},
		"no secrets":  {WebhookSecrets: Secrets{}},
		"only admit":  {Admit: AdmitOverrides{Burst: ptr[int64](7)}},
		"plain bytes": {MaxBacklogBytes: ptr(ByteSize(1000))},
	} {
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatalf("%s: marshal: %v", name, err)
		}
		back, err := DecodeJSON(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: decode %s: %v", name, b, err)
		}
		if !reflect.DeepEqual(back, o) {
			t.Errorf("%s: round trip through %s = %+v, want %+v", name, b, back, o)
		}
	}
	b, _ := json.Marshal(Overrides{})
	if string(b) != "{}" {
		t.Errorf("empty overrides marshal to %s, want {}", b)
	}
}

func TestYAMLRoundTrip(t *testing.T) {
	o := fullOverrides()
	b, err := yaml.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeYAML(string(b))
	if err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	if !reflect.DeepEqual(back, o) {
		t.Errorf("round trip through\n%s= %+v, want %+v", b, back, o)
	}
}

func TestDecodeJSONRejects(t *testing.T) {
	for name, tc := range map[string]struct{ in, want string }{
		"unknown field":        {`{"rate":"5/s","bogus":1}`, `unknown field "bogus"`},
		"unknown nested field": {`{"retry":{"max_attempts":2,"backoff":"1s"}}`, `unknown field "backoff"`},
		"unknown admit field":  {`{"admit":{"rat":"5/s"}}`, `unknown field "rat"`},
		"bad rate":             {`{"rate":"5/x"}`, `unit "x"`},
		"rate as number":       {`{"rate":5}`, `rate`},
		"bad duration":         {`{"timeout":"15"}`, `duration "15"`},
		"duration as number":   {`{"timeout":15}`, `timeout`},
		"bad size":             {`{"max_backlog_bytes":"1MB"}`, `size "1MB"`},
		"wrong type":           {`{"burst":"5"}`, `burst`},
		"trailing data":        {`{"burst":5} {}`, `trailing data`},
		"null":                 {`null`, `got null`},
		"array":                {`[]`, `cannot unmarshal array`},
		"empty":                {``, `EOF`},
		"camelCase name":       {`{"maxBacklog":5}`, `unknown field "maxBacklog"`},
	} {
		_, err := DecodeJSON(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: DecodeJSON(%s) error = %v, want one containing %q", name, tc.in, err, tc.want)
		}
	}
}

func TestDecodeYAMLRejects(t *testing.T) {
	for name, tc := range map[string]struct{ in, want string }{
		"unknown field":        {"rate: 5/s\nbogus: 1\n", "field bogus not found in type policy.Overrides"},
		"unknown nested field": {"retry: {backoff: 1s}\n", "field backoff not found in type policy.RetryOverrides"},
		"unknown admit field":  {"admit: {rat: 5/s}\n", "field rat not found in type policy.AdmitOverrides"},
		"bad rate":             {"rate: 5/x\n", `line 1: rate "5/x"`},
		"bad admit rate":       {"admit: {rate: fast}\n", `line 1: rate "fast"`},
		"bad duration":         {"timeout: 15\n", `line 1: duration "15"`},
		"bad size":             {"max_backlog_bytes: 1MB\n", `line 1: size "1MB"`},
		"wrong type":           {"burst: five\n", "cannot unmarshal !!str `five` into int64"},
		"not a mapping":        {"5\n", "into policy.Overrides"},
	} {
		_, err := decodeYAML(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error = %v, want one containing %q", name, err, tc.want)
		}
	}
}

// A document with several decoding problems reports all of them.
func TestDecodeYAMLListsEveryProblem(t *testing.T) {
	_, err := decodeYAML("rate: 5/x\nburst: five\nadmit: {rate: 1/w, extra: 1}\ntimeout: soon\nbogus: 1\n")
	if err == nil {
		t.Fatal("want an error")
	}
	for _, want := range []string{
		`line 1: rate "5/x"`,
		"line 2: cannot unmarshal !!str `five`",
		`line 3: rate "1/w"`,
		"line 3: field extra not found",
		`line 4: duration "soon"`,
		"line 5: field bogus not found",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error\n%v\ndoes not contain %q", err, want)
		}
	}
}

func TestResolveMergeOrder(t *testing.T) {
	defaults := Overrides{
		Rate:     &bucket.Rate{Tokens: 20, Per: time.Second},
		Burst:    ptr[int64](4),
		Admit:    AdmitOverrides{Burst: ptr[int64](50)},
		Retry:    RetryOverrides{MaxAttempts: ptr(4), MinBackoff: ptr(Duration(2 * time.Second))},
		Adaptive: ptr(false),
	}
	tenant := Overrides{
		Burst:          ptr[int64](9),
		Retry:          RetryOverrides{MaxAttempts: ptr(1)},
		WebhookSecrets: Secrets{secretA},
	}
	want := Builtin()
	want.Rate = bucket.Rate{Tokens: 20, Per: time.Second} // from defaults
	want.Burst = 9                                        // tenant over defaults
	want.Admit.Burst = 50                                 // defaults, nested field
	want.Retry.MaxAttempts = 1                            // tenant over defaults, nested
	want.Retry.MinBackoff = 2 * time.Second               // defaults; sibling of a tenant field
	want.Adaptive = false                                 // defaults; false is a value, not unset
	want.WebhookSecrets = Secrets{secretA}
	if got := Resolve(defaults, tenant); !reflect.DeepEqual(got, want) {
		t.Errorf("Resolve(defaults, tenant) =\n%+v\nwant\n%+v", got, want)
	}

	// The later layer wins; swapping them changes the result.
	if got := Resolve(tenant, defaults); got.Burst != 4 || got.Retry.MaxAttempts != 4 {
		t.Errorf("Resolve(tenant, defaults): burst %d, max_attempts %d; want 4, 4", got.Burst, got.Retry.MaxAttempts)
	}
	if got := Resolve(); !reflect.DeepEqual(got, Builtin()) {
		t.Errorf("Resolve() = %+v, want Builtin()", got)
	}

	// An empty, non-nil secret list clears inherited secrets; nil inherits.
	withSecrets := Overrides{WebhookSecrets: Secrets{secretA, secretB}}
	if got := Resolve(withSecrets, Overrides{}); len(got.WebhookSecrets) != 2 {
		t.Errorf("nil secrets did not inherit: %d secrets", len(got.WebhookSecrets))
	}
	if got := Resolve(withSecrets, Overrides{WebhookSecrets: Secrets{}}); len(got.WebhookSecrets) != 0 {
		t.Errorf("empty secrets did not clear: %d secrets", len(got.WebhookSecrets))
	}

	// The result does not alias the layer's slice.
	got := Resolve(withSecrets)
	got.WebhookSecrets[0] = "changed"
	if withSecrets.WebhookSecrets[0] != secretA {
		t.Error("Resolve's result aliases the overrides' secrets")
	}
}

func TestBuiltin(t *testing.T) {
	p := Builtin()
	want := View{
		Rate: IntervalRate(bucket.Rate{Tokens: 10, Per: time.Second}.IntervalMicros()), Burst: 1, Concurrency: 10, Weight: 1,
		Admit:      AdmitView{Rate: IntervalRate(bucket.Rate{Tokens: 100, Per: time.Second}.IntervalMicros()), Burst: 1000},
		MaxBacklog: 100000, MaxBacklogBytes: 256 * MiB,
		Retry: RetryView{
			MaxAttempts: 8, MinBackoff: Duration(time.Second), MaxBackoff: Duration(time.Hour),
			MaxDoublings: 5, MaxRetryDuration: Duration(24 * time.Hour),
		},
		Timeout: Duration(15 * time.Second), Adaptive: true, Pacing: PacingHeaders,
		MaxResultBytes: 64 * KiB, ResultHeaders: ResultHeadersDefault(), Upstreams: []string{},
	}
	if got := p.View(); !reflect.DeepEqual(got, want) {
		t.Errorf("Builtin().View() =\n%+v\nwant\n%+v", got, want)
	}
	if err := p.Validate(); err != nil {
		t.Errorf("Builtin() is invalid: %v", err)
	}
	if p.WebhookSecrets != nil {
		t.Errorf("Builtin() has secrets: %v", p.WebhookSecrets)
	}
}

func TestMaxCost(t *testing.T) {
	for _, tc := range []struct{ burst, admit, want int64 }{{1, 1000, 1}, {50, 20, 20}, {7, 7, 7}} {
		p := Builtin()
		p.Burst, p.Admit.Burst = tc.burst, tc.admit
		if got := p.MaxCost(); got != tc.want {
			t.Errorf("MaxCost with burst %d, admit.burst %d = %d, want %d", tc.burst, tc.admit, got, tc.want)
		}
	}
}

// A daily rate reads from YAML and JSON, and the resolved policy's view
// shows it back as "N/d".
func TestDailyRateInConfigAndView(t *testing.T) {
	y, err := decodeYAML("rate: 7/d\nburst: 2\nadmit: {rate: 1000/d, burst: 50}\n")
	if err != nil {
		t.Fatal(err)
	}
	j, err := DecodeJSON(strings.NewReader(`{"rate":"7/d","burst":2,"admit":{"rate":"1000/d","burst":50}}`))
	if err != nil {
		t.Fatal(err)
	}
	for name, o := range map[string]Overrides{"yaml": y, "json": j} {
		p := Resolve(o)
		if err := p.Validate(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		v, err := json.Marshal(p.View())
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(v), `"rate":"7/d"`) || !strings.Contains(string(v), `"rate":"1000/d"`) {
			t.Errorf("%s: view %s, want rates 7/d and 1000/d", name, v)
		}
	}
}
