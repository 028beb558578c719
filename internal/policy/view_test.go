package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
)

func TestViewJSONIsStable(t *testing.T) {
	p := Builtin()
	p.WebhookSecrets = Secrets{secretA, secretB}
	got, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"rate":"10/s","burst":1,"concurrency":10,"weight":1,` +
		`"admit":{"rate":"100/s","burst":1000},"max_backlog":100000,"max_backlog_bytes":"256MiB",` +
		`"retry":{"max_attempts":8,"min_backoff":"1s","max_backoff":"1h","max_doublings":5,"max_retry_duration":"24h"},` +
		`"timeout":"15s","adaptive":true,"unsigned":false,"disable_on_gone":false,"pacing":"headers",` +
		`"max_result_bytes":"64KiB","result_headers":["Content-Type","RateLimit","RateLimit-Policy","X-RateLimit-*","Retry-After"],"upstreams":[],"webhook_secrets_count":2}`
	if string(got) != want {
		t.Errorf("json.Marshal(policy) =\n%s\nwant\n%s", got, want)
	}
}

// The view's values read back as Overrides, so a client may edit what it got.
func TestViewReadsBackAsOverrides(t *testing.T) {
	p := Resolve(fullOverrides())
	b, err := json.Marshal(p.View())
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.Replace(b, []byte(`,"webhook_secrets_count":2`), nil, 1)
	o, err := DecodeJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	o.WebhookSecrets = p.WebhookSecrets
	if back := Resolve(o); !reflect.DeepEqual(back.View(), p.View()) {
		t.Errorf("view read back as overrides resolves to %+v, want %+v", back.View(), p.View())
	}
}

func TestSecretsNeverInViewsOrLogs(t *testing.T) {
	p := Resolve(fullOverrides())
	wrapped := struct {
		Policy  Policy  `json:"policy"`
		Pointer *Policy `json:"pointer"`
	}{p, &p}
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("policy", "p", p, "secrets", p.WebhookSecrets)

	outputs := map[string]string{
		"fmt %v":  fmt.Sprintf("%v", p),
		"fmt %+v": fmt.Sprintf("%+v", p),
		"fmt %#v": fmt.Sprintf("%#v", p),
		"fmt %s":  fmt.Sprintf("%s", p.WebhookSecrets),
		"slog":    logs.String(),
	}
	for name, v := range map[string]any{"policy": p, "pointer": &p, "view": p.View(), "wrapped": wrapped} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		outputs["json "+name] = string(b)
	}
	for name, out := range outputs {
		for _, s := range p.WebhookSecrets {
			if strings.Contains(out, strings.TrimPrefix(s, SecretPrefix)) {
				t.Errorf("%s reveals a secret: %s", name, out)
			}
		}
	}
	if !strings.Contains(outputs["json policy"], `"webhook_secrets_count":2`) {
		t.Errorf("json policy lacks the secrets count: %s", outputs["json policy"])
	}
	if !strings.Contains(outputs["fmt %v"], "[2 secrets]") {
		t.Errorf("fmt %%v lacks the secrets count: %s", outputs["fmt %v"])
	}
}

// maxIntervalUS is the emission interval of 1/d.
const maxIntervalUS = 86_400_000_000

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
		{3_600_000_000, `"1/h"`},
		{1_800_000_000, `"2/h"`},
		{maxIntervalUS, `"1/d"`},
		{12_342_857_143, `"7/d"`},                // ⌈86 400 s / 7⌉
		{3_599_999_999, `0.0002777777778549383`}, // no N/s, N/m, N/h or N/d has it
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
