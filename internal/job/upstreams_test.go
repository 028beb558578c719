package job

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// TestSpecUpstreams: every job type takes "upstreams" (at most 4 valid,
// distinct names, one problem each); Check sorts them into the Attrs and the
// canonical body; absent stays absent (the policy's default applies) and []
// stays [] (none).
func TestSpecUpstreams(t *testing.T) {
	t.Parallel()
	bodies := map[string]string{
		"webhook": `{"type":"webhook","url":"https://example.com/h","event":"e"`,
		"http":    `{"type":"http","url":"https://example.com/h","method":"POST"`,
		"task":    `{"type":"task","task_type":"t"`,
	}
	for typ, head := range bodies {
		for _, tc := range []struct {
			name, ups string // ups: the JSON value, "" = absent
			want      []string
			problems  []string // fields in error
			canonical string   // the canonical body's "upstreams", "" = absent
		}{
			{"absent", "", nil, nil, ""},
			{"empty", `[]`, []string{}, nil, `[]`},
			{"sorted", `["sms-7","llm","a@b.c"]`, []string{"a@b.c", "llm", "sms-7"}, nil, `["a@b.c","llm","sms-7"]`},
			{"four", `["a","b","c","d"]`, []string{"a", "b", "c", "d"}, nil, `["a","b","c","d"]`},
			{"five", `["a","b","c","d","e"]`, nil, []string{"upstreams"}, ""},
			{"duplicate", `["a","b","a"]`, nil, []string{"upstreams[2]"}, ""},
			{"bad name", `["ok","no:colon"]`, nil, []string{"upstreams[1]"}, ""},
			{"empty name", `[""]`, nil, []string{"upstreams[0]"}, ""},
			{"long name", `["` + strings.Repeat("x", 65) + `"]`, nil, []string{"upstreams[0]"}, ""},
			{"every problem", `["{x}","y","y","z","w"]`, nil, []string{"upstreams", "upstreams[0]", "upstreams[2]"}, ""},
		} {
			body := head + "}"
			if tc.ups != "" {
				body = head + `,"upstreams":` + tc.ups + "}"
			}
			s, err := Parse([]byte(body))
			if err != nil {
				t.Fatalf("%s %s: parse: %v", typ, tc.name, err)
			}
			a, err := s.Check(rules)
			if got := fields(err); !slices.Equal(got, tc.problems) {
				t.Errorf("%s %s: fields in error = %v, want %v (%v)", typ, tc.name, got, tc.problems, err)
				continue
			}
			if tc.problems != nil {
				continue
			}
			if !slices.Equal(a.Upstreams, tc.want) || (a.Upstreams == nil) != (tc.want == nil) {
				t.Errorf("%s %s: Attrs.Upstreams = %#v, want %#v", typ, tc.name, a.Upstreams, tc.want)
			}
			if err := a.Check(rules.MaxCost); err != nil {
				t.Errorf("%s %s: the attrs fail Attrs.Check: %v", typ, tc.name, err)
			}
			var canon map[string]json.RawMessage
			if err := json.Unmarshal(s.Canonical(), &canon); err != nil {
				t.Fatal(err)
			}
			if got := string(canon["upstreams"]); got != tc.canonical {
				t.Errorf("%s %s: canonical upstreams = %s, want %s", typ, tc.name, got, tc.canonical)
			}
		}
	}
}

// TestAttrsCheckUpstreams: the store's check of Attrs refuses what the
// Spec check refuses.
func TestAttrsCheckUpstreams(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ups  []string
		want []string
	}{
		{[]string{"a", "b"}, nil},
		{[]string{"a", "b", "c", "d", "e"}, []string{"upstreams"}},
		{[]string{"a", "a"}, []string{"upstreams[1]"}},
		{[]string{"a b"}, []string{"upstreams[0]"}},
	} {
		if got := fields(Attrs{Type: "task", Cost: 1, Upstreams: tc.ups}.Check(5)); !slices.Equal(got, tc.want) {
			t.Errorf("Attrs{Upstreams: %q}.Check fields = %v, want %v", tc.ups, got, tc.want)
		}
	}
}
