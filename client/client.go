// Package client is the Go client of Sluice's HTTP API: a producer enqueues
// jobs (one at a time or in batches), an operator reads and steers tenants,
// jobs, dead letters, secrets and upstreams, and any program asks Sluice's
// limits for decisions (rate limiting as a service).
//
// It talks to a throttler over HTTP only (net/http and the standard
// library; no Redis). A Client is made from the throttler's base URL and an
// API key:
//
//	c, err := client.New("http://sluice:8080", os.Getenv("SLUICE_API_KEY"))
//	job, err := c.Enqueue(ctx, "acme", client.Webhook{URL: u, Event: "invoice.paid", Payload: inv})
//
// Every method takes a context first and is safe for concurrent use.
//
// # Errors
//
// A refusal by the API is an *Error carrying the HTTP status, the API's
// error code and message, Retry-After and, for a validation error, every
// field problem. It matches one of the sentinels with errors.Is
// (ErrRateLimited, ErrBacklogFull, ErrStorageFull, ErrUnavailable,
// ErrInvalid, ErrUnauthorized, ErrForbidden, ErrNotFound, ErrConflict,
// ErrPreconditionFailed); errors.As gives the *Error. A request that got no
// answer (a cut connection, a refused dial) is an *Error too, with Status 0,
// matching ErrUnavailable and wrapping the transport's error.
//
// # Retries
//
// A call retries, within the Client's retry budget (WithRetryBudget) and
// its context, the answers that say "try again": 429 rate_limited, 503
// unavailable and 507 storage_full, after the Retry-After they carry, and a
// lost connection (or a gateway's 502 or 504) after a short backoff. A write whose effect is not
// idempotent (cancel, replay, a secret, a check of a limit, a policy put
// with If-Match) is retried only when the answer says nothing happened.
// Enqueue and EnqueueBatch send an idempotency key on every job — the
// caller's (IdempotencyKey) or one the call makes — and reuse it on their
// retries: a retried enqueue never stores a job twice; the retry of a job
// that was stored answers with JobInfo.Duplicate set.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// RetryBudgetDefault is the retry budget of a Client made without
// WithRetryBudget: the longest a call spends waiting between its tries.
const RetryBudgetDefault = 15 * time.Second

// UserAgentDefault is the User-Agent of a Client made without WithUserAgent.
const UserAgentDefault = "sluice-go-client"

// maxBodyBytes bounds an answer read into memory.
const maxBodyBytes = 32 << 20

// Client calls one Sluice throttler with one API key. Its zero value is not
// usable: make it with New. It is safe for concurrent use.
type Client struct {
	base      *url.URL
	key       string
	hc        *http.Client
	userAgent string
	budget    time.Duration
	// backoff is the wait before retrying a lost connection's attempt n
	// (1 = the first retry).
	backoff func(n int) time.Duration
}

// Option configures a Client made by New.
type Option func(*Client)

// WithHTTPClient makes the Client send its requests with hc (its transport,
// timeouts, proxies). Default: a client of its own with http.DefaultTransport
// and no timeout (bound each call with its context).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithUserAgent sets the User-Agent header of every request (default
// UserAgentDefault).
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// WithRetryBudget bounds the time one call spends waiting between its
// tries (default RetryBudgetDefault). An answer whose Retry-After would
// take the call past the budget ends the call with that answer's error.
// 0 turns retries off: every call makes one try.
func WithRetryBudget(d time.Duration) Option { return func(c *Client) { c.budget = max(d, 0) } }

// New returns a Client for the throttler at baseURL (scheme, host and an
// optional path prefix, e.g. "http://sluice:8080") that authenticates with
// apiKey as a Bearer token. It returns an error for a base URL that is not
// absolute http or https, or an empty key.
func New(baseURL, apiKey string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("sluice client: base URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("sluice client: base URL %q: want http(s)://host[:port]", baseURL)
	}
	if apiKey == "" {
		return nil, errors.New("sluice client: empty API key")
	}
	u.Path = strings.TrimRight(u.Path, "/")
	c := &Client{base: u, key: apiKey, hc: &http.Client{}, userAgent: UserAgentDefault, budget: RetryBudgetDefault,
		backoff: func(n int) time.Duration {
			d := 100 * time.Millisecond << min(n-1, 4) // 100 ms … 1.6 s
			return d/2 + rand.N(d/2+1)
		}}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// retryMode says which failed tries of a request may be retried.
type retryMode int

const (
	// retrySafe: every retryable answer and a lost connection (reads,
	// idempotent writes, enqueues under an idempotency key).
	retrySafe retryMode = iota
	// retryRefused: only answers saying nothing happened (a write that
	// must not run twice).
	retryRefused
)

// request is one API call.
type request struct {
	method, path string
	query        url.Values
	body         any // JSON-encoded when not nil
	header       http.Header
	mode         retryMode
	// answer reports whether a status (other than 2xx) carries a body the
	// caller decodes itself rather than an error (a limit check's 429).
	answer func(status int, body []byte) bool
}

// response is an answer handed back to the caller.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends req, retrying as req.mode allows within the budget and ctx; it
// returns a 2xx answer (or one req.answer accepts) or an error.
func (c *Client) do(ctx context.Context, req *request) (*response, error) {
	var body []byte
	if req.body != nil {
		var err error
		if body, err = json.Marshal(req.body); err != nil {
			return nil, fmt.Errorf("sluice client: encode %s %s: %w", req.method, req.path, err)
		}
	}
	var waited time.Duration
	for attempt := 1; ; attempt++ {
		resp, err := c.once(ctx, req, body)
		if err == nil {
			return resp, nil
		}
		wait, ok := c.retryable(req.mode, err, attempt)
		if !ok || waited+wait > c.budget || !fitsDeadline(ctx, wait) {
			return nil, err
		}
		if werr := sleep(ctx, wait); werr != nil {
			return nil, err
		}
		waited += wait
	}
}

// once makes one try. Anything but a 2xx answer (or one req.answer
// accepts) comes back as an *Error, or the context's error.
func (c *Client) once(ctx context.Context, req *request, body []byte) (*response, error) {
	target := c.base.String() + req.path // req.path is escaped
	if len(req.query) > 0 {
		target += "?" + req.query.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	hr, err := http.NewRequestWithContext(ctx, req.method, target, rd)
	if err != nil {
		return nil, fmt.Errorf("sluice client: %s %s: %w", req.method, req.path, err)
	}
	for k, vs := range req.header {
		hr.Header[k] = vs
	}
	hr.Header.Set("Authorization", "Bearer "+c.key)
	hr.Header.Set("Accept", "application/json")
	hr.Header.Set("User-Agent", c.userAgent)
	if body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	hresp, err := c.hc.Do(hr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("sluice client: %s %s: %w", req.method, req.path, ctx.Err())
		}
		return nil, transportError(req, err)
	}
	defer hresp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(hresp.Body, maxBodyBytes))
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("sluice client: %s %s: %w", req.method, req.path, ctx.Err())
		}
		return nil, transportError(req, err)
	}
	resp := &response{status: hresp.StatusCode, header: hresp.Header, body: raw}
	if resp.status/100 == 2 || (req.answer != nil && req.answer(resp.status, raw)) {
		return resp, nil
	}
	return nil, errorOf(req.method, req.path, resp)
}

// pathOf joins the path segments, escaping each one after the first
// (which is the route's fixed prefix, e.g. "/v1/tenants").
func pathOf(prefix string, segs ...string) string {
	var b strings.Builder
	b.WriteString(prefix)
	for _, s := range segs {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(s))
	}
	return b.String()
}

// transportError is the *Error of a try that got no answer: unavailable,
// and, unless no connection was made, with its outcome unknown.
func transportError(req *request, err error) *Error {
	var op *net.OpError
	dial := errors.As(err, &op) && op.Op == "dial"
	return &Error{Method: req.method, Path: req.path, Code: CodeUnavailable, OutcomeUnknown: !dial && req.method != http.MethodGet,
		Message: "no answer from the throttler", cause: err, dial: dial}
}

// retryable reports whether err, the failure of try attempt, may be
// retried under mode, and after how long.
func (c *Client) retryable(mode retryMode, err error, attempt int) (time.Duration, bool) {
	var e *Error
	if !errors.As(err, &e) {
		return 0, false // the context's error, or one of encoding
	}
	if e.Status == 0 { // no answer
		return c.backoff(attempt), mode == retrySafe || e.dial
	}
	wait := e.RetryAfter
	if wait <= 0 {
		wait = c.backoff(attempt)
	}
	switch {
	case e.Status == http.StatusTooManyRequests && e.Code == CodeRateLimited:
		return wait, true // refused before anything was stored
	case e.Status == http.StatusInsufficientStorage:
		return wait, true // Redis refused the write: nothing was stored
	case (e.Status == http.StatusServiceUnavailable && e.Code != CodeSecretsDisabled) || gatewayFailure(e.Status):
		return wait, mode == retrySafe || !e.OutcomeUnknown
	}
	return 0, false
}

// fitsDeadline reports whether waiting d leaves ctx's deadline ahead.
func fitsDeadline(ctx context.Context, d time.Duration) bool {
	dl, ok := ctx.Deadline()
	return !ok || time.Until(dl) > d
}

// sleep waits d or until ctx is done (its error).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// decode unmarshals an answer's body into v.
func decode(resp *response, what string, v any) error {
	if err := json.Unmarshal(resp.body, v); err != nil {
		return fmt.Errorf("sluice client: decode %s: %w", what, err)
	}
	return nil
}

// retryAfter reads a Retry-After header in whole seconds (0 when absent or
// not a number of seconds).
func retryAfter(h http.Header) time.Duration {
	n, err := strconv.ParseInt(strings.TrimSpace(h.Get("Retry-After")), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}
