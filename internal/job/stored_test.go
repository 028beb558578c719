package job

import (
	"reflect"
	"testing"
)

// storedJobs are stored jobs of each type (Canonical's JSON) and bodies
// encoding/json decodes leniently.
var storedJobs = []string{
	`{"type":"webhook","event":"bench.r1","payload":{"i":12345,"s":"é\u2028<>&"},"url":"http://127.0.0.1:45678/r1"}`,
	`{"type":"http","url":"https://example.com/x?a=1","method":"PUT","headers":{"X-A":"1","Content-Type":"text/plain"},"body":"hi","max_attempts":3,"callback":{"url":"https://example.com/cb"},"upstreams":["openai"]}`,
	`{"type":"http","url":"https://example.com/x","method":"POST","body_base64":"aGk=","upstreams":[]}`,
	`{"type":"task","task_type":"email:send","queue":"default","payload":[1,2,{"a":null}]}`,
	`{"Type":"webhook","EVENT":"e","url":"http://a/","payload":null}`,
	`{"type":"webhook","type":"http","url":"http://a/","headers":{"a":"1","a":"2"}}`,
	"{\"type\":\"webhook\",\"event\":\"e\xff\",\"url\":\"http://a/\"}",
}

func TestParseStoredDecodesAsParse(t *testing.T) {
	t.Parallel()
	for _, raw := range storedJobs {
		want, err := Parse([]byte(raw))
		if err != nil {
			t.Fatalf("Parse(%q): %v", raw, err)
		}
		got, err := ParseStored([]byte(raw))
		if err != nil {
			t.Errorf("ParseStored(%q): %v", raw, err)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("ParseStored(%q) = %+v, want %+v (Parse's)", raw, got, want)
		}
	}
}

func TestParseStoredRejectsWhatParseRejects(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{``, `{`, `[]`, `"x"`, `{"type":"task","task_type":"t","colour":"red"}`,
		`{"type":1}`, `{"type":"http","headers":{"a":1}}`, `{"type":"webhook","callback":{"url":"x","y":1}}`} {
		if _, err := Parse([]byte(raw)); err == nil {
			t.Fatalf("Parse(%q) succeeded", raw)
		}
		if s, err := ParseStored([]byte(raw)); err == nil {
			t.Errorf("ParseStored(%q) = %+v, want an error", raw, s)
		}
	}
}

// BenchmarkParseStored: ParseStored beside Parse on a stored webhook job.
func BenchmarkParseStored(b *testing.B) {
	raw := []byte(storedJobs[0])
	for _, f := range []struct {
		name  string
		parse func([]byte) (Spec, error)
	}{{"ParseStored", ParseStored}, {"Parse", Parse}} {
		b.Run(f.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := f.parse(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
