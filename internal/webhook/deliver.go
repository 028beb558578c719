package webhook

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/version"
	"github.com/sluicehq/sluice/internal/wire"
)

// ErrInvalidJob is wrapped by Deliver's error when the job cannot be turned
// into a request (wrong type, bad URL or method, bad body_base64) or is one
// enqueue refuses (job.CheckURL, job.CheckHeader): a URL Go would write to
// the request line as it is, a hop-by-hop header.
// Classify treats it as a permanent failure.
var ErrInvalidJob = errors.New("invalid job")

// Response body limits of Deliver.
const (
	// ExcerptBytes is the most of a response body kept in Result.Excerpt.
	ExcerptBytes = wire.MaxExcerptBytes
	// DrainBytes is the most read and discarded after the excerpt so the
	// connection can be reused; a longer body closes the connection.
	DrainBytes = 64 << 10
)

// Request is one attempt of one job.
type Request struct {
	// ID is the job id, sent as webhook-id (the same on every attempt).
	ID string
	// Job is the stored job (job.Spec.Canonical, parsed); Type must be
	// wire.TypeWebhook or wire.TypeHTTP.
	Job job.Spec
	// Secrets are the tenant's decoded signing keys (policy.Secrets.Keys);
	// webhook jobs carry one signature per key, none when empty. Unused for
	// http jobs.
	Secrets [][]byte
	// UserAgent is the User-Agent header, "Sluice/<version>"; empty means
	// version.UserAgent(), this binary's. An http job's own User-Agent
	// header wins over it.
	UserAgent string
	// Now is the attempt's time, signed as webhook-timestamp; zero means
	// time.Now().
	Now time.Time
	// EventTime is the webhook body's "timestamp" (when the event happened,
	// the same on every attempt when the caller passes the job's creation
	// time); zero means Now.
	EventTime time.Time
	// URL is Job.URL parsed (url.Parse), when the caller has parsed it
	// already; nil: Deliver parses it. Deliver does not modify it.
	URL *url.URL
	// BodyBytes is how much of the response body Result.Body keeps (an http
	// job's max_result_bytes); at most ExcerptBytes are kept when it is
	// smaller.
	BodyBytes int
}

// Result is what one attempt saw.
type Result struct {
	// Status is the HTTP status code; 0 when no response arrived.
	Status int
	// Header is the response header (nil when no response); Classify reads
	// Retry-After and the rate-limit headers from it.
	Header http.Header
	// Excerpt is the first ExcerptBytes (at most) of the response body.
	Excerpt []byte
	// Body is the first max(Request.BodyBytes, ExcerptBytes) (at most) of
	// the response body; Excerpt is its start.
	Body []byte
	// Truncated is set when the body was longer than Body, or when reading
	// it failed before its end (Cut says why).
	Truncated bool
	// Cut is why the body's read stopped before its end, "" when it did
	// not: ReasonTimeout (the attempt's deadline), ReasonCanceled or
	// ReasonConnection (classifyErr's reasons). A response whose body is
	// cut still counts by its status (Outcome): the upstream answered, and
	// sending again could repeat what it did.
	Cut string
	// Latency runs from sending the request to the response headers, or to
	// the failure — to the cut, when the body's read was cut.
	Latency time.Duration
	// Err is nil when a response arrived. Otherwise it is the cause, wrapped:
	// ErrInvalidJob, an *EgressError, a context or net timeout, a
	// connection error.
	Err error
}

// Outcome classifies r (see Classify) into the report Store.Finish takes.
// A success with a non-zero Pause asks the caller to pause the tenant
// pre-emptively for that long (the upstream said its quota is spent).
func (r Result) Outcome(now time.Time) wire.AttemptOutcome {
	kind, pause, reason := Classify(r.Status, r.Header, r.Err, now)
	return wire.AttemptOutcome{Kind: kind, Status: r.Status, Latency: r.Latency, Error: reason, Pause: pause,
		TimedOut: r.Status == 0 && reason == ReasonTimeout, Excerpt: r.Excerpt}
}

// Deliver sends one attempt of req with client (normally NewClient's) and
// reads at most max(req.BodyBytes, ExcerptBytes) + DrainBytes of the
// response body. The
// attempt's timeout is ctx's deadline; Deliver sets no other. It never
// panics and returns a Result whose Err says why no response arrived.
//
// A webhook job is a POST of EventBody(Event, EventTime, Payload) with
// Content-Type: application/json, the User-Agent, and the Standard Webhooks
// headers (Headers). An http job uses its method, URL and headers, and its
// body or body_base64 (decoded) when given; Go ignores a Host header.
func Deliver(ctx context.Context, client *http.Client, req Request) Result {
	if req.Now.IsZero() {
		req.Now = time.Now()
	}
	hreq, err := buildRequest(ctx, req)
	if err != nil {
		return Result{Err: err}
	}
	start := time.Now()
	resp, err := client.Do(hreq)
	latency := time.Since(start)
	if err != nil {
		return Result{Latency: latency, Err: fmt.Errorf("send job %s: %w", req.ID, err)}
	}
	defer resp.Body.Close()
	body, drained, err := readBody(resp.Body, max(req.BodyBytes, ExcerptBytes))
	r := Result{
		Status:    resp.StatusCode,
		Header:    resp.Header,
		Excerpt:   body[:min(len(body), ExcerptBytes):min(len(body), ExcerptBytes)],
		Body:      body,
		Truncated: drained > 0,
		Latency:   latency,
	}
	if err != nil {
		_, _, r.Cut = classifyErr(err)
		r.Truncated, r.Latency = true, time.Since(start)
	}
	return r
}

// readBody reads up to limit bytes of a response body, then drains up to
// DrainBytes more (drained: how many it found) so that the connection can
// be reused; err is why the read stopped before the body's end. A body
// known empty (http.NoBody: a 204, a Content-Length of 0) is not read.
func readBody(rc io.ReadCloser, limit int) (body []byte, drained int64, err error) {
	if rc == http.NoBody {
		return []byte{}, 0, nil // what io.ReadAll returns for it
	}
	body, err = io.ReadAll(io.LimitReader(rc, int64(limit)))
	if err == nil {
		if drained, err = io.CopyN(io.Discard, rc, DrainBytes); errors.Is(err, io.EOF) {
			err = nil // the body ended within the drain
		}
	}
	return body, drained, err
}

// buildRequest turns req into an *http.Request bound to ctx.
func buildRequest(ctx context.Context, req Request) (*http.Request, error) {
	spec := &req.Job
	var err error
	ua := cmp.Or(req.UserAgent, version.UserAgent())
	var method string
	var body []byte
	header := make(http.Header, 5)        // a webhook's: these two and Headers' three
	v := []string{ua, "application/json"} // one allocation for both values
	header["User-Agent"] = v[0:1:1]
	switch spec.Type {
	case wire.TypeWebhook:
		method = http.MethodPost
		evt := req.EventTime
		if evt.IsZero() {
			evt = req.Now
		}
		body = EventBody(spec.Event, evt, spec.Payload)
		header["Content-Type"] = v[1:2:2]
		Headers(header, req.Secrets, req.ID, req.Now, body)
	case wire.TypeHTTP:
		method = spec.Method
		for name, value := range spec.Headers {
			if err := job.CheckHeader(name, value); err != nil {
				return nil, fmt.Errorf("%w: job %s: headers: %w", ErrInvalidJob, req.ID, err)
			}
			header.Set(name, value)
		}
		switch {
		case spec.Body != nil:
			body = []byte(*spec.Body)
		case spec.BodyBase64 != nil:
			if body, err = base64.StdEncoding.DecodeString(*spec.BodyBase64); err != nil {
				return nil, fmt.Errorf("%w: job %s: body_base64: %w", ErrInvalidJob, req.ID, err)
			}
		}
	default:
		return nil, fmt.Errorf("%w: job %s: type %q cannot be delivered over HTTP", ErrInvalidJob, req.ID, spec.Type)
	}
	u := req.URL
	if u == nil {
		u, _ = url.Parse(spec.URL) // nil when it does not parse: CheckParsedURL refuses it
	}
	if err := job.CheckParsedURL(spec.URL, u); err != nil { // a stored job is checked as at enqueue
		return nil, fmt.Errorf("%w: job %s: url: %w", ErrInvalidJob, req.ID, err)
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	// The URL parsed once: NewRequestWithContext gets none to parse, and
	// the request gets what it would have made of spec.URL (a copy of u,
	// the empty port of its host removed).
	hreq, err := http.NewRequestWithContext(ctx, method, "", rd)
	if err != nil {
		return nil, fmt.Errorf("%w: job %s: %w", ErrInvalidJob, req.ID, err)
	}
	ru := *u
	ru.Host = removeEmptyPort(ru.Host)
	hreq.URL, hreq.Host = &ru, ru.Host
	if (ru.Scheme != "http" && ru.Scheme != "https") || ru.Host == "" {
		return nil, fmt.Errorf("%w: job %s: url is not an absolute http(s) URL", ErrInvalidJob, req.ID)
	}
	hreq.Header = header
	return hreq, nil
}

// removeEmptyPort is net/http's (NewRequestWithContext's): "host:" →
// "host".
func removeEmptyPort(host string) string {
	if strings.LastIndex(host, ":") > strings.LastIndex(host, "]") {
		return strings.TrimSuffix(host, ":")
	}
	return host
}
