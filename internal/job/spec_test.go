package job

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

var rules = Rules{TaskQueues: []string{"default", "mail"}, MaxCost: 5}

// fields returns the names of the fields Validate complains about, sorted.
func fields(err error) []string {
	var out []string
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		for _, e := range joined.Unwrap() {
			var fe *FieldError
			if errors.As(e, &fe) {
				out = append(out, fe.Field)
			}
		}
	}
	slices.Sort(out)
	return out
}

func TestValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		body string
		want []string // fields in error; nil = valid
	}{
		{"webhook", `{"type":"webhook","url":"https://example.com/hook","event":"invoice.paid","payload":{"a":1}}`, nil},
		{"http", `{"type":"http","method":"POST","url":"http://api.example.com/v1","headers":{"X-A":"b"},"body":"hi"}`, nil},
		{"http base64", `{"type":"http","method":"PUT","url":"https://x.io","body_base64":"aGk="}`, nil},
		{"task default queue", `{"type":"task","task_type":"email:send","payload":{}}`, nil},
		{"task other queue", `{"type":"task","task_type":"email:send","queue":"mail"}`, nil},
		{"cost delay max_attempts", `{"type":"task","task_type":"t","cost":5,"delay":"1.5s","max_attempts":3}`, nil},
		{"run_at", `{"type":"task","task_type":"t","run_at":"2026-11-29T10:00:00Z"}`, nil},
		{"no type", `{"url":"https://x.io"}`, []string{"type"}},
		{"unknown type", `{"type":"email"}`, []string{"type"}},
		{"relative url", `{"type":"webhook","url":"/hook","event":"e"}`, []string{"url"}},
		{"ftp url", `{"type":"webhook","url":"ftp://x.io/a","event":"e"}`, []string{"url"}},
		{"url with credentials", `{"type":"webhook","url":"https://u:p@x.io/a","event":"e"}`, []string{"url"}},
		{"webhook without event", `{"type":"webhook","url":"https://x.io"}`, []string{"event"}},
		{"webhook with method", `{"type":"webhook","url":"https://x.io","event":"e","method":"GET"}`, []string{"method"}},
		{"bad method", `{"type":"http","method":"TRACE","url":"https://x.io"}`, []string{"method"}},
		{"CRLF in header value", `{"type":"http","method":"GET","url":"https://x.io","headers":{"X-A":"a\r\nX-B: c"}}`, []string{"headers"}},
		{"bad header name", `{"type":"http","method":"GET","url":"https://x.io","headers":{"X A":"a"}}`, []string{"headers"}},
		{"body and base64", `{"type":"http","method":"POST","url":"https://x.io","body":"a","body_base64":"YQ=="}`, []string{"body"}},
		{"bad base64", `{"type":"http","method":"POST","url":"https://x.io","body_base64":"%%"}`, []string{"body_base64"}},
		{"task without type", `{"type":"task"}`, []string{"task_type"}},
		{"queue not allowed", `{"type":"task","task_type":"t","queue":"secret"}`, []string{"queue"}},
		{"zero cost", `{"type":"task","task_type":"t","cost":0}`, []string{"cost"}},
		{"cost above max", `{"type":"task","task_type":"t","cost":6}`, []string{"cost"}},
		{"negative delay", `{"type":"task","task_type":"t","delay":"-1s"}`, []string{"delay"}},
		{"delay and run_at", `{"type":"task","task_type":"t","delay":"1s","run_at":"2026-11-29T10:00:00Z"}`, []string{"delay"}},
		{"bad run_at", `{"type":"task","task_type":"t","run_at":"tomorrow"}`, []string{"run_at"}},
		{"max_attempts 0", `{"type":"task","task_type":"t","max_attempts":0}`, []string{"max_attempts"}},
		{"every problem at once", `{"type":"http","method":"X","url":"x","cost":-1,"delay":"soon"}`, []string{"cost", "delay", "method", "url"}},
		// Found by a hostile probe (#18): what Go would write to the request line as it is.
		{"space in the query", `{"type":"http","method":"GET","url":"https://x.io/a?c=d HTTP/1.0"}`, []string{"url"}},
		{"space in the path", `{"type":"http","method":"GET","url":"https://x.io/a b"}`, []string{"url"}},
		{"tab in the url", `{"type":"webhook","url":"https://x.io/a\tb","event":"e"}`, []string{"url"}},
		{"CRLF in the url", `{"type":"http","method":"GET","url":"https://x.io/a\r\nX-B: c"}`, []string{"url"}},
		{"DEL in the url", `{"type":"http","method":"GET","url":"https://x.io/\u007f"}`, []string{"url"}},
		{"leading space", `{"type":"http","method":"GET","url":" https://x.io/"}`, []string{"url"}},
		{"non-ASCII query", `{"type":"http","method":"GET","url":"https://x.io/?q=\u00e9"}`, []string{"url"}},
		{"non-ASCII path is escaped by Go", `{"type":"http","method":"GET","url":"https://x.io/caf\u00e9?q=%C3%A9"}`, nil},
		{"no host", `{"type":"http","method":"GET","url":"http:///a"}`, []string{"url"}},
		{"opaque", `{"type":"http","method":"GET","url":"http:x.io"}`, []string{"url"}},
		{"Connection header", `{"type":"http","method":"GET","url":"https://x.io","headers":{"Connection":"close"}}`, []string{"headers"}},
		{"lower-case hop-by-hop headers", `{"type":"http","method":"GET","url":"https://x.io","headers":{"upgrade":"h2c","te":"trailers","transfer-encoding":"chunked"}}`,
			[]string{"headers", "headers", "headers"}},
		{"Proxy-* headers", `{"type":"http","method":"GET","url":"https://x.io","headers":{"PROXY-AUTHORIZATION":"x","Proxy-Connection":"y"}}`,
			[]string{"headers", "headers"}},
		// #18 hostile requests: a zone that means nothing (not link-local); a
		// port Go parses but no socket has; a payload Redis's cjson cannot read.
		{"IPv6 zone on a global address", `{"type":"webhook","url":"http://[2606:4700::1%25eth0]/","event":"e"}`, []string{"url"}},
		{"IPv6 zone on a link-local address", `{"type":"webhook","url":"http://[fe80::1%25eth0]:8080/","event":"e"}`, nil},
		{"IPv6 without a zone", `{"type":"webhook","url":"http://[2606:4700::1]:8443/","event":"e"}`, nil},
		{"port above 65535", `{"type":"webhook","url":"http://x.io:65536/","event":"e"}`, []string{"url"}},
		{"port 0", `{"type":"webhook","url":"http://x.io:0/","event":"e"}`, []string{"url"}},
		{"payload at the depth bound", `{"type":"task","task_type":"t","payload":{"a":` + nest(MaxPayloadDepth-1) + `}}`, nil},
		{"payload past the depth bound", `{"type":"webhook","url":"https://x.io","event":"e","payload":` + nest(MaxPayloadDepth+1) + `}`, []string{"payload"}},
		{"brackets in strings do not nest", `{"type":"task","task_type":"t","payload":"` + strings.Repeat("[{", 600) + `\"[{"}`, nil},
		{"end-to-end headers pass", `{"type":"http","method":"GET","url":"https://x.io","headers":{"Authorization":"x","X-Proxy-Id":"y","Accept":"z"}}`, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := Parse([]byte(tc.body))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			got := fields(s.Validate(rules))
			if !slices.Equal(got, tc.want) {
				t.Errorf("fields in error = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseRejectsUnknownFields(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(`{"type":"task","task_type":"t","colour":"red"}`))
	if err == nil || !strings.Contains(err.Error(), "colour") {
		t.Fatalf("Parse with unknown field: err = %v, want it named", err)
	}
}

func TestHopByHop(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"Connection", "connection", "UPGRADE", "Keep-Alive", "TE", "te", "Trailer",
		"Transfer-Encoding", "Expect", "Proxy-Authorization", "Proxy-Authenticate", "proxy-connection", "Proxy-X"} {
		if !HopByHop(name) {
			t.Errorf("HopByHop(%q) = false", name)
		}
		if err := CheckHeader(name, "v"); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("CheckHeader(%q) = %v, want it named as hop-by-hop", name, err)
		}
	}
	for _, name := range []string{"Authorization", "Content-Type", "Trailers", "Proxy", "X-Proxy-Id", "Tea"} {
		if HopByHop(name) || CheckHeader(name, "v") != nil {
			t.Errorf("%q refused as hop-by-hop", name)
		}
	}
}

// Found by a hostile probe (#18): invalid UTF-8 was kept raw in payload and
// replaced in the other fields.
func TestCheckUTF8(t *testing.T) {
	t.Parallel()
	cases := []struct{ body, path string }{
		{"{\"type\":\"webhook\",\"payload\":{\"a\":[1,\"x\xc0\xaf\"]}}", "payload.a[1]"},
		{"{\"type\":\"webhook\",\"event\":\"\xff\"}", "event"},
		{"{\"type\":\"http\",\"headers\":{\"X-A\":\"ok\",\"X-B\":\"\xed\xa0\x80\"}}", "headers.X-B"},
		{"{\"type\":\"task\",\"payload\":{\"k\":{},\"\xfe\":1}}", "a key of payload"},
		{"{\"typ\xe9\":\"task\"}", "a key of the job"},
		{"{\"type\":\"http\",\"body\":\"ab\xc3\"}", "body"},
	}
	for _, tc := range cases {
		err := CheckUTF8([]byte(tc.body))
		var ue *UTF8Error
		if !errors.As(err, &ue) || ue.Path != tc.path || tc.body[ue.Offset] < utf8.RuneSelf ||
			!strings.Contains(err.Error(), tc.path) {
			t.Errorf("CheckUTF8(%q) = %v, want a *UTF8Error in %s", tc.body, err, tc.path)
		}
	}
	// #18: escapes of unpaired surrogates are not Unicode either (and Redis's
	// cjson refuses them); a pair, other escapes and escaped backslashes pass.
	for body, path := range map[string]string{
		`{"type":"task","payload":{"a":["\ud800"]}}`: "payload.a[0]",
		`{"type":"task","payload":"x\uDC00"}`:        "payload",
		`{"type":"task","payload":"\ud83d\u0041"}`:   "payload",
		`{"type":"task","payload":"\ude00\ud83d"}`:   "payload",
		`{"type":"webhook","event":"e\\\ud800"}`:     "event",
		`{"type":"task","payload":{"\udbff":1}}`:     "a key of payload",
		`{"type":"task","payload":"\ud83d"}`:         "payload",
	} {
		err := CheckUTF8([]byte(body))
		var ue *UTF8Error
		if !errors.As(err, &ue) || ue.Path != path || ue.Escape == "" || body[ue.Offset:ue.Offset+6] != ue.Escape ||
			!strings.Contains(err.Error(), "surrogate") {
			t.Errorf("CheckUTF8(%s) = %v, want an unpaired surrogate in %s", body, err, path)
		}
	}
	if err := CheckUTF8([]byte(`{"type":"task","payload":"\\ud800 \u00e9 \"\ud83d\ude00\uDBFF\uDFFF"}`)); err != nil {
		t.Errorf("escapes refused: %v", err)
	}
	if err := CheckUTF8([]byte(`{"type":"webhook","event":"café ✓","payload":"\ud83d\ude00"}`)); err != nil {
		t.Errorf("valid UTF-8 refused: %v", err)
	}
}

func TestCanonicalFillsDefaultsAndDropsScheduling(t *testing.T) {
	t.Parallel()
	s, _ := Parse([]byte(`{"type":"task","task_type":"t","delay":"2s","idempotency_key":"k","payload":{"x":1}}`))
	if err := s.Validate(rules); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(s.Canonical(), &got); err != nil {
		t.Fatal(err)
	}
	if got["queue"] != "default" {
		t.Errorf("queue = %v, want the default filled in", got["queue"])
	}
	for _, k := range []string{"delay", "idempotency_key", "cost", "run_at"} {
		if _, ok := got[k]; ok {
			t.Errorf("canonical JSON keeps %q: %v", k, got)
		}
	}
	if *s.Cost != 1 {
		t.Errorf("cost default = %d, want 1", *s.Cost)
	}
}

// nest is n arrays, one in the other.
func nest(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
