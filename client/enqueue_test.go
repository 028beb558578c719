package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/throttlertest"
)

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func hook(i int) client.Webhook {
	return client.Webhook{URL: "https://example.com/hook", Event: "test.event", Payload: map[string]int{"n": i}}
}

// The throttler stores the job, the connection is cut before its answer
// reaches the client: the call's own retry, under the key it made, answers
// "duplicate", and one job exists.
func TestEnqueueRetryAfterCutConnectionIsDuplicate(t *testing.T) {
	t.Parallel()
	d := deploy(t, nil, false)
	ctx := ctxFor(t)
	proxy := newCutProxy(t, strings.TrimPrefix(d.url, "http://"), 1)
	c := newClient(t, proxy.URL(), throttlertest.AdminKey)

	job, err := c.Enqueue(ctx, "cut", hook(1), client.Delay(time.Hour))
	if err != nil {
		t.Fatalf("Enqueue through a cut connection: %v", err)
	}
	if proxy.cut.Load() != 1 {
		t.Fatalf("the proxy cut %d connections, want 1", proxy.cut.Load())
	}
	if !job.Duplicate {
		t.Errorf("the retry's answer is not a duplicate: %+v", job)
	}
	if !strings.HasPrefix(job.IdempotencyKey, "sluice-go-") {
		t.Errorf("IdempotencyKey = %q, want the one the call made", job.IdempotencyKey)
	}
	ten, err := d.admin.GetTenant(ctx, "cut")
	if err != nil {
		t.Fatal(err)
	}
	if ten.Backlog != 1 {
		t.Errorf("tenant backlog = %d after one enqueue retried, want 1", ten.Backlog)
	}
	got, err := d.admin.GetJob(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.IdempotencyKey != job.IdempotencyKey || got.State != "scheduled" {
		t.Errorf("stored job %+v, want key %q, state scheduled", got, job.IdempotencyKey)
	}
}

// Two calls without a key are two jobs; two with the same key are one.
func TestEnqueueIdempotencyKey(t *testing.T) {
	t.Parallel()
	d := deploy(t, nil, false)
	ctx := ctxFor(t)
	a, err := d.producer.Enqueue(ctx, "acme-1", hook(1), client.Delay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.producer.Enqueue(ctx, "acme-1", hook(1), client.Delay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if a.ID == b.ID || a.Duplicate || b.Duplicate {
		t.Errorf("two enqueues without a key: %+v and %+v, want two new jobs", a, b)
	}
	k1, err := d.producer.Enqueue(ctx, "acme-1", hook(2), client.Delay(time.Hour), client.IdempotencyKey("order-7"))
	if err != nil {
		t.Fatal(err)
	}
	k2, err := d.producer.Enqueue(ctx, "acme-1", hook(2), client.Delay(time.Hour), client.IdempotencyKey("order-7"))
	if err != nil {
		t.Fatal(err)
	}
	if k2.ID != k1.ID || k1.Duplicate || !k2.Duplicate || k2.IdempotencyKey != "order-7" {
		t.Errorf("same key twice: %+v then %+v, want the second a duplicate of the first", k1, k2)
	}
	_, err = d.producer.Enqueue(ctx, "acme-1", hook(3), client.IdempotencyKey("order-7"))
	var e *client.Error
	if !errors.Is(err, client.ErrInvalid) || !errors.As(err, &e) || e.Code != client.CodeIdempotencyMismatch {
		t.Errorf("same key, other job: %v, want ErrInvalid with code idempotency_mismatch", err)
	}
}

func TestEnqueueBatch(t *testing.T) {
	t.Parallel()
	d := deploy(t, nil, false)
	ctx := ctxFor(t)
	jobs := []client.Job{
		hook(1),
		client.WithOptions(hook(2), client.IdempotencyKey("b-2"), client.Cost(2)),
		client.Webhook{URL: "not a url", Event: "x"},
	}
	res, err := d.admin.EnqueueBatch(ctx, "batch", jobs, client.Delay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 {
		t.Fatalf("%d results for 3 jobs", len(res))
	}
	for i, r := range res[:2] {
		if r.Index != i || r.Status != 202 || r.Err != nil || r.Job == nil || r.Job.Duplicate || r.Job.State != "scheduled" {
			t.Fatalf("result %d = %+v, want stored and scheduled", i, r)
		}
	}
	var e *client.Error
	if !errors.Is(res[2].Err, client.ErrInvalid) || !errors.As(res[2].Err, &e) || len(e.Problems) == 0 || e.Problems[0].Field != "url" {
		t.Errorf("bad item's error = %#v, want ErrInvalid naming url", res[2].Err)
	}
	again, err := d.admin.EnqueueBatch(ctx, "batch", jobs[1:2], client.Delay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if j := again[0].Job; j == nil || !j.Duplicate || j.ID != res[1].Job.ID {
		t.Errorf("the item again under its key: %+v, want a duplicate of %s", again[0], res[1].Job.ID)
	}
	v, err := d.admin.GetJob(ctx, res[1].Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if v.Cost != 2 {
		t.Errorf("item with its own Cost(2) stored with cost %d", v.Cost)
	}
	if _, err := d.admin.EnqueueBatch(ctx, "batch", nil); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("empty batch: %v, want ErrInvalid", err)
	}
}

// A 429 of admission is waited out within the budget, after Retry-After;
// without budget it comes back with RetryAfter.
func TestEnqueueRateLimitedRetriesWithinBudget(t *testing.T) {
	t.Parallel()
	d := deploy(t, nil, false)
	ctx := ctxFor(t)
	if _, err := d.admin.PutPolicy(ctx, "slow", map[string]any{"admit": map[string]any{"rate": "20/m", "burst": 1}}, client.AnyVersion); err != nil {
		t.Fatal(err)
	}
	noRetry := newClient(t, d.url, throttlertest.AdminKey, client.WithRetryBudget(0))
	if _, err := noRetry.Enqueue(ctx, "slow", hook(1), client.Delay(time.Hour)); err != nil {
		t.Fatal(err)
	}
	_, err := noRetry.Enqueue(ctx, "slow", hook(2), client.Delay(time.Hour))
	var e *client.Error
	if !errors.Is(err, client.ErrRateLimited) || !errors.As(err, &e) || e.RetryAfter <= 0 || e.IdempotencyKey == "" {
		t.Fatalf("second enqueue without budget: %v, want ErrRateLimited with RetryAfter and the key", err)
	}
	start := time.Now()
	job, err := d.admin.Enqueue(ctx, "slow", hook(3), client.Delay(time.Hour))
	if err != nil {
		t.Fatalf("enqueue with the default budget: %v", err)
	}
	if job.Duplicate || time.Since(start) < 500*time.Millisecond {
		t.Errorf("enqueue after a 429: %+v in %s, want a new job after waiting", job, time.Since(start))
	}
}

// Batch items refused by admission are sent again, alone, after their
// retry_after: every item ends stored, none twice.
func TestEnqueueBatchRetriesRateLimitedItems(t *testing.T) {
	t.Parallel()
	d := deploy(t, nil, false)
	ctx := ctxFor(t)
	if _, err := d.admin.PutPolicy(ctx, "trickle", map[string]any{"admit": map[string]any{"rate": "2/s", "burst": 2}}, client.AnyVersion); err != nil {
		t.Fatal(err)
	}
	jobs := []client.Job{hook(1), hook(2), hook(3), hook(4)}
	noRetry := newClient(t, d.url, throttlertest.AdminKey, client.WithRetryBudget(0))
	first, err := noRetry.EnqueueBatch(ctx, "trickle", jobs, client.Delay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	limited := 0
	for _, r := range first {
		if errors.Is(r.Err, client.ErrRateLimited) {
			limited++
		}
	}
	if limited != 2 {
		t.Fatalf("4 items over a burst of 2 without retries: %d rate limited, want 2", limited)
	}
	if _, err := d.admin.PutPolicy(ctx, "trickle2", map[string]any{"admit": map[string]any{"rate": "2/s", "burst": 2}}, client.AnyVersion); err != nil {
		t.Fatal(err)
	}
	res, err := d.admin.EnqueueBatch(ctx, "trickle2", jobs, client.Delay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for i, r := range res {
		if r.Err != nil || r.Job == nil || r.Job.Duplicate || r.Index != i {
			t.Fatalf("item %d: %+v, want stored after the client's retry", i, r)
		}
		ids[r.Job.ID] = true
	}
	ten, err := d.admin.GetTenant(ctx, "trickle2")
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 4 || ten.Backlog != 4 {
		t.Errorf("%d distinct ids, backlog %d; want 4 and 4", len(ids), ten.Backlog)
	}
}
