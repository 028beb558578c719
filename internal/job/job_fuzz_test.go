package job

import (
	"bytes"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/wire"
)

// fuzzRules are the rules the job fuzz targets check against.
var fuzzRules = Rules{TaskQueues: []string{"default", "emails"}, MaxCost: 1000}

// FuzzParse feeds a producer's job body through what the API does with it
// (CheckUTF8, Parse, Check) and asserts, for every accepted job: every
// documented bound holds, the Attrs pass the store's Attrs.Check, and the
// canonical JSON is a fixed point (it parses, checks and canonicalises to
// the same bytes).
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"type":"webhook","event":"invoice.paid","url":"https://example.com/hook","payload":{"id":1,"a":[1,2,{"b":null}]}}`,
		`{"type":"http","method":"POST","url":"https://api.example.com/v1/sms?x=1","headers":{"X-Account":"7"},"body":"hello"}`,
		`{"type":"http","method":"PUT","url":"http://10.0.0.1:8080/p%20q","body_base64":"aGVsbG8=","cost":3,"delay":"1m30s"}`,
		`{"type":"task","task_type":"email:send","payload":"x","queue":"emails","run_at":"2030-01-02T03:04:05.123456789+02:00","max_attempts":3}`,
		`{"type":"task","task_type":"t","run_at":"1969-12-31T23:59:59Z","idempotency_key":"k-1"}`,
		`{"type":"webhook","event":"\ud800","url":"https://example.com","payload":"\ud800\u0000"}`,
		`{"type":"webhook","event":"e","url":"https://example.com","payload":1e400}`,
		`{"type":"http","method":"GET","url":"https://example.com","headers":{"X-A":"\u0001"}}`,
		`{"type":"http","method":"GET","url":"https://example.com","headers":{"Proxy-Authorization":"x","":"y"}}`,
		`{"type":"webhook","event":"e","url":"https://u:p@example.com","delay":"-1s","run_at":"2200-01-01T00:00:00Z"}`,
		`{"type":"webhook","event":"e","url":"https://example.com","cost":0,"max_attempts":101}`,
		`{"type":"task","task_type":"t","delay":"2777h46m40.000001s"}`,
		`{"type":"nope"}`, `{}`, `null`, `[]`, `{"type":"webhook"} {}`, "{\"type\":\"webhook\",\"event\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := CheckUTF8(data); err != nil {
			return // FuzzCheckUTF8 covers the refusal
		}
		s, err := Parse(data)
		if err != nil {
			return
		}
		a, err := s.Check(fuzzRules)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field == "" {
				t.Fatalf("Check error %v is not a *FieldError naming its field", err)
			}
			return
		}
		checkAcceptedBounds(t, s, a)
		canon := s.Canonical()
		if !utf8.Valid(canon) {
			t.Fatalf("canonical JSON is not valid UTF-8: %q", canon)
		}
		s2, err := Parse(canon)
		if err != nil {
			t.Fatalf("canonical %s does not parse: %v", canon, err)
		}
		a2, err := s2.Check(fuzzRules)
		if err != nil {
			t.Fatalf("canonical %s does not check: %v", canon, err)
		}
		if a2.Type != a.Type || a2.Cost != 1 || a2.Delay != 0 || !a2.RunAt.IsZero() || a2.IdemKey != "" {
			t.Fatalf("canonical %s has attrs %+v; want type %q and no cost, schedule or key", canon, a2, a.Type)
		}
		if again := s2.Canonical(); !bytes.Equal(again, canon) {
			t.Fatalf("canonical JSON is not a fixed point:\n%s\n%s", canon, again)
		}
	})
}

// checkAcceptedBounds asserts every documented bound of an accepted job.
func checkAcceptedBounds(t *testing.T, s Spec, a Attrs) {
	t.Helper()
	if err := a.Check(fuzzRules.MaxCost); err != nil {
		t.Fatalf("Spec.Check accepted attrs %+v that Attrs.Check refuses: %v", a, err)
	}
	if a.Cost < 1 || a.Cost > fuzzRules.MaxCost || a.Delay < 0 || a.Delay > MaxDelay ||
		(!a.RunAt.IsZero() && (a.RunAt.UnixMicro() <= 0 || a.RunAt.UnixMicro() > MaxRunAtUS)) ||
		(a.Delay != 0 && !a.RunAt.IsZero()) {
		t.Fatalf("accepted attrs out of bounds: %+v", a)
	}
	if s.MaxAttempts != nil && (*s.MaxAttempts < 1 || *s.MaxAttempts > MaxAttemptsLimit) {
		t.Fatalf("accepted max_attempts %d", *s.MaxAttempts)
	}
	if CheckIdemKey(a.IdemKey) != nil {
		t.Fatalf("accepted idempotency key %q", a.IdemKey)
	}
	switch s.Type {
	case wire.TypeWebhook, wire.TypeHTTP:
		checkSendable(t, s)
		if s.Type == wire.TypeWebhook && (s.Event == "" || len(s.Event) > MaxEventLen) {
			t.Fatalf("accepted event of %d bytes", len(s.Event))
		}
	case wire.TypeTask:
		if s.TaskType == "" || len(s.TaskType) > MaxTaskTypeLen || !slices.Contains(fuzzRules.TaskQueues, s.Queue) {
			t.Fatalf("accepted task %q on queue %q", s.TaskType, s.Queue)
		}
	default:
		t.Fatalf("accepted type %q", s.Type)
	}
}

// checkSendable asserts that Go's client can build the request of an
// accepted webhook or http job.
func checkSendable(t *testing.T, s Spec) {
	t.Helper()
	if err := CheckURL(s.URL); err != nil {
		t.Fatalf("accepted url %q that CheckURL refuses: %v", s.URL, err)
	}
	if len(s.Headers) > MaxHeaders {
		t.Fatalf("accepted %d headers", len(s.Headers))
	}
	for name, value := range s.Headers {
		if err := CheckHeader(name, value); err != nil {
			t.Fatalf("accepted header %q: %q that CheckHeader refuses: %v", name, value, err)
		}
		checkHeaderSendable(t, name, value)
	}
}

// FuzzCheckUTF8 asserts that CheckUTF8 refuses exactly the texts that are
// not valid UTF-8, and that its Offset is the first invalid byte.
func FuzzCheckUTF8(f *testing.F) {
	for _, s := range []string{
		`{"type":"webhook"}`, "{\"event\":\"\xff\"}", "{\"payload\":{\"a\":[1,\"\xc3\"]}}",
		"{\"\xed\xa0\x80\":1}", "\xf4\x90\x80\x80", "[\"ok\",\"\xe2\x82\"]", "{\"a\":\"é\",\"b\":\"\xc0\xaf\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := CheckUTF8(data)
		if utf8.Valid(data) {
			if err != nil {
				t.Fatalf("CheckUTF8 refused valid UTF-8: %v", err)
			}
			return
		}
		var ue *UTF8Error
		if !errors.As(err, &ue) {
			t.Fatalf("CheckUTF8 of invalid UTF-8 = %v, want a *UTF8Error", err)
		}
		if ue.Offset < 0 || ue.Offset >= len(data) || !utf8.Valid(data[:ue.Offset]) {
			t.Fatalf("offset %d is not the first invalid byte of %q", ue.Offset, data)
		}
		if r, n := utf8.DecodeRune(data[ue.Offset:]); r != utf8.RuneError || n != 1 {
			t.Fatalf("byte %d of %q starts a valid rune", ue.Offset, data)
		}
		if !utf8.ValidString(ue.Error()) {
			t.Fatalf("error message is not valid UTF-8: %q", ue.Error())
		}
	})
}

// FuzzCheckURL asserts that a URL CheckURL accepts is an absolute http(s)
// URL with a host and no credentials, that Go's client can build a request
// for, and whose request line holds only visible ASCII.
func FuzzCheckURL(f *testing.F) {
	for _, s := range []string{
		"https://example.com/hook", "http://10.0.0.1:8080/a%20b?q=1#frag", "https://[::1]:443/", "https://例え.jp/パス",
		"https://example.com/?q=é", "https://u:p@example.com", "https://example.com/a b", "https://example.com/\x7f",
		"ftp://example.com", "//example.com", "https://:80", "https://%zz", "http://[fe80::1%25eth0]/", "https://a/%2e%2e/",
		"HTTPS://EXAMPLE.COM", "https://example.com:99999/", "http://@/", "http://a@b@c/",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if CheckURL(raw) != nil {
			return
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil {
			t.Fatalf("accepted %q: parse %v, scheme %q, host %q, user %v", raw, err, u.Scheme, u.Hostname(), u.User)
		}
		req, err := http.NewRequest(http.MethodPost, raw, nil)
		if err != nil {
			t.Fatalf("accepted %q, but http.NewRequest: %v", raw, err)
		}
		line := req.URL.RequestURI()
		for i := 0; i < len(line); i++ {
			if c := line[i]; c <= ' ' || c >= 0x7f {
				t.Fatalf("accepted %q, whose request line %q holds byte 0x%02x", raw, line, c)
			}
		}
	})
}

// FuzzCheckHeader asserts that a header CheckHeader accepts is an RFC 9110
// field Go's client sends as it is (one line, not hop-by-hop, at most
// 8 KiB), and that every refusal has a message.
func FuzzCheckHeader(f *testing.F) {
	for _, s := range [][2]string{
		{"X-Account", "7"}, {"Authorization", "Bearer x"}, {"connection", "close"}, {"PROXY-Authorization", "x"},
		{"X-A", "a\r\nX-Injected: 1"}, {"X-A", "\x00"}, {"X-A", "\x01"}, {"X-A", "\x7f"}, {"X-A", "tab\tok"},
		{"X A", "v"}, {"", "v"}, {"X-é", "v"}, {"X-A", "é"}, {"X-A", " padded "},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, name, value string) {
		err := CheckHeader(name, value)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("refusal without a message")
			}
			return
		}
		if HopByHop(name) || len(value) > maxHeaderValueLen {
			t.Fatalf("accepted hop-by-hop or oversized header %q (%d bytes)", name, len(value))
		}
		checkHeaderSendable(t, name, value)
	})
}

// checkHeaderSendable asserts that Go's client would send the header as it
// is: the name a token, the value RFC 9110 field-value bytes (no control
// character but HTAB), which http.Transport requires of every header
// (otherwise: "net/http: invalid header field value").
func checkHeaderSendable(t *testing.T, name, value string) {
	t.Helper()
	if !validHeaderName(name) {
		t.Fatalf("accepted header name %q", name)
	}
	for i := 0; i < len(value); i++ {
		if c := value[i]; (c < ' ' && c != '\t') || c == 0x7f {
			t.Fatalf("accepted header %q whose value holds control byte 0x%02x at %d, which Go's client refuses to send", name, c, i)
		}
	}
}

// TestCheckHeaderRefusesControlCharacters is FuzzCheckHeader's crasher: a
// value with a control character other than CR, LF or NUL (0x01, DEL) was
// accepted at enqueue, then Go's client refused to send it ("invalid header
// field value") and every attempt failed as a connection error.
func TestCheckHeaderRefusesControlCharacters(t *testing.T) {
	for _, v := range []string{"\x01", "a\x1fb", "\x7f", "\r", "\n", "\x00"} {
		if err := CheckHeader("X-A", v); err == nil {
			t.Errorf("CheckHeader(X-A, %q) = nil, want a refusal", v)
		}
	}
	for _, v := range []string{"", "a\tb", " padded ", "é", "\x80\xff"} {
		if err := CheckHeader("X-A", v); err != nil {
			t.Errorf("CheckHeader(X-A, %q) = %v, want nil", v, err)
		}
	}
	s := Spec{Type: wire.TypeHTTP, Method: "GET", URL: "https://example.com", Headers: map[string]string{"X-A": "\x01"}}
	var fe *FieldError
	if err := s.Validate(fuzzRules); !errors.As(err, &fe) || fe.Field != "headers" {
		t.Fatalf("Validate = %v, want a headers FieldError", err)
	}
}
