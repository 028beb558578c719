package client_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/chaos"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/throttlertest"
)

// wantError fails t unless err is an *Error matching sentinel with status
// and code; it returns the *Error.
func wantError(t *testing.T, what string, err, sentinel error, status int, code string) *client.Error {
	t.Helper()
	var e *client.Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: %v, want an *client.Error", what, err)
	}
	if !errors.Is(err, sentinel) || e.Status != status || e.Code != code {
		t.Fatalf("%s: %v (status %d, code %q), want %v, %d %s", what, err, e.Status, e.Code, sentinel, status, code)
	}
	for _, other := range []error{client.ErrRateLimited, client.ErrBacklogFull, client.ErrStorageFull, client.ErrUnavailable,
		client.ErrInvalid, client.ErrUnauthorized, client.ErrForbidden, client.ErrNotFound, client.ErrConflict, client.ErrPreconditionFailed} {
		if other != sentinel && errors.Is(err, other) {
			t.Errorf("%s: %v also matches %v", what, err, other)
		}
	}
	return e
}

// Every error kind, from an answer the throttler really gave.
func TestErrorKinds(t *testing.T) {
	t.Parallel()
	d := deploy(t, nil, false)
	ctx := ctxFor(t)
	noRetry := newClient(t, d.url, throttlertest.AdminKey, client.WithRetryBudget(0))

	stranger := newClient(t, d.url, "no-such-key")
	_, err := stranger.GetTenant(ctx, "acme-1")
	wantError(t, "unknown key", err, client.ErrUnauthorized, http.StatusUnauthorized, client.CodeUnauthorized)

	_, err = d.producer.GetTenant(ctx, "globex")
	wantError(t, "tenant outside the key's", err, client.ErrForbidden, http.StatusForbidden, client.CodeForbidden)
	_, err = d.producer.PauseTenant(ctx, "acme-1", time.Time{})
	wantError(t, "pause with a key that is not admin", err, client.ErrForbidden, http.StatusForbidden, client.CodeForbidden)

	_, err = d.admin.GetUpstream(ctx, "no-such-upstream")
	wantError(t, "unknown upstream", err, client.ErrNotFound, http.StatusNotFound, client.CodeNotFound)
	_, err = d.admin.Allow(ctx, "no-such-limit", "k", 1)
	wantError(t, "unknown limit", err, client.ErrNotFound, http.StatusNotFound, client.CodeNotFound)

	_, err = d.admin.Enqueue(ctx, "acme-1", client.Webhook{URL: "ftp://example.com/x", Event: ""}, client.MaxAttempts(1000))
	e := wantError(t, "invalid job", err, client.ErrInvalid, http.StatusUnprocessableEntity, client.CodeInvalid)
	fields := map[string]bool{}
	for _, p := range e.Problems {
		fields[p.Field] = p.Message != ""
	}
	for _, f := range []string{"url", "event", "max_attempts"} {
		if !fields[f] {
			t.Errorf("problems %+v name no %s (message %q)", e.Problems, f, e.Message)
		}
	}
	_, err = d.admin.Enqueue(ctx, "acme-1", client.Task{Type: "email:send"})
	wantError(t, "task job without a sluicetask middleware", err, client.ErrInvalid, http.StatusUnprocessableEntity, client.CodeNoTaskWorker)

	job, err := d.admin.Enqueue(ctx, "acme-1", hook(1), client.Delay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if v, err := d.admin.CancelJob(ctx, job.ID); err != nil || v.State != "canceled" || v.CanceledFrom != "scheduled" {
		t.Fatalf("cancel: %+v, %v", v, err)
	}
	_, err = d.admin.CancelJob(ctx, job.ID)
	wantError(t, "cancel a canceled job", err, client.ErrConflict, http.StatusConflict, client.CodeConflict)
	ten, err := d.admin.GetTenant(ctx, "acme-1")
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.admin.PutPolicy(ctx, "acme-1", map[string]any{"burst": 5}, ten.Version+1)
	wantError(t, "policy put with a stale If-Match", err, client.ErrConflict, http.StatusConflict, client.CodeConflict)
	_, err = d.admin.PutPolicy(ctx, "acme-1", map[string]any{"burst": -5, "concurrency": -1}, client.AnyVersion)
	if e := wantError(t, "invalid policy", err, client.ErrInvalid, http.StatusUnprocessableEntity, client.CodeInvalid); len(e.Problems) == 0 {
		t.Errorf("invalid policy: no problems in %q", e.Message)
	}

	if _, err := d.admin.PutUpstream(ctx, "crm", client.UpstreamConfig{Rate: "10/s"}, 0); err != nil {
		t.Fatal(err)
	}
	_, err = d.admin.PutUpstream(ctx, "crm", client.UpstreamConfig{Rate: "20/s"}, 0)
	wantError(t, "upstream put with a stale If-Match", err, client.ErrPreconditionFailed, http.StatusPreconditionFailed, client.CodePreconditionFailed)

	if _, err := d.admin.PutPolicy(ctx, "full", map[string]any{"max_backlog": 1}, client.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := noRetry.Enqueue(ctx, "full", hook(1), client.Delay(time.Hour)); err != nil {
		t.Fatal(err)
	}
	_, err = d.admin.Enqueue(ctx, "full", hook(2), client.Delay(time.Hour))
	if e := wantError(t, "enqueue over max_backlog", err, client.ErrBacklogFull, http.StatusTooManyRequests, client.CodeBacklogFull); e.RetryAfter <= 0 {
		t.Errorf("backlog full without RetryAfter: %v", e)
	}

	if _, err := d.admin.PutPolicy(ctx, "admit", map[string]any{"admit": map[string]any{"rate": "1/h", "burst": 1}}, client.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := noRetry.Enqueue(ctx, "admit", hook(1), client.Delay(time.Hour)); err != nil {
		t.Fatal(err)
	}
	_, err = d.admin.Enqueue(ctx, "admit", hook(2), client.Delay(time.Hour)) // Retry-After is past the budget
	if e := wantError(t, "enqueue over admission", err, client.ErrRateLimited, http.StatusTooManyRequests, client.CodeRateLimited); e.RetryAfter < time.Minute {
		t.Errorf("rate limited with RetryAfter %s, want about an hour", e.RetryAfter)
	}
}

// 507 storage_full from a Redis above the throttler's memory high-water
// mark: nothing stored, Retry-After given.
func TestErrorStorageFull(t *testing.T) {
	t.Parallel()
	rd := redistest.NewPrivate(t, "--maxmemory", "64mb")
	cfg := throttlertest.Config{"redis": "{prefix: full, memory_high_water: 0.001}"}.Write(t)
	p := bins.StartThrottler(t, cfg, rd.URL())
	c := newClient(t, p.URL, throttlertest.AdminKey, client.WithRetryBudget(0))
	ctx := ctxFor(t)
	_, err := c.Enqueue(ctx, "acme-1", hook(1))
	e := wantError(t, "enqueue above the high-water mark", err, client.ErrStorageFull, http.StatusInsufficientStorage, client.CodeStorageFull)
	if e.RetryAfter <= 0 || e.OutcomeUnknown {
		t.Errorf("storage full: RetryAfter %s, OutcomeUnknown %v; want a Retry-After and a known outcome", e.RetryAfter, e.OutcomeUnknown)
	}
	ten, err := c.GetTenant(ctx, "acme-1")
	if err != nil || ten.Backlog != 0 {
		t.Errorf("after 507: tenant %+v, %v; want an empty backlog", ten, err)
	}
}

// Redis's reply to the enqueue comes too late: 503 with the outcome
// unknown; the same key then stores the job once, whether the first try
// did or not. A read meanwhile is a 503 with a known outcome.
func TestErrorUnavailableOutcomeUnknown(t *testing.T) {
	t.Parallel()
	rd := redistest.NewPrivate(t)
	proxy, err := chaos.Listen(rd.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	cfg := throttlertest.Config{
		"redis": "{prefix: lost, request_timeout: 1s, memory_high_water: 0}",
	}.Write(t)
	p := bins.StartThrottler(t, cfg, "redis://"+proxy.Addr()+"/0")
	c := newClient(t, p.URL, throttlertest.AdminKey, client.WithRetryBudget(0))
	ctx := ctxFor(t)

	// The request has 1 s of Redis time: the API limiter's round trip and
	// the enqueue's together. With a one-way delay L, T/4 < L < T/3, the
	// limiter answers after 2L, the enqueue reaches Redis after 3L < T and
	// runs, its reply would arrive after 4L > T: the throttler answers 503
	// with the outcome unknown. A loaded machine may miss the window: try
	// delays around it until one lands.
	var e *client.Error
	delays := []time.Duration{300 * time.Millisecond, 280 * time.Millisecond, 320 * time.Millisecond, 270 * time.Millisecond}
	try := 0
	redistest.PollMsg(t, 45*time.Second, func() (bool, string) {
		proxy.SetLatency(delays[try%len(delays)])
		try++
		_, err := c.Enqueue(ctx, fmt.Sprintf("lost-%d", try), hook(1), client.Upstreams(), client.Delay(time.Hour))
		proxy.Resume()
		if !errors.As(err, &e) || !e.OutcomeUnknown {
			_ = c.Ready(ctx) // a round trip before the next try
			return false, fmt.Sprintf("try %d: enqueue answered %v, want a 503 with the outcome unknown", try, err)
		}
		return true, ""
	})
	e = wantError(t, "enqueue whose reply was late", e, client.ErrUnavailable, http.StatusServiceUnavailable, client.CodeUnavailable)
	tenant := fmt.Sprintf("lost-%d", try)
	// The enqueue may still be on its way to Redis, held by the latency it
	// was sent under: a request whose caller gave up can land after the
	// 503. Read the tenant once nothing is left in flight.
	redistest.PollMsg(t, 10*time.Second, func() (bool, string) {
		n := proxy.InFlight()
		return n == 0, fmt.Sprintf("%d chunk(s) still in flight through the proxy", n)
	})
	before, err := c.GetTenant(ctx, tenant)
	if err != nil {
		t.Fatal(err)
	}
	if e.IdempotencyKey == "" || !strings.HasPrefix(e.Message, "outcome unknown") {
		t.Fatalf("enqueue's 503: %v (key %q), want an unknown outcome and the key to retry with", e, e.IdempotencyKey)
	}
	job, err := c.Enqueue(ctx, tenant, hook(1), client.Upstreams(), client.Delay(time.Hour), client.IdempotencyKey(e.IdempotencyKey))
	if err != nil {
		t.Fatal(err)
	}
	if job.Duplicate != (before.Backlog == 1) {
		t.Errorf("retry under the key: Duplicate %v with %d job(s) stored before it; want a duplicate exactly when the first try stored the job", job.Duplicate, before.Backlog)
	}
	ten, err := c.GetTenant(ctx, tenant)
	if err != nil || ten.Backlog != 1 {
		t.Errorf("tenant backlog %d after the retry (%v), want exactly 1", ten.Backlog, err)
	}
	proxy.DropReplies()
	_, err = c.GetTenant(ctx, tenant)
	if e := wantError(t, "read while Redis does not answer", err, client.ErrUnavailable, http.StatusServiceUnavailable, client.CodeUnavailable); e.OutcomeUnknown || e.RetryAfter <= 0 {
		t.Errorf("a read's 503: OutcomeUnknown %v, RetryAfter %s; want false and a Retry-After", e.OutcomeUnknown, e.RetryAfter)
	}
	proxy.Resume()
}

// A connection that cannot be made is unavailable, nothing sent.
func TestErrorNoThrottler(t *testing.T) {
	t.Parallel()
	c := newClient(t, "http://127.0.0.1:1", throttlertest.AdminKey, client.WithRetryBudget(0))
	_, err := c.Enqueue(ctxFor(t), "acme-1", hook(1))
	e := wantError(t, "no throttler", err, client.ErrUnavailable, 0, client.CodeUnavailable)
	if e.OutcomeUnknown || errors.Unwrap(err) == nil {
		t.Errorf("refused dial: OutcomeUnknown %v, cause %v; want a known outcome and the dial's error", e.OutcomeUnknown, errors.Unwrap(err))
	}
}
