package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// DeadPage is one page of a tenant's dead letters, oldest first. Cursor is
// "" on the last.
type DeadPage struct {
	Jobs   []JobView
	Cursor string
	Raw    json.RawMessage // the API's JSON page
}

// DeadLetters returns the page of tenant's dead letters after cursor (""
// for the first; GET /v1/tenants/{tenant}/dead), at most limit jobs (1 to
// 1000; 0 is the API's default). The error is an *Error matching
// ErrInvalid (a bad limit), ErrForbidden, ErrUnauthorized, ErrRateLimited
// or ErrUnavailable; or ctx's error.
func (c *Client) DeadLetters(ctx context.Context, tenant, cursor string, limit int) (*DeadPage, error) {
	v := url.Values{}
	setNonEmpty(v, "cursor", cursor)
	if limit != 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	p, err := c.getPage(ctx, &request{method: http.MethodGet, path: pathOf("/v1/tenants", tenant) + "/dead", query: v}, "jobs", "next_cursor")
	if err != nil {
		return nil, err
	}
	jobs, err := decodeEach[JobView](p.items, "dead letter")
	if err != nil {
		return nil, err
	}
	return &DeadPage{Jobs: jobs, Cursor: p.cursor, Raw: p.raw}, nil
}

// DeadReplay selects the dead letters ReplayDead replays. Its zero value
// selects every one, 100 a call.
type DeadReplay struct {
	Reason string    // "gone", "unknown_upstream", …; "" any
	Before time.Time // died before it; zero: the walk's first call
	Limit  int       // at most this many a call (1 to the API's bound); 0: 100
	Cursor string    // "" starts a walk; the previous call's Cursor goes on
}

// ReplayResult answers ReplayDead: how many were replayed, and the cursor
// to go on with ("" when the walk is done).
type ReplayResult struct {
	Replayed int
	Cursor   string
	Raw      json.RawMessage
}

// ReplayDead puts up to sel.Limit of tenant's dead letters back in its
// backlog, oldest death first (POST /v1/tenants/{tenant}/dead:replay,
// admin keys); call it again with the returned Cursor until it is "". A
// walk replays each letter at most once. It is not retried once sent. The
// error is an *Error matching ErrInvalid (a bad selection or cursor),
// ErrForbidden, ErrUnauthorized, ErrRateLimited or ErrUnavailable; or
// ctx's error.
func (c *Client) ReplayDead(ctx context.Context, tenant string, sel DeadReplay) (*ReplayResult, error) {
	body := map[string]any{}
	if sel.Reason != "" {
		body["reason"] = sel.Reason
	}
	if !sel.Before.IsZero() {
		body["before"] = sel.Before.UTC().Format(time.RFC3339Nano)
	}
	if sel.Limit != 0 {
		body["limit"] = sel.Limit
	}
	if sel.Cursor != "" {
		body["cursor"] = sel.Cursor
	}
	resp, err := c.do(ctx, &request{method: http.MethodPost, path: pathOf("/v1/tenants", tenant) + "/dead:replay",
		body: body, mode: retryRefused})
	if err != nil {
		return nil, err
	}
	var r struct {
		Replayed int     `json:"replayed"`
		Cursor   *string `json:"cursor"`
	}
	if err := decode(resp, "replay result", &r); err != nil {
		return nil, err
	}
	out := &ReplayResult{Replayed: r.Replayed, Raw: resp.body}
	if r.Cursor != nil {
		out.Cursor = *r.Cursor
	}
	return out, nil
}

// Secret is one of a tenant's webhook signing secrets made by the API.
// Secret (the whsec_… value) is set only by CreateSecret's answer.
type Secret struct {
	ID        string  `json:"id"`
	Secret    string  `json:"secret,omitempty"`
	CreatedAt *string `json:"created_at"`
	ExpiresAt *string `json:"expires_at,omitempty"`
	// Raw is the API's JSON for the secret.
	Raw json.RawMessage `json:"-"`
}

func (s *Secret) setRaw(b []byte) { s.Raw = b }

// SecretOptions shape CreateSecret. The zero value makes a new secret and
// lets the tenant's other secrets sign for the API's default (24h).
type SecretOptions struct {
	// Import stores this Standard Webhooks secret ("whsec_" + base64)
	// instead of making one.
	Import string
	// ExpirePreviousIn, when set, is when the tenant's other live secrets
	// stop signing, from now (0 at once; a rotation).
	ExpirePreviousIn *time.Duration
}

// CreateSecret adds a webhook signing secret to tenant (POST
// /v1/tenants/{tenant}/secrets, admin keys) and returns it with its value,
// shown this once. It is not retried once sent. The error is an *Error
// matching ErrInvalid (a malformed import or duration), ErrConflict (the
// tenant holds the most live secrets), ErrUnavailable (code
// secrets_disabled: the throttler has no secrets key), ErrForbidden,
// ErrUnauthorized or ErrRateLimited; or ctx's error.
func (c *Client) CreateSecret(ctx context.Context, tenant string, o SecretOptions) (*Secret, error) {
	body := map[string]string{}
	if o.Import != "" {
		body["secret"] = o.Import
	}
	if o.ExpirePreviousIn != nil {
		body["expire_previous_in"] = o.ExpirePreviousIn.String()
	}
	return getJSON[Secret](ctx, c, &request{method: http.MethodPost, path: pathOf("/v1/tenants", tenant) + "/secrets",
		body: body, mode: retryRefused}, "secret")
}

// Secrets lists tenant's live secrets made by the API, oldest first,
// without their values (GET /v1/tenants/{tenant}/secrets). Errors as
// CreateSecret's, less ErrInvalid and ErrConflict.
func (c *Client) Secrets(ctx context.Context, tenant string) ([]Secret, error) {
	raws, err := getJSON[[]json.RawMessage](ctx, c, &request{method: http.MethodGet, path: pathOf("/v1/tenants", tenant) + "/secrets"}, "secrets")
	if err != nil {
		return nil, err
	}
	return decodeEach[Secret](*raws, "secret")
}

// DeleteSecret removes tenant's secret id (DELETE
// /v1/tenants/{tenant}/secrets/{id}, admin keys). The error is an *Error
// matching ErrNotFound (no live secret id), ErrUnavailable
// (secrets_disabled), ErrForbidden, ErrUnauthorized or ErrRateLimited; or
// ctx's error.
func (c *Client) DeleteSecret(ctx context.Context, tenant, id string) error {
	_, err := c.do(ctx, &request{method: http.MethodDelete, path: pathOf("/v1/tenants", tenant) + pathOf("/secrets", id), mode: retryRefused})
	return err
}

// Decision is a limit's answer to Allow.
type Decision struct {
	Allowed    bool
	Limit      int64         // the limit's capacity
	Remaining  int64         // tokens (or requests) left after this decision
	RetryAfter time.Duration // when denied: until cost could be allowed
	ResetAfter time.Duration // until the limit is full again
	Raw        json.RawMessage
}

// Allow asks the limit name for cost tokens of key (POST
// /v1/limits/{name}/check): rate limiting as a service. A denial is a
// Decision with Allowed false and no error. It is not retried once sent
// (a check spends tokens). The error is an *Error matching ErrNotFound
// (no such limit), ErrForbidden (the key may not check it, or it is the
// API's own), ErrInvalid (an empty or long key, a cost below 1 or above
// the limit's capacity), ErrUnauthorized, ErrRateLimited (the API key's
// own limit) or ErrUnavailable; or ctx's error.
func (c *Client) Allow(ctx context.Context, name, key string, cost int64) (*Decision, error) {
	req := &request{method: http.MethodPost, path: pathOf("/v1/limits", name) + "/check", mode: retryRefused,
		body: map[string]any{"key": key, "cost": cost},
		answer: func(status int, body []byte) bool {
			var d struct {
				Allowed *bool `json:"allowed"`
			}
			return status == http.StatusTooManyRequests && json.Unmarshal(body, &d) == nil && d.Allowed != nil
		}}
	resp, err := c.do(ctx, req)
	if err != nil {
		return nil, err
	}
	var d struct {
		Allowed      bool  `json:"allowed"`
		Limit        int64 `json:"limit"`
		Remaining    int64 `json:"remaining"`
		RetryAfterMS int64 `json:"retry_after_ms"`
		ResetAfterMS int64 `json:"reset_after_ms"`
	}
	if err := decode(resp, "decision", &d); err != nil {
		return nil, err
	}
	return &Decision{Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining, Raw: resp.body,
		RetryAfter: time.Duration(d.RetryAfterMS) * time.Millisecond, ResetAfter: time.Duration(d.ResetAfterMS) * time.Millisecond}, nil
}

// Summary is the deployment at a glance (GET /v1/summary), as the
// console's overview shows it. Raw holds the API's JSON, with the
// throttlers, attention and busiest lists.
type Summary struct {
	At             string          `json:"at"`
	Key            KeyInfo         `json:"key"`
	Tenants        int             `json:"tenants"`
	Backlog        int64           `json:"backlog"`
	Running        int64           `json:"running"`
	DeadLetters    int64           `json:"dead_letters"`
	Paused         int             `json:"paused"`
	Disabled       int             `json:"disabled"`
	InFlight       int             `json:"in_flight"`
	DeliveriesPerS float64         `json:"deliveries_per_s"`
	Workers        int             `json:"workers"`
	WorkerCapacity int             `json:"worker_capacity"`
	Unowned        []int           `json:"unowned_shards"`
	Attention      []Tenant        `json:"attention"`
	Busiest        []Tenant        `json:"busiest"`
	Raw            json.RawMessage `json:"-"`
}

// KeyInfo is the calling API key (never its secret).
type KeyInfo struct {
	Name    string   `json:"name"`
	Admin   bool     `json:"admin"`
	Tenants []string `json:"tenants"` // the tenant globs it may see
}

func (s *Summary) setRaw(b []byte) { s.Raw = b }

// Summary returns the deployment's summary (GET /v1/summary). The error
// is an *Error matching ErrUnauthorized, ErrRateLimited or
// ErrUnavailable; or ctx's error.
func (c *Client) Summary(ctx context.Context) (*Summary, error) {
	return getJSON[Summary](ctx, c, &request{method: http.MethodGet, path: "/v1/summary"}, "summary")
}

// JobsQuery selects the page TenantJobs returns. Its zero value is the
// first page of queued jobs, oldest first, the API's default size.
type JobsQuery struct {
	State  string // "queued" (""), "delayed", "running" or "dead"
	Newest bool   // newest first; default the next to leave first
	Cursor string // "" for the first page; a page's Cursor goes on
	Limit  int    // 1 to 500; 0 is the API's default (50)
}

// JobsPage is one page of a tenant's jobs in one state. Cursor is "" on
// the last.
type JobsPage struct {
	Jobs   []JobView
	Cursor string
	Raw    json.RawMessage // the API's JSON page
}

// TenantJobs returns a page of tenant's jobs in q.State (GET
// /v1/tenants/{tenant}/jobs). A page of delayed or running jobs may hold
// fewer than the limit and still have a Cursor: follow it until it is "".
// The error is an *Error matching ErrInvalid (a bad state, limit or
// cursor), ErrForbidden, ErrUnauthorized, ErrRateLimited or
// ErrUnavailable; or ctx's error.
func (c *Client) TenantJobs(ctx context.Context, tenant string, q JobsQuery) (*JobsPage, error) {
	v := url.Values{}
	setNonEmpty(v, "state", q.State)
	setNonEmpty(v, "cursor", q.Cursor)
	if q.Newest {
		v.Set("order", "newest")
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	p, err := c.getPage(ctx, &request{method: http.MethodGet, path: pathOf("/v1/tenants", tenant) + "/jobs", query: v}, "jobs", "cursor")
	if err != nil {
		return nil, err
	}
	jobs, err := decodeEach[JobView](p.items, "job")
	if err != nil {
		return nil, err
	}
	return &JobsPage{Jobs: jobs, Cursor: p.cursor, Raw: p.raw}, nil
}

// JobsCancel selects the jobs CancelJobs cancels. Its zero value selects
// every queued then delayed job, 100 listed a call.
type JobsCancel struct {
	State  string    // "queued", "delayed"; "" both
	Event  string    // only webhook jobs of this event; "" any
	Before time.Time // only jobs enqueued before it; zero: any
	Limit  int       // jobs listed a call (1 to 1000); 0: 100
	Cursor string    // "" starts a walk; the previous call's Cursor goes on
}

// CancelResult answers CancelJobs: how many were canceled, and the cursor
// to go on with ("" when the walk is done).
type CancelResult struct {
	Canceled int
	Cursor   string
	Raw      json.RawMessage
}

// CancelJobs cancels the jobs sel selects among tenant's next sel.Limit
// queued or delayed jobs (POST /v1/tenants/{tenant}/jobs:cancel, admin
// keys), each as CancelJob does (callbacks sent); call it again with the
// returned Cursor until it is "". Safe to repeat. It is not retried once
// sent. The error is an *Error matching ErrInvalid (a bad selection or
// cursor), ErrForbidden, ErrUnauthorized, ErrRateLimited or
// ErrUnavailable; or ctx's error.
func (c *Client) CancelJobs(ctx context.Context, tenant string, sel JobsCancel) (*CancelResult, error) {
	body := map[string]any{}
	setBody(body, "state", sel.State)
	setBody(body, "event", sel.Event)
	setBody(body, "cursor", sel.Cursor)
	if !sel.Before.IsZero() {
		body["before"] = sel.Before.UTC().Format(time.RFC3339Nano)
	}
	if sel.Limit != 0 {
		body["limit"] = sel.Limit
	}
	resp, err := c.do(ctx, &request{method: http.MethodPost, path: pathOf("/v1/tenants", tenant) + "/jobs:cancel",
		body: body, mode: retryRefused})
	if err != nil {
		return nil, err
	}
	var r struct {
		Canceled int     `json:"canceled"`
		Cursor   *string `json:"cursor"`
	}
	if err := decode(resp, "cancel result", &r); err != nil {
		return nil, err
	}
	out := &CancelResult{Canceled: r.Canceled, Raw: resp.body}
	if r.Cursor != nil {
		out.Cursor = *r.Cursor
	}
	return out, nil
}

// setBody sets body[key] to v when v is not "".
func setBody(body map[string]any, key, v string) {
	if v != "" {
		body[key] = v
	}
}
