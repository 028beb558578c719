package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"
)

// The sentinels an *Error matches with errors.Is, by the API's answer.
var (
	// ErrRateLimited: 429 rate_limited — the tenant's admission bucket or
	// the API key's own limit refused the request; nothing was stored.
	// Error.RetryAfter says when to try again.
	ErrRateLimited = errors.New("sluice: rate limited")
	// ErrBacklogFull: 429 backlog_full — the tenant's backlog is at its
	// max_backlog (or max_backlog_bytes); nothing was stored.
	ErrBacklogFull = errors.New("sluice: backlog full")
	// ErrStorageFull: 507 storage_full — Redis is out of memory; nothing
	// was stored.
	ErrStorageFull = errors.New("sluice: storage full")
	// ErrUnavailable: 503 (unavailable, replication_timeout,
	// secrets_disabled), a gateway's 502 or 504, or no answer at all. Error.OutcomeUnknown says
	// whether the write may have been applied.
	ErrUnavailable = errors.New("sluice: unavailable")
	// ErrInvalid: the request was refused as it stands (400 malformed, 413
	// too_large, 415, 422 invalid and the other 422 codes such as
	// no_task_worker, unknown_upstream or idempotency_mismatch).
	// Error.Problems lists every field problem the API named.
	ErrInvalid = errors.New("sluice: invalid request")
	// ErrUnauthorized: 401 — no API key, or one the throttler does not know.
	ErrUnauthorized = errors.New("sluice: unauthorized")
	// ErrForbidden: 403 — the key may not act on this tenant or limit, or
	// is not an admin key.
	ErrForbidden = errors.New("sluice: forbidden")
	// ErrNotFound: 404 — no such job, tenant secret, upstream or limit.
	ErrNotFound = errors.New("sluice: not found")
	// ErrConflict: 409 — the state does not allow it (cancel a running
	// job, replay a job that is not dead, delete an upstream in use, a
	// tenant policy version that is not the current one).
	ErrConflict = errors.New("sluice: conflict")
	// ErrPreconditionFailed: 412 — the If-Match version of an upstream is
	// not its current one.
	ErrPreconditionFailed = errors.New("sluice: precondition failed")
)

// The API's error codes (Error.Code), as its OpenAPI document lists them.
const (
	CodeMalformed                = "malformed"
	CodeUnauthorized             = "unauthorized"
	CodeForbidden                = "forbidden"
	CodeNotFound                 = "not_found"
	CodeMethodNotAllowed         = "method_not_allowed"
	CodeConflict                 = "conflict"
	CodeUpstreamInUse            = "upstream_in_use"
	CodePreconditionFailed       = "precondition_failed"
	CodeTooLarge                 = "too_large"
	CodeUnsupportedMediaType     = "unsupported_media_type"
	CodeInvalid                  = "invalid"
	CodeIdempotencyMismatch      = "idempotency_mismatch"
	CodeNoTaskWorker             = "no_task_worker"
	CodeNoWebhookSecret          = "no_webhook_secret"
	CodeUnknownUpstream          = "unknown_upstream"
	CodeCostExceedsUpstreamBurst = "cost_exceeds_upstream_burst"
	CodeRateLimited              = "rate_limited"
	CodeBacklogFull              = "backlog_full"
	CodeUnavailable              = "unavailable"
	CodeReplicationTimeout       = "replication_timeout"
	CodeSecretsDisabled          = "secrets_disabled"
	CodeStorageFull              = "storage_full"
	CodeInternal                 = "internal"
)

// messageOutcomeUnknown starts the message of a 503 answered to a write
// that may have been applied.
const messageOutcomeUnknown = "outcome unknown"

// Error is a refusal by the API, or a request that got no answer (Status
// 0). It matches the sentinel of its status and code with errors.Is.
type Error struct {
	// Method and Path are the request's ("POST", "/v1/tenants/acme/jobs").
	Method, Path string
	// Status is the HTTP status; 0 when no answer arrived.
	Status int
	// Code is the API's error code (the Code constants); CodeUnavailable
	// when no answer arrived.
	Code    string
	Message string
	// RetryAfter is the answer's Retry-After (0 when it had none).
	RetryAfter time.Duration
	// OutcomeUnknown is set when the write may have been applied: a 503
	// whose message starts "outcome unknown", a 503 replication_timeout
	// (stored on the primary, not confirmed by enough replicas) or a
	// request sent whose answer was lost. Retry an enqueue with the same
	// IdempotencyKey: it stores the job at most once.
	OutcomeUnknown bool
	// IdempotencyKey is the key an enqueue was sent with, to retry it
	// under (set by Enqueue).
	IdempotencyKey string
	// JobID names the job the error is about, when the API says (a 503
	// replication_timeout's possibly stored job).
	JobID string
	// Problems lists every field problem of a validation error, as the
	// API's message names them ("url: …; cost: …"); empty otherwise.
	Problems []Problem
	// Body is the API's JSON answer ({"error": {"code", "message"}}, or a
	// refused batch's results); nil when no answer arrived.
	Body []byte

	cause error // the transport's error, when no answer arrived
	dial  bool  // no connection could be made: nothing was sent
}

// Problem is one field problem of a validation error.
type Problem struct {
	// Field is the field's JSON name or path ("url", "callback.url",
	// "retry.max_attempts"); "" when the problem names none.
	Field   string
	Message string
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sluice: %s %s: ", e.Method, e.Path)
	if e.Status == 0 {
		fmt.Fprintf(&b, "%s", e.Message)
		if e.cause != nil {
			fmt.Fprintf(&b, ": %v", e.cause)
		}
	} else {
		fmt.Fprintf(&b, "%d %s: %s", e.Status, e.Code, e.Message)
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %s)", e.RetryAfter)
	}
	return b.String()
}

// Unwrap returns the transport's error of a request that got no answer.
func (e *Error) Unwrap() error { return e.cause }

// Is matches the sentinel of e's status and code.
func (e *Error) Is(target error) bool { return target != nil && e.sentinel() == target }

func (e *Error) sentinel() error {
	switch e.Code {
	case CodeRateLimited:
		return ErrRateLimited
	case CodeBacklogFull:
		return ErrBacklogFull
	case CodeStorageFull:
		return ErrStorageFull
	case CodePreconditionFailed:
		return ErrPreconditionFailed
	}
	switch e.Status {
	case 0, http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		return ErrUnavailable
	case http.StatusInsufficientStorage:
		return ErrStorageFull
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity:
		return ErrInvalid
	case http.StatusUnauthorized:
		return ErrUnauthorized
	case http.StatusForbidden:
		return ErrForbidden
	case http.StatusNotFound:
		return ErrNotFound
	case http.StatusConflict:
		return ErrConflict
	case http.StatusPreconditionFailed:
		return ErrPreconditionFailed
	case http.StatusTooManyRequests:
		return ErrRateLimited
	}
	return nil
}

// gatewayFailure reports whether status is a gateway's failure to reach
// the throttler (502, 504): the request may or may not have reached it.
func gatewayFailure(status int) bool {
	return status == http.StatusBadGateway || status == http.StatusGatewayTimeout
}

// errorBody is the API's error object.
type errorBody struct {
	Error *ErrorDetail `json:"error"`
}

// ErrorDetail is the API's {"code", "message"[, "job_id"]} error object, as
// a refused batch item or a limit's denial carries it.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	JobID   string `json:"job_id,omitempty"`
	// Problems lists every problem of a configuration file a reload
	// refused (POST /v1/admin/reload).
	Problems []string `json:"problems,omitempty"`
}

// errorOf is the *Error of an answer that is not a success.
func errorOf(method, path string, resp *response) *Error {
	e := &Error{Method: method, Path: path, Status: resp.status, RetryAfter: retryAfter(resp.header), Body: resp.body}
	var b errorBody
	if json.Unmarshal(resp.body, &b) == nil && b.Error != nil {
		e.Code, e.Message, e.JobID = b.Error.Code, b.Error.Message, b.Error.JobID
	} else { // not the API's answer: a proxy's or load balancer's
		e.Code, e.Message = CodeInternal, strings.TrimSpace(http.StatusText(resp.status)+" "+clip(string(resp.body), 200))
		if gatewayFailure(resp.status) {
			e.Code, e.OutcomeUnknown = CodeUnavailable, method != http.MethodGet
		}
	}
	e.fill()
	if b.Error != nil && len(b.Error.Problems) > 0 { // a refused reload: every problem of the file
		e.Problems = e.Problems[:0]
		for _, p := range b.Error.Problems {
			e.Problems = append(e.Problems, problemsOf(p)...)
		}
	}
	return e
}

// fill derives OutcomeUnknown and Problems from the code and message.
func (e *Error) fill() {
	e.OutcomeUnknown = e.OutcomeUnknown || e.Code == CodeReplicationTimeout ||
		(e.Status == http.StatusServiceUnavailable && strings.HasPrefix(e.Message, messageOutcomeUnknown))
	if e.Code == CodeInvalid || e.Code == CodeMalformed {
		e.Problems = problemsOf(e.Message)
	}
}

// fieldName matches a field's name or path as the API's messages start it.
var fieldName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.\[\]-]*$`)

// problemsOf splits a validation message — "invalid job: url: …; cost: …",
// "cost: must be …" — into its field problems.
func problemsOf(msg string) []Problem {
	for _, p := range []string{"invalid job: ", "invalid policy: ", "invalid upstream: "} {
		if rest, ok := strings.CutPrefix(msg, p); ok {
			msg = rest
			break
		}
	}
	var out []Problem
	for part := range strings.SplitSeq(msg, "; ") {
		field, text, ok := strings.Cut(part, ": ")
		if !ok || !fieldName.MatchString(field) {
			field, text = "", part
		}
		out = append(out, Problem{Field: field, Message: text})
	}
	return out
}

// itemError is the *Error of a refused batch item.
func itemError(method, path string, status int, d *ErrorDetail, retry time.Duration) *Error {
	e := &Error{Method: method, Path: path, Status: status, Code: d.Code, Message: d.Message, JobID: d.JobID, RetryAfter: retry}
	e.fill()
	return e
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
