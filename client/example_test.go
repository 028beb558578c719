package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/throttlertest"
)

// Enqueue a webhook for a tenant: a client, a job, one call. The call
// retries a 429, 503 or 507 within its retry budget under one idempotency
// key, so it never stores the job twice.
func ExampleClient_Enqueue() {
	c, err := client.New(os.Getenv("SLUICE_URL"), os.Getenv("SLUICE_API_KEY"))
	if err != nil {
		log.Fatal(err)
	}
	job, err := c.Enqueue(context.Background(), "acme",
		client.Webhook{URL: "https://hooks.acme.example/sluice", Event: "invoice.paid", Payload: map[string]any{"invoice": 42}},
		client.Delay(30*time.Second), client.IdempotencyKey("invoice-42-paid"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(job.ID, job.State, job.Duplicate)
}

// Tell each failure apart with errors.Is and errors.As.
func ExampleError() {
	c, err := client.New(os.Getenv("SLUICE_URL"), os.Getenv("SLUICE_API_KEY"))
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.Enqueue(context.Background(), "acme", client.Webhook{URL: "https://hooks.acme.example/sluice", Event: "invoice.paid"})
	var e *client.Error
	switch {
	case err == nil:
		fmt.Println("stored")
	case errors.Is(err, client.ErrRateLimited), errors.Is(err, client.ErrBacklogFull):
		errors.As(err, &e)
		fmt.Println("refused; try again in", e.RetryAfter) // after the call's own retries
	case errors.Is(err, client.ErrInvalid):
		errors.As(err, &e)
		for _, p := range e.Problems {
			fmt.Printf("%s: %s\n", p.Field, p.Message)
		}
	case errors.Is(err, client.ErrUnavailable) && errors.As(err, &e) && e.OutcomeUnknown:
		// The job may be stored: the same key stores it at most once.
		fmt.Println("retry later with client.IdempotencyKey(" + e.IdempotencyKey + ")")
	default:
		log.Fatal(err)
	}
}

// Send many jobs in one request and read each one's result.
func ExampleClient_EnqueueBatch() {
	c, err := client.New(os.Getenv("SLUICE_URL"), os.Getenv("SLUICE_API_KEY"))
	if err != nil {
		log.Fatal(err)
	}
	jobs := []client.Job{
		client.Webhook{URL: "https://hooks.acme.example/sluice", Event: "user.created", Payload: map[string]string{"id": "u1"}},
		client.HTTP{Method: "POST", URL: "https://api.crm.example/contacts", Body: []byte(`{"id":"u1"}`)},
		client.WithOptions(client.Webhook{URL: "https://hooks.acme.example/sluice", Event: "user.welcome"},
			client.Delay(time.Hour), client.IdempotencyKey("welcome-u1")),
	}
	results, err := c.EnqueueBatch(context.Background(), "acme", jobs, client.Upstreams("crm"))
	if err != nil {
		log.Fatal(err) // the request as a whole failed
	}
	for _, r := range results {
		switch {
		case r.Err != nil:
			fmt.Println(r.Index, "refused:", r.Err)
		case r.Job.Duplicate:
			fmt.Println(r.Index, "already stored as", r.Job.ID)
		default:
			fmt.Println(r.Index, "stored as", r.Job.ID)
		}
	}
}

// Walk every tenant with a backlog, largest first, across the API's pages.
func ExampleClient_Tenants() {
	c, err := client.New(os.Getenv("SLUICE_URL"), os.Getenv("SLUICE_API_KEY"))
	if err != nil {
		log.Fatal(err)
	}
	for t, err := range c.Tenants(context.Background(), client.TenantQuery{Sort: "backlog"}) {
		if err != nil {
			log.Fatal(err)
		}
		if t.Backlog == 0 {
			break
		}
		fmt.Printf("%-20s %6d queued, %.1f/s\n", t.Tenant, t.Backlog, t.EffectiveRate)
	}
}

// A task job for your own asynq workers: the producer enqueues it through
// Sluice; the asynq server wrapped with sluicetask's middleware (see
// package sluicetask) runs its handler for "email:send" at the tenant's
// rate, with the payload's JSON as the task's payload.
func ExampleTask() {
	c, err := client.New(os.Getenv("SLUICE_URL"), os.Getenv("SLUICE_API_KEY"))
	if err != nil {
		log.Fatal(err)
	}
	job, err := c.Enqueue(context.Background(), "acme",
		client.Task{Type: "email:send", Queue: "default", Payload: map[string]string{"to": "ada@example.com"}})
	var e *client.Error
	if errors.As(err, &e) && e.Code == client.CodeNoTaskWorker {
		log.Fatal("no sluicetask middleware serves the queue default yet")
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(job.ID)
}

// Rate limiting as a service: ask a named limit before calling a partner.
func ExampleClient_Allow() {
	c, err := client.New(os.Getenv("SLUICE_URL"), os.Getenv("SLUICE_API_KEY"))
	if err != nil {
		log.Fatal(err)
	}
	d, err := c.Allow(context.Background(), "search", "user-42", 1)
	if err != nil {
		log.Fatal(err)
	}
	if !d.Allowed {
		fmt.Println("over the limit; again in", d.RetryAfter)
		return
	}
	fmt.Println(d.Remaining, "left")
}

// The examples run against a real throttler (all but ExampleTask, which
// needs a sluicetask middleware): a failing call ends the test binary with
// its log.Fatal message.
func TestExamplesRun(t *testing.T) { // not parallel: t.Setenv
	d := deploy(t, nil, false)
	if _, err := d.admin.PutUpstream(ctxFor(t), "crm", client.UpstreamConfig{Rate: "10/s"}, client.AnyVersion); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLUICE_URL", d.url)
	t.Setenv("SLUICE_API_KEY", throttlertest.AdminKey)
	ExampleClient_Enqueue()
	ExampleError()
	ExampleClient_EnqueueBatch()
	ExampleClient_Tenants()
	ExampleClient_Allow()
	ten, err := d.admin.GetTenant(ctxFor(t), "acme")
	if err != nil {
		t.Fatal(err)
	}
	if ten.Backlog != 5 { // Enqueue's, Error's and the batch's three
		t.Errorf("acme's backlog after the examples: %d, want 5", ten.Backlog)
	}
}
