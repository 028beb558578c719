package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/store"
)

// FuzzReadBatch feeds POST …/jobs:batch bodies to readBatch, the decoder of
// {"jobs":[…]}, and asserts: a refusal is an *Error in Sluice's JSON error
// shape with a 400, 413 or 422 status and a matching code, and a short
// message; an accepted body has 1 to store.MaxBatch items, each one valid
// JSON, which re-encode to a body that reads back to the same items; and
// each item goes through the per-item parse (CheckUTF8, job.Parse) without
// harm.
func FuzzReadBatch(f *testing.F) {
	for _, s := range []string{
		`{"jobs":[{"type":"webhook","event":"e","url":"https://example.com","payload":{"a":1}},{"type":"task","task_type":"t"}]}`,
		`{"jobs":[]}`, `{"jobs":null}`, `{}`, `{"jobs":[1,"x",null,[],{}]}`, `{"jobs":{}}`, `{"jobs":[{}],"extra":1}`,
		`{"jobs":[{}]} {}`, `{"jobs":[{}]}x`, `[]`, `null`, `"jobs"`, `{"JOBS":[{}]}`, `{"jobs":[{}],"jobs":[{},{}]}`,
		"{\"jobs\":[{\"event\":\"\xff\"}]}", `{"jobs":[{"a":"\ud800"}]}`, ` {"jobs" : [ { } ] } `, `{"jobs":[1e999]}`,
	} {
		f.Add([]byte(s))
	}
	s := &Server{opts: Options{MaxBatchBytes: 1 << 20, FileSigned: fileSigned}}
	f.Fuzz(func(t *testing.T, body []byte) {
		jobs, err := readBatchBody(s, body)
		if err != nil {
			checkRefusal(t, body, err)
			return
		}
		if n := len(jobs); n < 1 || n > store.MaxBatch {
			t.Fatalf("accepted a batch of %d items", n)
		}
		for i, raw := range jobs {
			if !json.Valid(raw) {
				t.Fatalf("item %d %q is not valid JSON", i, raw)
			}
			if job.CheckUTF8(raw) == nil {
				_, _ = job.Parse(raw) // the item's own 422 is FuzzParse's concern
			}
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false) // compare items byte for byte, & as &
		if err := enc.Encode(batchRequest{Jobs: jobs}); err != nil {
			t.Fatalf("re-encode %d items: %v", len(jobs), err)
		}
		again := buf.Bytes()
		back, err := readBatchBody(s, again)
		if err != nil {
			t.Fatalf("re-encoded batch %s refused: %v", again, err)
		}
		if !slices.EqualFunc(back, jobs, func(a, b json.RawMessage) bool { return bytes.Equal(compact(t, a), compact(t, b)) }) {
			t.Fatalf("re-encoded batch reads back different items:\n%s\n%s", body, again)
		}
	})
}

// readBatchBody is readBatch on a POST of body as application/json.
func readBatchBody(s *Server, body []byte) ([]json.RawMessage, error) {
	r := httptest.NewRequest(http.MethodPost, "/v1/tenants/acme/jobs:batch", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	return s.readBatch(httptest.NewRecorder(), r)
}

// checkRefusal asserts that err is a client error in the API's shape.
func checkRefusal(t *testing.T, body []byte, err error) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("readBatch(%q) = %v, not an *Error", body, err)
	}
	want := map[int]string{http.StatusBadRequest: CodeMalformed, http.StatusRequestEntityTooLarge: CodeTooLarge,
		http.StatusUnprocessableEntity: CodeInvalid}
	if code, ok := want[e.Status]; !ok || e.Code != code {
		t.Fatalf("readBatch(%q) = %d %s, want 400 malformed, 413 too_large or 422 invalid", body, e.Status, e.Code)
	}
	if e.Message == "" || len(e.Message) > 512 || !utf8.ValidString(e.Message) {
		t.Fatalf("readBatch(%q) message %q: empty, over 512 bytes or not UTF-8", body, e.Message)
	}
}

// compact is raw without insignificant whitespace.
func compact(t *testing.T, raw json.RawMessage) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("compact %q: %v", raw, err)
	}
	return b.Bytes()
}

// TestInvalidJSONMessageIsBounded is FuzzReadBatch's finding: a 422 for an
// unknown field echoed the field's name whole, so a batch body of one
// 16 MiB key got a 16 MiB error message back (and in every log of it). The
// message is now cut to 256 bytes (maxInvalidJSONMessage) at a rune
// boundary.
func TestInvalidJSONMessageIsBounded(t *testing.T) {
	s := &Server{opts: Options{MaxBatchBytes: 1 << 20, FileSigned: fileSigned}}
	for _, key := range []string{strings.Repeat("B", 100_000), strings.Repeat("é", 50_000)} {
		_, err := readBatchBody(s, []byte(`{"`+key+`":[{}]}`))
		var e *Error
		if !errors.As(err, &e) || e.Status != http.StatusUnprocessableEntity {
			t.Fatalf("readBatch with a long unknown field = %v, want a 422", err)
		}
		if len(e.Message) > 256 || !utf8.ValidString(e.Message) ||
			!strings.HasPrefix(e.Message, `unknown field "`) || !strings.HasSuffix(e.Message, "…") {
			t.Fatalf("message of %d bytes: %.80q…", len(e.Message), e.Message)
		}
	}
	short := invalidJSON(errors.New(`json: unknown field "x"`)).(*Error)
	if short.Message != `unknown field "x"` {
		t.Fatalf("a short message was changed: %q", short.Message)
	}
}
