package api

import (
	"cmp"
	"context"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/store"
)

// Error codes of docs/design.md §4.3. Each maps to one HTTP status.
const (
	CodeMalformed         = "malformed"
	CodeUnauthorized      = "unauthorized"
	CodeForbidden         = "forbidden"
	CodeNotFound          = "not_found"
	CodeMethodNotAllowed  = "method_not_allowed" // 405: routes serve the path with other methods, listed in Allow
	CodeConflict          = "conflict"
	CodeTooLarge          = "too_large"
	CodeUnsupportedMedia  = "unsupported_media_type"
	CodeInvalid           = "invalid"
	CodeIdempotencyMismat = "idempotency_mismatch"
	CodeNoTaskWorker      = "no_task_worker"    // 422: a task job for a queue no sluicetask middleware serves
	CodeNoWebhookSecret   = "no_webhook_secret" // 422: a webhook job of a tenant with no signing secret (and not unsigned)
	CodeSecretsDisabled   = "secrets_disabled"  // 503: no secrets.key: the secrets routes are off
	CodeRateLimited       = "rate_limited"
	CodeBacklogFull       = "backlog_full"
	CodeUnavailable       = "unavailable"
	// CodeReplicationTimeout (503): a write stored on the Redis primary that
	// fewer replicas than redis.wait_replicas confirmed within
	// redis.wait_timeout — possibly stored (a failover before the replicas
	// catch up would lose it). A retry with the same idempotency key answers
	// 202 once the replicas confirm it, without a second job.
	CodeReplicationTimeout = "replication_timeout"
	CodeStorageFull        = "storage_full" // 507: Redis is out of memory (maxmemory, noeviction)
	// CodePreconditionFailed (412): an If-Match version that is not the
	// upstream's current one (PUT /v1/upstreams/{name}).
	CodePreconditionFailed = "precondition_failed"
	// CodeUnknownUpstream (422): a job names (or its tenant policy's
	// default names) an upstream that is not registered.
	CodeUnknownUpstream = "unknown_upstream"
	// CodeCostExceedsUpstreamBurst (422): a job's cost exceeds the burst of
	// an upstream it names (the message names the upstream and both
	// numbers).
	CodeCostExceedsUpstreamBurst = "cost_exceeds_upstream_burst"
	// CodeUpstreamInUse (409): DELETE /v1/upstreams/{name} while jobs wait
	// on or run under the upstream.
	CodeUpstreamInUse = "upstream_in_use"
)

// StorageFullRetryAfter is the Retry-After, in seconds, of a 507
// storage_full: memory comes back as the dispatcher drains backlogs and
// finished jobs expire, which takes seconds rather than the one second of
// a 503.
const StorageFullRetryAfter = 5

// MessageOutcomeUnknown starts the message of a 503 unavailable answered to
// a write whose command may have reached Redis before the deadline (or the
// connection) was lost: it may have been applied. An enqueue retried with
// the same Idempotency-Key (or idempotency_key) is then stored at most once.
const MessageOutcomeUnknown = "outcome unknown"

// writeOps are the Store operations (storeError's op) that change state.
var writeOps = map[string]bool{
	"enqueue": true, "cancel": true, "put_policy": true, "pause": true, "resume": true, "replay": true,
	"put_upstream": true, "pause_upstream": true, "resume_upstream": true, "close_circuit": true,
}

// Error is an API error: the status, a stable code and a message for people.
// Handlers return it; writeError renders it as {"error": {"code", "message"}}.
type Error struct {
	Status  int
	Code    string
	Message string
	// RetryAfter, when > 0, is sent as the Retry-After header (seconds).
	RetryAfter int64
	// JobID, when set, names the job the error is about (job_id): a 503
	// replication_timeout's possibly stored job.
	JobID string
	// Problems, when set, lists the problems behind the error (problems).
	Problems []string
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

func errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// redisFailure maps a Store call of op that failed in Redis (counted under
// op and logged): Redis out of memory is 507 storage_full (Redis refuses a
// function before it runs: nothing was written); a write whose command may
// have reached Redis — a timeout or a lost connection after sending — is
// 503 unavailable with MessageOutcomeUnknown; anything else is 503
// unavailable. Every one carries Retry-After.
func (s *Server) redisFailure(r *http.Request, op string, err error) error {
	s.metrics.RedisErrors.WithLabelValues(op).Inc()
	if redis.IsOOMError(err) {
		s.metrics.StorageFull.Inc()
		s.opts.Logger.WarnContext(r.Context(), "Redis out of memory", "op", op, "err", err)
		return &Error{Status: http.StatusInsufficientStorage, Code: CodeStorageFull,
			Message: "storage full: Redis is out of memory; nothing was stored, retry later", RetryAfter: StorageFullRetryAfter}
	}
	s.opts.Logger.WarnContext(r.Context(), "store unavailable", "op", op, "err", err)
	if writeOps[op] && mayHaveRun(r.Context(), err) {
		what := "the change may have been applied; retry"
		if op == "enqueue" {
			what = "the job may have been stored; retry with the same " + HeaderIdempotencyKey + " (batch items: idempotency_key)"
		}
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, RetryAfter: 1,
			Message: MessageOutcomeUnknown + ": Redis did not answer in time and " + what}
	}
	return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "storage unavailable, retry later", RetryAfter: 1}
}

// mayHaveRun reports whether a command that failed with err may have
// reached Redis: not when Redis answered with an error, when no
// connection could be had (dial, pool timeout), when the request's Redis
// budget was spent before its first call, or when its budget ended while
// it waited for a shared enqueue call (store.ErrNotSent).
func mayHaveRun(ctx context.Context, err error) bool {
	var rerr redis.Error
	var nerr *net.OpError
	switch {
	case errors.As(err, &rerr), errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrClosed),
		errors.Is(err, store.ErrNotSent):
		return false
	case errors.As(err, &nerr) && nerr.Op == "dial":
		return false
	}
	return !spentBeforeUse(ctx)
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	JobID   string `json:"job_id,omitempty"`
	// Problems lists each problem of a refused configuration file
	// (POST /v1/admin/reload).
	Problems []string `json:"problems,omitempty"`
}

// writeError renders err. Anything that is not an *Error is a 500 whose cause
// is not shown to the client (the caller logs it).
func writeError(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = errorf(http.StatusInternalServerError, "internal", "internal error")
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(e.RetryAfter, 10))
	}
	writeJSON(w, e.Status, errorBody{Error: errorDetail{Code: e.Code, Message: e.Message, JobID: e.JobID, Problems: e.Problems}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decodeOptionalJSON is decodeJSON for a route whose body may be left out:
// an empty body (Content-Length 0) leaves v as it is.
func decodeOptionalJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	if r.ContentLength == 0 {
		return nil
	}
	return decodeJSON(w, r, limit, v)
}

// decodeJSON reads one JSON object from r's body into v: the Content-Type must
// be application/json (415, checkContentType), the body at most limit bytes,
// read without buffering more than that (413), no unknown fields and nothing
// after the object (400).
func decodeJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	if err := checkContentType(r); err != nil {
		return err
	}
	if r.ContentLength > limit {
		return errorf(http.StatusRequestEntityTooLarge, CodeTooLarge, "body is %d bytes, the limit is %d", r.ContentLength, limit)
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err, limit)
	}
	if dec.More() {
		return errorf(http.StatusBadRequest, CodeMalformed, "body holds more than one JSON value")
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); err == nil {
		return errorf(http.StatusBadRequest, CodeMalformed, "body holds more than one JSON value")
	}
	return nil
}

// readJSONBody returns r's raw body after the checks decodeJSON makes on
// the way in: Content-Type application/json (415), at most limit bytes, read
// without buffering more (413), one well-formed JSON value (400). The raw
// bytes are kept for fingerprints and for strict decoding by the caller.
func readJSONBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if err := checkContentType(r); err != nil {
		return nil, err
	}
	if r.ContentLength > limit {
		return nil, errorf(http.StatusRequestEntityTooLarge, CodeTooLarge, "body is %d bytes, the limit is %d", r.ContentLength, limit)
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, errorf(http.StatusRequestEntityTooLarge, CodeTooLarge, "body exceeds %d bytes", limit)
		}
		return nil, errorf(http.StatusBadRequest, CodeMalformed, "reading the body: %s", err.Error())
	}
	if !json.Valid(raw) { // a scan only: the callers' decoders then name the problem
		return nil, errorf(http.StatusBadRequest, CodeMalformed, "malformed JSON body: %s", syntaxError(raw))
	}
	return raw, nil
}

// checkContentType is the 415 for a request whose Content-Type is not
// application/json, or names a charset other than utf-8: JSON is UTF-8
// (RFC 8259 §8.1), and a body in another charset would be misread.
func checkContentType(r *http.Request) error {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return errorf(http.StatusUnsupportedMediaType, CodeUnsupportedMedia, "Content-Type must be application/json")
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return errorf(http.StatusUnsupportedMediaType, CodeUnsupportedMedia, "Content-Type: charset %q; JSON bodies are utf-8", cs)
	}
	return nil
}

func decodeError(err error, limit int64) error {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return errorf(http.StatusRequestEntityTooLarge, CodeTooLarge, "body exceeds %d bytes", limit)
	}
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return errorf(http.StatusUnprocessableEntity, CodeInvalid, "%s", clipMessage(typeMismatch(typeErr)))
	}
	return errorf(http.StatusBadRequest, CodeMalformed, "malformed JSON body: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// typeMismatch says in JSON's terms (never a Go type's name) which field
// of the body had the wrong JSON type: "jobs: want an array, got JSON
// object"; the body itself is "body".
func typeMismatch(e *json.UnmarshalTypeError) string {
	return fmt.Sprintf("%s: want %s, got JSON %s", cmp.Or(e.Field, "body"), jsonKind(e.Type), e.Value)
}

// jsonKind names the JSON value a Go type decodes from.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return "a string"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "another JSON value"
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// syntaxError describes why raw is not valid JSON (raw is known to be invalid).
func syntaxError(raw []byte) string {
	if err := json.Unmarshal(raw, new(json.RawMessage)); err != nil {
		return err.Error()
	}
	return "invalid JSON"
}
