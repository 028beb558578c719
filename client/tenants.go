package client

import (
	"context"
	"encoding/json"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Tenant is a tenant's state and effective policy (GET /v1/tenants/{tenant}
// and each item of the tenant list). Raw holds the API's JSON.
type Tenant struct {
	Tenant string `json:"tenant"`
	// Version is the version of the tenant's policy overrides (0: none);
	// PutPolicy's If-Match.
	Version int64 `json:"version"`
	// Policy is the effective policy (rate, burst, concurrency, admit,
	// retry, …) as the API shows it.
	Policy           json.RawMessage `json:"policy"`
	Backlog          int64           `json:"backlog"`
	BacklogBytes     int64           `json:"backlog_bytes"`
	Queued           int64           `json:"queued"`
	Running          int64           `json:"running"`
	Released         int64           `json:"released"`
	AdmitTokens      int64           `json:"admit_tokens"`
	NextEligibleAt   *string         `json:"next_eligible_at"`
	PausedUntil      *string         `json:"paused_until"`
	AdminPaused      bool            `json:"admin_paused"`
	AdminPausedUntil *string         `json:"admin_paused_until"`
	Disabled         bool            `json:"disabled"`
	DeadLetters      int64           `json:"dead_letters"`
	EffectiveRate    float64         `json:"effective_rate"` // tokens per second
	RateFactor       float64         `json:"rate_factor"`
	OldestJobAgeS    *float64        `json:"oldest_job_age_s"`
	DrainETAS        *float64        `json:"drain_eta_s"`
	InflowPerS       float64         `json:"inflow_per_s"`
	Draining         bool            `json:"draining"`
	Raw              json.RawMessage `json:"-"`
}

func (t *Tenant) setRaw(b []byte) { t.Raw = b }

// TenantQuery selects and orders the tenants ListTenants returns. Its zero
// value lists every tenant the key may see, by name.
type TenantQuery struct {
	// Sort is "name" (default), "backlog" (largest first) or "oldest"
	// (oldest queued job first).
	Sort string
	// State keeps only "paused", "disabled" or "active" tenants; "" all.
	State string
	// Prefix keeps only tenants whose id begins with it.
	Prefix string
	// Limit is the page size (1 to 1000); 0 is the API's default (50).
	Limit int
}

// TenantPage is one page of the tenant list. Cursor is "" on the last.
type TenantPage struct {
	Tenants []Tenant
	Cursor  string
	Raw     json.RawMessage // the API's JSON page
}

// ListTenants returns the page of tenants after cursor ("" for the first;
// GET /v1/tenants). The error is an *Error matching ErrInvalid (a bad
// sort, state, prefix, limit or cursor), ErrUnauthorized, ErrRateLimited
// or ErrUnavailable after the retries; or ctx's error. Tenants iterates
// over every page.
func (c *Client) ListTenants(ctx context.Context, q TenantQuery, cursor string) (*TenantPage, error) {
	v := url.Values{}
	setNonEmpty(v, "sort", q.Sort)
	setNonEmpty(v, "state", q.State)
	setNonEmpty(v, "prefix", q.Prefix)
	setNonEmpty(v, "cursor", cursor)
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	p, err := c.getPage(ctx, &request{method: http.MethodGet, path: "/v1/tenants", query: v}, "tenants", "cursor")
	if err != nil {
		return nil, err
	}
	tenants, err := decodeEach[Tenant](p.items, "tenant")
	if err != nil {
		return nil, err
	}
	return &TenantPage{Tenants: tenants, Cursor: p.cursor, Raw: p.raw}, nil
}

// Tenants iterates over every tenant q selects, page after page along the
// API's cursors (one request a page, made as the loop reaches it). Each
// tenant appears once while nothing changes. A failed request ends the
// iteration with its error (ListTenants's), as the last pair:
//
//	for t, err := range c.Tenants(ctx, client.TenantQuery{Sort: "backlog"}) {
//		if err != nil { return err }
//		…
//	}
func (c *Client) Tenants(ctx context.Context, q TenantQuery) iter.Seq2[*Tenant, error] {
	return func(yield func(*Tenant, error) bool) {
		cursor := ""
		for {
			page, err := c.ListTenants(ctx, q, cursor)
			if err != nil {
				yield(nil, err)
				return
			}
			for i := range page.Tenants {
				if !yield(&page.Tenants[i], nil) {
					return
				}
			}
			if page.Cursor == "" {
				return
			}
			cursor = page.Cursor
		}
	}
}

// GetTenant returns tenant's state and effective policy (GET
// /v1/tenants/{tenant}); a tenant never seen has zeros and the defaults.
// The error is an *Error matching ErrForbidden (the key may not see the
// tenant), ErrInvalid (a malformed tenant id), ErrUnauthorized,
// ErrRateLimited or ErrUnavailable; or ctx's error.
func (c *Client) GetTenant(ctx context.Context, tenant string) (*Tenant, error) {
	return getJSON[Tenant](ctx, c, &request{method: http.MethodGet, path: pathOf("/v1/tenants", tenant)}, "tenant")
}

// PolicyResult answers PutPolicy: the tenant's new version and effective
// policy.
type PolicyResult struct {
	Tenant  string          `json:"tenant"`
	Version int64           `json:"version"`
	Policy  json.RawMessage `json:"policy"`
	Raw     json.RawMessage `json:"-"`
}

func (p *PolicyResult) setRaw(b []byte) { p.Raw = b }

// AnyVersion as PutPolicy's ifVersion replaces the overrides whatever
// their version.
const AnyVersion int64 = -1

// PutPolicy replaces tenant's policy overrides (PUT
// /v1/tenants/{tenant}/policy, admin keys) with overrides, a JSON object
// of the policy's fields ({"rate": "10/s", "burst": 20, "retry":
// {"max_attempts": 5}}; any value encoding/json turns into one), sent with
// If-Match: ifVersion, the version GetTenant returned (0: the tenant has
// no overrides yet), unless it is AnyVersion. With If-Match it is not
// retried once sent. The error is an *Error matching ErrConflict (the
// version is not the current one: read it again), ErrInvalid (every
// problem of the merged policy in Problems), ErrForbidden (not an admin
// key, or not the key's tenant), ErrUnauthorized, ErrRateLimited or
// ErrUnavailable; or ctx's error.
func (c *Client) PutPolicy(ctx context.Context, tenant string, overrides any, ifVersion int64) (*PolicyResult, error) {
	req := &request{method: http.MethodPut, path: pathOf("/v1/tenants", tenant) + "/policy", body: overrides}
	if ifVersion != AnyVersion {
		req.header = http.Header{"If-Match": {strconv.Quote(strconv.FormatInt(ifVersion, 10))}}
		req.mode = retryRefused
	}
	return getJSON[PolicyResult](ctx, c, req, "policy")
}

// PauseTenant stops tenant's jobs from leaving (POST
// /v1/tenants/{tenant}/pause, admin keys) until until, or until
// ResumeTenant when until is zero; enqueues are still accepted. It returns
// the tenant. The error is an *Error matching ErrInvalid (until not in the
// future), ErrForbidden, ErrUnauthorized, ErrRateLimited or
// ErrUnavailable; or ctx's error.
func (c *Client) PauseTenant(ctx context.Context, tenant string, until time.Time) (*Tenant, error) {
	req := &request{method: http.MethodPost, path: pathOf("/v1/tenants", tenant) + "/pause"}
	if !until.IsZero() {
		req.body = map[string]string{"until": until.UTC().Format(time.RFC3339Nano)}
	}
	return getJSON[Tenant](ctx, c, req, "tenant")
}

// ResumeTenant ends tenant's pause, an upstream's pause of it and a 410
// disable (POST /v1/tenants/{tenant}/resume, admin keys) and returns the
// tenant. The error is an *Error matching ErrForbidden, ErrUnauthorized,
// ErrRateLimited or ErrUnavailable; or ctx's error.
func (c *Client) ResumeTenant(ctx context.Context, tenant string) (*Tenant, error) {
	return getJSON[Tenant](ctx, c, &request{method: http.MethodPost, path: pathOf("/v1/tenants", tenant) + "/resume"}, "tenant")
}

// TenantLive is GET /v1/tenants/{tenant}/live: the tenant, its recent
// series and attempts, as the console's tenant page draws them.
type TenantLive struct {
	Tenant         Tenant            `json:"tenant"`
	Points         []json.RawMessage `json:"points"`
	RecentAttempts []json.RawMessage `json:"recent_attempts"`
	Raw            json.RawMessage   `json:"-"`
}

func (l *TenantLive) setRaw(b []byte) { l.Raw = b }

// TenantLive returns tenant's live view, the points after since (a
// point's "at" in Unix milliseconds; 0 for all kept). The error is an
// *Error matching ErrForbidden, ErrInvalid, ErrUnauthorized,
// ErrRateLimited or ErrUnavailable; or ctx's error.
func (c *Client) TenantLive(ctx context.Context, tenant string, since int64) (*TenantLive, error) {
	req := &request{method: http.MethodGet, path: pathOf("/v1/tenants", tenant) + "/live"}
	if since > 0 {
		req.query = url.Values{"since": {strconv.FormatInt(since, 10)}}
	}
	return getJSON[TenantLive](ctx, c, req, "tenant live view")
}

func setNonEmpty(v url.Values, k, s string) {
	if s != "" {
		v.Set(k, s)
	}
}

// String is the tenant's API JSON.
func (t *Tenant) String() string { return string(t.Raw) }
