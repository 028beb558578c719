package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// JobView is a job as GET /v1/jobs/{id} shows it. Raw holds the API's JSON
// (the job's body, attempts and result among it).
type JobView struct {
	ID           string    `json:"id"`
	Tenant       string    `json:"tenant"`
	Type         string    `json:"type"`  // webhook, http or task
	State        string    `json:"state"` // scheduled, queued, released, running, retrying, succeeded, dead, canceled
	Cost         int64     `json:"cost"`
	ActualCost   int64     `json:"actual_cost,omitempty"`
	Created      *string   `json:"created"`
	RunAt        *string   `json:"run_at"`
	ETA          *string   `json:"eta"`
	Ended        *string   `json:"ended"`
	AttemptCount int64     `json:"attempt_count"`
	Attempts     []Attempt `json:"attempts"`
	// IdempotencyKey is the key the job was enqueued under.
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	Job            json.RawMessage `json:"job"` // the job as enqueued
	Upstreams      []string        `json:"upstreams"`
	DeadReason     string          `json:"dead_reason,omitempty"`
	CanceledFrom   string          `json:"canceled_from,omitempty"`
	Raw            json.RawMessage `json:"-"`
}

// Attempt is one entry of a job's attempt log.
type Attempt struct {
	At        *string `json:"at"`
	Status    int     `json:"status"` // the HTTP status, 0 when none arrived
	LatencyMS int64   `json:"latency_ms"`
	Error     string  `json:"error,omitempty"`
}

// GetJob returns the job id (GET /v1/jobs/{id}). The error is an *Error
// matching ErrNotFound (no such job, or expired), ErrForbidden (the key
// may not act on its tenant), ErrUnauthorized, ErrRateLimited or
// ErrUnavailable after the retries; or ctx's error.
func (c *Client) GetJob(ctx context.Context, id string) (*JobView, error) {
	return getJSON[JobView](ctx, c, &request{method: http.MethodGet, path: pathOf("/v1/jobs", id)}, "job")
}

// CancelJob cancels the job id before it runs (DELETE /v1/jobs/{id}) and
// returns it canceled, with CanceledFrom the state it left. It is not
// retried once sent. The error is an *Error matching ErrConflict (the job
// is running or already ended), ErrNotFound, ErrForbidden,
// ErrUnauthorized, ErrRateLimited or ErrUnavailable (OutcomeUnknown: it
// may be canceled; GetJob tells); or ctx's error.
func (c *Client) CancelJob(ctx context.Context, id string) (*JobView, error) {
	return getJSON[JobView](ctx, c, &request{method: http.MethodDelete, path: pathOf("/v1/jobs", id), mode: retryRefused}, "job")
}

// ReplayJob puts the dead job id back in its tenant's backlog (POST
// /v1/jobs/{id}/replay; same id, attempts kept) and returns it. It is not
// retried once sent. The error is an *Error matching ErrConflict (the job
// is not dead), ErrNotFound, ErrForbidden, ErrUnauthorized, ErrRateLimited
// or ErrUnavailable (OutcomeUnknown: GetJob tells); or ctx's error.
func (c *Client) ReplayJob(ctx context.Context, id string) (*JobView, error) {
	return getJSON[JobView](ctx, c, &request{method: http.MethodPost, path: pathOf("/v1/jobs", id) + "/replay", mode: retryRefused}, "job")
}

// raw is implemented by the answer types that keep the API's JSON.
type raw interface{ setRaw([]byte) }

func (v *JobView) setRaw(b []byte) { v.Raw = b }

// getJSON sends req and decodes its answer into a new T, keeping the raw
// JSON when T does.
func getJSON[T any](ctx context.Context, c *Client, req *request, what string) (*T, error) {
	resp, err := c.do(ctx, req)
	if err != nil {
		return nil, err
	}
	v := new(T)
	if err := decode(resp, what, v); err != nil {
		return nil, err
	}
	if r, ok := any(v).(raw); ok {
		r.setRaw(resp.body)
	}
	return v, nil
}

// page is one page of a listing: its items' raw JSON, the cursor to the
// next ("" on the last) and the whole answer.
type page struct {
	items  []json.RawMessage
	cursor string
	raw    []byte
}

// getPage sends req and splits its answer's itemsKey array and cursorKey
// (a string or null).
func (c *Client) getPage(ctx context.Context, req *request, itemsKey, cursorKey string) (*page, error) {
	resp, err := c.do(ctx, req)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := decode(resp, itemsKey, &m); err != nil {
		return nil, err
	}
	p := &page{raw: resp.body}
	if err := json.Unmarshal(m[itemsKey], &p.items); err != nil {
		return nil, fmt.Errorf("sluice client: decode %s: %w", itemsKey, err)
	}
	var cursor *string
	if err := json.Unmarshal(m[cursorKey], &cursor); len(m[cursorKey]) > 0 && err != nil {
		return nil, fmt.Errorf("sluice client: decode %s: %w", cursorKey, err)
	}
	if cursor != nil {
		p.cursor = *cursor
	}
	return p, nil
}

// decodeEach decodes each of raws into a T that keeps its raw JSON.
func decodeEach[T any, P interface {
	*T
	raw
}](raws []json.RawMessage, what string) ([]T, error) {
	out := make([]T, len(raws))
	for i, r := range raws {
		if err := json.Unmarshal(r, &out[i]); err != nil {
			return nil, fmt.Errorf("sluice client: decode %s %d: %w", what, i, err)
		}
		P(&out[i]).setRaw(r)
	}
	return out, nil
}

// Health reports whether the throttler's process answers (GET /healthz):
// nil, or an *Error / ctx's error. It is not authenticated.
func (c *Client) Health(ctx context.Context) error {
	_, err := c.do(ctx, &request{method: http.MethodGet, path: "/healthz"})
	return err
}

// Ready reports whether the throttler can serve (GET /readyz: its Redis
// answers): nil, or an *Error matching ErrUnavailable, or ctx's error.
func (c *Client) Ready(ctx context.Context) error {
	_, err := c.do(ctx, &request{method: http.MethodGet, path: "/readyz"})
	return err
}

// OpenAPI returns the throttler's OpenAPI 3.1 document (GET /openapi.json).
func (c *Client) OpenAPI(ctx context.Context) ([]byte, error) {
	resp, err := c.do(ctx, &request{method: http.MethodGet, path: "/openapi.json"})
	if err != nil {
		return nil, err
	}
	return resp.body, nil
}

// String is the job's API JSON.
func (v *JobView) String() string { return string(v.Raw) }
