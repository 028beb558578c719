package job

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestAttrsCheck(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		a    Attrs
		want []string // fields in error; nil = valid
	}{
		{"webhook", Attrs{Type: "webhook", Cost: 1}, nil},
		{"task at", Attrs{Type: "task", Cost: 5, RunAt: at, IdemKey: "order-1"}, nil},
		{"http delayed", Attrs{Type: "http", Cost: 2, Delay: MaxDelay}, nil},
		{"no type", Attrs{Cost: 1}, []string{"type"}},
		{"unknown type", Attrs{Type: "fax", Cost: 1}, []string{"type"}},
		{"zero cost", Attrs{Type: "task", Cost: 0}, []string{"cost"}},
		{"cost above max", Attrs{Type: "task", Cost: 6}, []string{"cost"}},
		{"negative delay", Attrs{Type: "task", Cost: 1, Delay: -time.Second}, []string{"delay"}},
		{"delay above max", Attrs{Type: "task", Cost: 1, Delay: MaxDelay + time.Microsecond}, []string{"delay"}},
		{"delay and run_at", Attrs{Type: "task", Cost: 1, Delay: time.Second, RunAt: at}, []string{"delay"}},
		{"run_at in 1970", Attrs{Type: "task", Cost: 1, RunAt: time.Unix(0, 0)}, []string{"run_at"}},
		{"run_at past 2112", Attrs{Type: "task", Cost: 1, RunAt: MaxRunAt.Add(time.Microsecond)}, []string{"run_at"}},
		{"long idempotency key", Attrs{Type: "task", Cost: 1, IdemKey: strings.Repeat("k", MaxIdemKeyLen+1)}, []string{"idempotency_key"}},
		{"non-ASCII idempotency key", Attrs{Type: "task", Cost: 1, IdemKey: "clé"}, []string{"idempotency_key"}},
	}
	for _, tc := range cases {
		if got := fields(tc.a.Check(5)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: fields in error = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestCheckReturnsAttrs: a valid Spec's Attrs are what the store is given,
// and they pass Attrs.Check with the same rules.
func TestCheckReturnsAttrs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		body string
		want Attrs
	}{
		{`{"type":"task","task_type":"t"}`, Attrs{Type: "task", Cost: 1}},
		{`{"type":"task","task_type":"t","cost":3,"delay":"90s","idempotency_key":"k"}`,
			Attrs{Type: "task", Cost: 3, Delay: 90 * time.Second, IdemKey: "k"}},
		{`{"type":"task","task_type":"t","run_at":"2030-01-01T00:00:00.5Z"}`,
			Attrs{Type: "task", Cost: 1, RunAt: time.Date(2030, 1, 1, 0, 0, 0, 5e8, time.UTC)}},
		{`{"type":"task","task_type":"t","run_at":"1969-07-20T20:17:00Z"}`, Attrs{Type: "task", Cost: 1}}, // as soon as possible
	}
	for _, tc := range cases {
		s, err := Parse([]byte(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		a, err := s.Check(rules)
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		if a.Type != tc.want.Type || a.Cost != tc.want.Cost || a.Delay != tc.want.Delay ||
			!a.RunAt.Equal(tc.want.RunAt) || a.IdemKey != tc.want.IdemKey {
			t.Errorf("%s: attrs %+v, want %+v", tc.body, a, tc.want)
		}
		if err := a.Check(rules.MaxCost); err != nil {
			t.Errorf("%s: the attrs of a valid spec fail Attrs.Check: %v", tc.body, err)
		}
	}
}

func TestSpecDelayAndRunAtBounds(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"type":"task","task_type":"t","delay":"2778h"}`:                    "delay: at most 2777h46m40s",
		`{"type":"task","task_type":"t","delay":"9000h"}`:                    "delay: at most 2777h46m40s",
		`{"type":"task","task_type":"t","run_at":"2200-01-01T00:00:00Z"}`:    "run_at: must be before 2112-09-17T23:53:47Z",
		`{"type":"task","task_type":"t","idempotency_key":"` + "\x7f" + `"}`: "idempotency_key: byte 0 is not printable ASCII",
	} {
		s, err := Parse([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Validate(rules); err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
}
