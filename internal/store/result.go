package store

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/wire"
)

// Results and response excerpts (finish.lua; record fields result, rb1 …
// rbN and rbn, and the attempt log's body / body_base64).
//
// A response body is shown as text when it is valid UTF-8 ("body") and
// base64 otherwise ("body_base64"): bodyField chooses. It is stored
// binary-safe, never JSON-escaped (a NUL or a '<' escaped is 6 bytes):
//
//   - a result's body as raw bytes in record fields rb1 … rbN of at most
//     resultChunk bytes each (rbn = N; none when the body is empty), so
//     each is one allocation of exactly 64 KiB and Redis holds the body
//     at about its size; field result holds the rest (JobResult without
//     body and body_base64, as JSON). Records written before kept the
//     body inside field result; parseResult reads both.
//   - an excerpt in the attempt log (a JSON line) as text only when
//     escaping it costs no more than base64 would, else as body_base64;
//     parseLog shows a stored base64 that decodes to UTF-8 as text.
//
// finish.lua keeps a result's body only while Redis has room for it below
// its mark (Config.MemoryHighWater of maxmemory): past it the body is cut
// to what fits, or dropped, and the result says so (TruncatedStorageFull).

// JobResult is an http job's kept outcome: the last attempt's response as
// GET /v1/jobs/{id} shows it.
type JobResult struct {
	Status int `json:"status"`
	// Headers are the allowed response headers by canonical name, several
	// values joined with ", ".
	Headers    map[string]string `json:"headers"`
	Body       *string           `json:"body,omitempty"`
	BodyBase64 *string           `json:"body_base64,omitempty"`
	Truncated  bool              `json:"truncated"`
	// TruncatedReason says why Truncated is set: TruncatedMaxBytes (the
	// body was longer than max_result_bytes), TruncatedStorageFull (Redis
	// had no room for all of it) or why its read was cut before its end
	// (wire.AttemptResult.Cut: "timeout", "connection_error",
	// "canceled"); "" when not truncated.
	TruncatedReason string `json:"truncated_reason,omitempty"`
}

// Reasons of JobResult.TruncatedReason besides wire.AttemptResult.Cut's.
const (
	// TruncatedMaxBytes: the body was longer than the policy's
	// max_result_bytes.
	TruncatedMaxBytes = "max_result_bytes"
	// TruncatedStorageFull: Redis was at its mark (Config.MemoryHighWater
	// of maxmemory) when the result was written; the body was cut to the
	// room left, or dropped. The job's outcome is recorded all the same.
	TruncatedStorageFull = "storage_full"
)

// resultChunk is the most bytes of a result's body one record field holds:
// a field's value of n < 65 536 bytes is one allocation of n + 6 bytes
// (sds header and NUL), so 65 530 fills a 64 KiB allocation exactly and
// only the last chunk pays the allocator's rounding (finish.lua CHUNK).
const resultChunk = 65530

// bodyField is how b is shown: ("body", b) when b is valid UTF-8, else
// ("body_base64", base64 of b); ("", "") for an empty b.
func bodyField(b []byte) (field, text string) {
	switch {
	case len(b) == 0:
		return "", ""
	case utf8.Valid(b):
		return "body", string(b)
	}
	return "body_base64", base64.StdEncoding.EncodeToString(b)
}

// resultOf is r as shown, its body included (nil: none).
func resultOf(r *wire.AttemptResult) *JobResult {
	if r == nil {
		return nil
	}
	out := &JobResult{Status: r.Status, Headers: make(map[string]string, len(r.Header)), Truncated: r.Truncated || r.Cut != ""}
	switch {
	case r.Cut != "":
		out.TruncatedReason = r.Cut
	case r.Truncated:
		out.TruncatedReason = TruncatedMaxBytes
	}
	for name, vals := range r.Header {
		out.Headers[http.CanonicalHeaderKey(name)] = strings.Join(vals, ", ")
	}
	switch field, text := bodyField(r.Body); field {
	case "body":
		out.Body = &text
	case "body_base64":
		out.BodyBase64 = &text
	}
	return out
}

// resultArgs are finish.lua's result arguments: field result as stored
// (JobResult without its body, JSON; "" for no result), the same when
// Redis has no room for the whole body (truncated, TruncatedStorageFull),
// and the body's raw bytes.
func resultArgs(r *wire.AttemptResult) (meta, full, body string) {
	res := resultOf(r)
	if res == nil {
		return "", "", ""
	}
	res.Body, res.BodyBase64 = nil, nil
	meta = resultJSON(res)
	res.Truncated, res.TruncatedReason = true, TruncatedStorageFull
	return meta, resultJSON(res), string(r.Body)
}

// resultJSON is res as JSON, '<', '>' and '&' unescaped.
func resultJSON(res *JobResult) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(res) // cannot fail: strings, ints and a bool
	return strings.TrimSuffix(b.String(), "\n")
}

// excerptArgs are finish.lua's excerpt arguments: the log entry's field
// ("", "body" or "body_base64") and its text, from at most
// wire.MaxExcerptBytes of b. UTF-8 is stored as text unless escaping it
// (escapedLen) would cost more than base64.
func excerptArgs(b []byte) (field, text string) {
	b = b[:min(len(b), wire.MaxExcerptBytes)]
	if field, text = bodyField(b); field == "body" && escapedLen(b) > base64.StdEncoding.EncodedLen(len(b)) {
		return "body_base64", base64.StdEncoding.EncodeToString(b)
	}
	return field, text
}

// escapedLen is the length of b inside a JSON string as the scripts'
// cjson.encode writes it: '"', '\\', '/', \b, \t, \n, \f and \r take 2
// bytes, the other control characters and DEL 6 (\u00XX).
func escapedLen(b []byte) int {
	n := len(b)
	for _, c := range b {
		switch {
		case c == '"' || c == '\\' || c == '/' || c == '\b' || c == '\t' || c == '\n' || c == '\f' || c == '\r':
			n++
		case c < 0x20 || c == 0x7f:
			n += 5
		}
	}
	return n
}

// logBody is an attempt log entry's excerpt as shown: a stored base64 that
// decodes to UTF-8 is text (excerptArgs stores text that escapes badly as
// base64).
func logBody(text, b64 string) (body, base string) {
	if b64 == "" {
		return text, ""
	}
	if raw, err := base64.StdEncoding.DecodeString(b64); err == nil && utf8.Valid(raw) {
		return string(raw), ""
	}
	return text, b64
}

// parseResult reads record field result ("" = none) and the body in fields
// rb1 … rbN (rbn = N) of m.
func parseResult(m map[string]string) (*JobResult, error) {
	s := m["result"]
	if s == "" {
		return nil, nil
	}
	var r JobResult
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return nil, err
	}
	if m["rbn"] == "" || r.Body != nil || r.BodyBase64 != nil { // no body, or kept inside (written before)
		return &r, nil
	}
	n, err := strconv.Atoi(m["rbn"])
	if err != nil || n < 1 {
		return nil, fmt.Errorf("field rbn %q: want a count of chunks", m["rbn"])
	}
	var body strings.Builder
	for i := 1; i <= n; i++ {
		chunk, ok := m["rb"+strconv.Itoa(i)]
		if !ok {
			return nil, fmt.Errorf("field rb%d of %d missing", i, n)
		}
		body.WriteString(chunk)
	}
	switch field, text := bodyField([]byte(body.String())); field {
	case "body":
		r.Body = &text
	case "body_base64":
		r.BodyBase64 = &text
	}
	return &r, nil
}

// checkResult bounds what an outcome carries to the store.
func checkResult(o wire.AttemptOutcome) error {
	if r := o.Result; r != nil && (r.Status < 100 || r.Status > 999 || len(r.Body) > maxResultBody) {
		return invalidf("result: status %d, body %d bytes: want 100 … 999 and at most %d bytes", r.Status, len(r.Body), maxResultBody)
	}
	return nil
}

// maxResultBody bounds a result's body: policy.MaxResultBytesLimit.
const maxResultBody = int(policy.MaxResultBytesLimit)
