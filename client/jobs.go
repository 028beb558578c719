package client

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"time"
	"unicode/utf8"
)

// Job is a job to enqueue: a Webhook, an HTTP request or a Task, or one of
// them with its own options (WithOptions).
type Job interface {
	// fields returns the job's JSON object and the options that go with
	// it (WithOptions's).
	fields() (map[string]any, []EnqueueOption)
}

// Webhook is a webhook job: Sluice POSTs the event, signed per Standard
// Webhooks with the tenant's secrets, to URL.
type Webhook struct {
	URL   string // absolute http(s) URL
	Event string // the event type, e.g. "invoice.paid"
	// Payload is the event's data, sent as "data" in the signed body; it is
	// encoded with encoding/json (a json.RawMessage goes as it is).
	Payload any
}

func (w Webhook) fields() (map[string]any, []EnqueueOption) {
	m := map[string]any{"type": "webhook", "url": w.URL, "event": w.Event}
	if w.Payload != nil {
		m["payload"] = w.Payload
	}
	return m, nil
}

// HTTP is an http job: one request to a quota-limited upstream.
type HTTP struct {
	Method string // GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS
	URL    string
	Header map[string]string
	// Body is sent as "body" when it is valid UTF-8, else as "body_base64".
	Body []byte
}

func (h HTTP) fields() (map[string]any, []EnqueueOption) {
	m := map[string]any{"type": "http", "method": h.Method, "url": h.URL}
	if len(h.Header) > 0 {
		m["headers"] = h.Header
	}
	switch {
	case h.Body == nil:
	case utf8.Valid(h.Body):
		m["body"] = string(h.Body)
	default:
		m["body_base64"] = base64.StdEncoding.EncodeToString(h.Body)
	}
	return m, nil
}

// Task is a task job, run by the asynq server that serves Queue through
// the sluicetask middleware (package github.com/sluicehq/sluice/sluicetask):
// its handler for Type gets Payload's JSON as the task's payload.
type Task struct {
	Type  string // the asynq task type, e.g. "email:send"
	Queue string // one of the throttler's task_queues; "" is "default"
	// Payload is encoded with encoding/json (a json.RawMessage goes as it
	// is); the handler reads it with t.Payload().
	Payload any
}

func (t Task) fields() (map[string]any, []EnqueueOption) {
	m := map[string]any{"type": "task", "task_type": t.Type}
	if t.Queue != "" {
		m["queue"] = t.Queue
	}
	if t.Payload != nil {
		m["payload"] = t.Payload
	}
	return m, nil
}

// RawJob is a job given as the API's JSON object ({"type": "webhook",
// "url": …}), as a file or another program holds it. Options apply over
// its fields; a JSON value that is not an object is sent as it is and
// refused by the API (ErrInvalid).
type RawJob json.RawMessage

func (r RawJob) fields() (map[string]any, []EnqueueOption) {
	m := map[string]any{}
	if err := json.Unmarshal(r, &m); err != nil {
		return map[string]any{}, []EnqueueOption{func(s *enqueueSpec) { s.invalid = err }}
	}
	return m, nil
}

// WithOptions returns job with opts of its own: in a batch, they apply to
// it after the batch's options.
func WithOptions(job Job, opts ...EnqueueOption) Job { return withOptions{job, opts} }

type withOptions struct {
	job  Job
	opts []EnqueueOption
}

func (w withOptions) fields() (map[string]any, []EnqueueOption) {
	m, inner := w.job.fields()
	return m, append(inner, w.opts...)
}

// EnqueueOption sets a field of the job an enqueue sends.
type EnqueueOption func(*enqueueSpec)

type enqueueSpec struct {
	body    map[string]any
	idem    string
	hasKey  bool
	invalid error // a RawJob that is not a JSON object
}

// Delay makes the job run no earlier than now + d (sent as "delay", a Go
// duration). Not with RunAt.
func Delay(d time.Duration) EnqueueOption {
	return func(s *enqueueSpec) { s.body["delay"] = d.String() }
}

// RunAt makes the job run no earlier than t (sent as "run_at", RFC 3339).
// Not with Delay.
func RunAt(t time.Time) EnqueueOption {
	return func(s *enqueueSpec) { s.body["run_at"] = t.UTC().Format(time.RFC3339Nano) }
}

// Cost is the tokens the job takes of its tenant's (and upstreams') rate;
// default 1.
func Cost(n int64) EnqueueOption { return func(s *enqueueSpec) { s.body["cost"] = n } }

// MaxAttempts overrides the tenant policy's retry.max_attempts for the job.
func MaxAttempts(n int) EnqueueOption { return func(s *enqueueSpec) { s.body["max_attempts"] = n } }

// Upstreams names the shared upstream quotas the job consumes (at most 4).
// Without it the tenant policy's default upstreams apply; Upstreams() with
// no name sends [] (none).
func Upstreams(names ...string) EnqueueOption {
	return func(s *enqueueSpec) {
		if names == nil {
			names = []string{}
		}
		s.body["upstreams"] = names
	}
}

// Callback makes Sluice POST the job's terminal state (succeeded, dead,
// canceled) to url, signed with the tenant's webhook secrets.
func Callback(url string) EnqueueOption {
	return func(s *enqueueSpec) { s.body["callback"] = map[string]string{"url": url} }
}

// IdempotencyKey sends the job under key (1 to 256 printable ASCII
// characters): another enqueue of the same job under the same key within
// the retention's idempotency window stores nothing and answers the first
// job (JobInfo.Duplicate); the same key with a different job is refused
// (ErrInvalid, code idempotency_mismatch). Without it a call makes a key
// of its own, which only its own retries reuse.
func IdempotencyKey(key string) EnqueueOption {
	return func(s *enqueueSpec) { s.idem, s.hasKey = key, true }
}

// String is the job reference's API JSON.
func (j *JobInfo) String() string { return string(j.Raw) }

// JobInfo is an accepted job: the API's 202 answer to an enqueue, or a
// batch item's.
type JobInfo struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	State  string `json:"state"` // "scheduled" or "queued"
	// ETA is a lower bound of the job's first slot (RFC 3339), nil when
	// unknown.
	ETA *string `json:"eta"`
	// Duplicate is set when the job was not stored by this call: an
	// earlier call (or an earlier try of this one) stored it under the
	// same idempotency key (the API's Idempotent-Replayed /
	// idempotent_replayed).
	Duplicate bool `json:"idempotent_replayed,omitempty"`
	// IdempotencyKey is the key the job was sent under (the caller's, or
	// the one the call made).
	IdempotencyKey string `json:"-"`
	// Raw is the API's JSON answer for the job.
	Raw json.RawMessage `json:"-"`
}

// newIdempotencyKey makes a key for a call that was given none.
func newIdempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return "sluice-go-" + hex.EncodeToString(b[:])
}

// specOf builds the JSON object of job with opts applied (job's own after
// the call's) and its idempotency key, made when none was given.
func specOf(job Job, opts []EnqueueOption) enqueueSpec {
	m, own := job.fields()
	s := enqueueSpec{body: m}
	for _, o := range append(opts, own...) {
		o(&s)
	}
	if !s.hasKey {
		s.idem = newIdempotencyKey()
	}
	return s
}

// Enqueue sends job to tenant's backlog (POST /v1/tenants/{tenant}/jobs)
// with opts, under an Idempotency-Key header: IdempotencyKey's, or one the
// call makes and reuses on its retries. It retries 429 rate_limited, 503
// and 507 within the retry budget and ctx, after their Retry-After, and a
// lost connection: a job is stored at most once, and a retry that finds
// it stored returns it with Duplicate set.
//
// The error, after the last try, is an *Error (with IdempotencyKey set)
// matching ErrRateLimited or ErrBacklogFull (429, with RetryAfter),
// ErrStorageFull (507), ErrUnavailable (503 or no answer; OutcomeUnknown
// when the job may have been stored: retry with the same IdempotencyKey),
// ErrInvalid (400, 413, 415, 422: invalid with Problems,
// idempotency_mismatch, no_task_worker, no_webhook_secret,
// unknown_upstream, cost_exceeds_upstream_burst), ErrUnauthorized,
// ErrForbidden (the key may not act on tenant) or ErrNotFound (the
// throttler serves no jobs); or ctx's error.
func (c *Client) Enqueue(ctx context.Context, tenant string, job Job, opts ...EnqueueOption) (*JobInfo, error) {
	s := specOf(job, opts)
	path := pathOf("/v1/tenants", tenant) + "/jobs"
	if s.invalid != nil {
		return nil, rawJobError(path, s.invalid)
	}
	req := &request{method: http.MethodPost, path: path, body: s.body,
		header: http.Header{"Idempotency-Key": {s.idem}}}
	resp, err := c.do(ctx, req)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.IdempotencyKey = s.idem
		}
		return nil, err
	}
	var info JobInfo
	if err := decode(resp, "job", &info); err != nil {
		return nil, err
	}
	info.Duplicate = resp.header.Get("Idempotent-Replayed") == "true"
	info.IdempotencyKey, info.Raw = s.idem, resp.body
	return &info, nil
}

// rawJobError is the ErrInvalid of a RawJob that is not a JSON object.
func rawJobError(path string, err error) *Error {
	return &Error{Method: http.MethodPost, Path: path, Status: http.StatusUnprocessableEntity, Code: CodeInvalid,
		Message: "the job is not a JSON object: " + err.Error()}
}
