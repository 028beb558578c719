package store

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/wire"
)

// Results and response excerpts (finish.lua, record field result and the
// attempt log's body / body_base64).
//
// A response body is shown as text when it is valid UTF-8 ("body") and
// base64 otherwise ("body_base64"): bodyField chooses.

// JobResult is an http job's kept outcome: the last attempt's response as
// GET /v1/jobs/{id} shows it (record field result, JSON of this shape).
type JobResult struct {
	Status int `json:"status"`
	// Headers are the allowed response headers by canonical name, several
	// values joined with ", ".
	Headers    map[string]string `json:"headers"`
	Body       *string           `json:"body,omitempty"`
	BodyBase64 *string           `json:"body_base64,omitempty"`
	Truncated  bool              `json:"truncated"`
	// TruncatedReason says why Truncated is set: TruncatedMaxBytes (the
	// body was longer than max_result_bytes) or why its read was cut
	// before its end (wire.AttemptResult.Cut: "timeout",
	// "connection_error", "canceled"); "" when not truncated.
	TruncatedReason string `json:"truncated_reason,omitempty"`
}

// TruncatedMaxBytes is JobResult.TruncatedReason of a body longer than the
// policy's max_result_bytes.
const TruncatedMaxBytes = "max_result_bytes"

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

// resultOf is r in its stored form (nil: none).
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

// resultArg is finish.lua's result argument: the stored JSON, "" for none.
func resultArg(r *wire.AttemptResult) string {
	res := resultOf(r)
	if res == nil {
		return ""
	}
	b, _ := json.Marshal(res) // cannot fail: strings, ints and a bool
	return string(b)
}

// excerptArgs are finish.lua's excerpt arguments: the log entry's field
// ("", "body" or "body_base64") and its text, from at most
// wire.MaxExcerptBytes of b.
func excerptArgs(b []byte) (field, text string) {
	return bodyField(b[:min(len(b), wire.MaxExcerptBytes)])
}

// parseResult reads record field result ("" = none).
func parseResult(s string) (*JobResult, error) {
	if s == "" {
		return nil, nil
	}
	var r JobResult
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return nil, err
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
