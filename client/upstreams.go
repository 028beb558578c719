package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// UpstreamConfig is an upstream's configuration: what PutUpstream sends and
// what the API shows (with defaults applied). Zero fields are left out of
// a put and take their defaults.
type UpstreamConfig struct {
	Rate        string `json:"rate"`                  // "100/s": required
	Burst       int64  `json:"burst,omitempty"`       // default: one second of rate
	Concurrency int64  `json:"concurrency,omitempty"` // 0: no bound
	Adaptive    bool   `json:"adaptive,omitempty"`
	PauseScope  string `json:"pause_scope,omitempty"` // "tenant" (default) or "upstream"
	CostHeader  string `json:"cost_header,omitempty"`
	Pacing      string `json:"pacing,omitempty"` // "headers" (default) or "off"
}

// Upstream is a shared upstream quota (GET /v1/upstreams/{name}). Raw
// holds the API's JSON, with the runtime state (rate, tokens, waiting jobs
// by tenant) when read by GetUpstream.
type Upstream struct {
	Name string `json:"name"`
	// Version is the configuration's version: PutUpstream's and
	// DeleteUpstream's ifVersion.
	Version     int64          `json:"version"`
	Source      string         `json:"source"` // "config" or "api"
	Config      UpstreamConfig `json:"config"`
	Paused      bool           `json:"paused"`
	PausedUntil *string        `json:"paused_until"`
	PauseReason *string        `json:"pause_reason"` // "manual", "throttled"; nil when not paused
	Runtime     *struct {
		EffectiveRate   float64          `json:"effective_rate"`
		Tokens          int64            `json:"tokens"`
		WaitingByTenant map[string]int64 `json:"waiting_by_tenant"`
		Running         int64            `json:"running"`
	} `json:"runtime"`
	Raw json.RawMessage `json:"-"`
}

func (u *Upstream) setRaw(b []byte) { u.Raw = b }

// UpstreamPage is one page of upstreams, by name. Cursor is "" on the last.
type UpstreamPage struct {
	Upstreams []Upstream
	Cursor    string
	Raw       json.RawMessage
}

// ListUpstreams returns the page of upstreams after cursor ("" for the
// first; GET /v1/upstreams), at most limit (0: the API's default). The
// error is an *Error matching ErrInvalid (a bad limit or cursor),
// ErrUnauthorized, ErrRateLimited or ErrUnavailable; or ctx's error.
func (c *Client) ListUpstreams(ctx context.Context, cursor string, limit int) (*UpstreamPage, error) {
	v := url.Values{}
	setNonEmpty(v, "cursor", cursor)
	if limit != 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	p, err := c.getPage(ctx, &request{method: http.MethodGet, path: "/v1/upstreams", query: v}, "upstreams", "cursor")
	if err != nil {
		return nil, err
	}
	ups, err := decodeEach[Upstream](p.items, "upstream")
	if err != nil {
		return nil, err
	}
	return &UpstreamPage{Upstreams: ups, Cursor: p.cursor, Raw: p.raw}, nil
}

// GetUpstream returns the upstream name with its runtime state (GET
// /v1/upstreams/{name}). The error is an *Error matching ErrNotFound,
// ErrUnauthorized, ErrRateLimited or ErrUnavailable; or ctx's error.
func (c *Client) GetUpstream(ctx context.Context, name string) (*Upstream, error) {
	return getJSON[Upstream](ctx, c, &request{method: http.MethodGet, path: pathOf("/v1/upstreams", name)}, "upstream")
}

// PutUpstream creates or replaces the upstream name's configuration (PUT
// /v1/upstreams/{name}, admin keys; its pause and state are kept), with
// If-Match: the version ifVersion (0: it must not exist yet) unless it is
// AnyVersion. With If-Match it is not retried once sent. The error is an
// *Error matching ErrPreconditionFailed (ifVersion is not the current
// version), ErrInvalid (every problem of cfg in Problems, or a bad name),
// ErrForbidden (not an admin key), ErrUnauthorized, ErrRateLimited or
// ErrUnavailable; or ctx's error.
func (c *Client) PutUpstream(ctx context.Context, name string, cfg UpstreamConfig, ifVersion int64) (*Upstream, error) {
	req := &request{method: http.MethodPut, path: pathOf("/v1/upstreams", name), body: cfg}
	if ifVersion != AnyVersion {
		req.header = http.Header{"If-Match": {`"u` + strconv.FormatInt(ifVersion, 10) + `"`}}
		req.mode = retryRefused
	}
	return getJSON[Upstream](ctx, c, req, "upstream")
}

// DeleteUpstream removes the upstream name (DELETE /v1/upstreams/{name},
// admin keys), with If-Match as PutUpstream's. It is not retried once
// sent. The error is an *Error matching ErrConflict (code
// upstream_in_use: jobs wait on or run under it), ErrPreconditionFailed,
// ErrNotFound, ErrForbidden, ErrUnauthorized, ErrRateLimited or
// ErrUnavailable; or ctx's error.
func (c *Client) DeleteUpstream(ctx context.Context, name string, ifVersion int64) error {
	req := &request{method: http.MethodDelete, path: pathOf("/v1/upstreams", name), mode: retryRefused}
	if ifVersion != AnyVersion {
		req.header = http.Header{"If-Match": {`"u` + strconv.FormatInt(ifVersion, 10) + `"`}}
	}
	_, err := c.do(ctx, req)
	return err
}

// PauseUpstream stops every job naming the upstream from leaving, for any
// tenant (POST /v1/upstreams/{name}/pause, admin keys), for d, or until
// ResumeUpstream when d is 0; it never shortens a pause in force. It
// returns the upstream. The error is an *Error matching ErrInvalid (d
// negative or too long), ErrNotFound, ErrForbidden, ErrUnauthorized,
// ErrRateLimited or ErrUnavailable; or ctx's error.
func (c *Client) PauseUpstream(ctx context.Context, name string, d time.Duration) (*Upstream, error) {
	req := &request{method: http.MethodPost, path: pathOf("/v1/upstreams", name) + "/pause"}
	if d != 0 {
		req.body = map[string]string{"for": d.String()}
	}
	return getJSON[Upstream](ctx, c, req, "upstream")
}

// ResumeUpstream ends the upstream's pause, manual or throttled (POST
// /v1/upstreams/{name}/resume, admin keys), and returns it. The error is
// an *Error matching ErrNotFound, ErrForbidden, ErrUnauthorized,
// ErrRateLimited or ErrUnavailable; or ctx's error.
func (c *Client) ResumeUpstream(ctx context.Context, name string) (*Upstream, error) {
	return getJSON[Upstream](ctx, c, &request{method: http.MethodPost, path: pathOf("/v1/upstreams", name) + "/resume"}, "upstream")
}

// String is the upstream's API JSON.
func (u *Upstream) String() string { return string(u.Raw) }
