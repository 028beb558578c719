package client

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// APIKey is an API key as GET /v1/keys lists it: never the key or its
// hash. Key (the bearer token) is set only by CreateKey's answer.
type APIKey struct {
	Name    string   `json:"name"`
	Source  string   `json:"source"` // "config" (the file's) or "api"
	Tenants []string `json:"tenants"`
	Limits  []string `json:"limits"`
	Admin   bool     `json:"admin"`
	// CreatedAt is when CreateKey made it; nil for a key of the file.
	CreatedAt *string `json:"created_at"`
	// ExpiresAt is when every throttler starts refusing it; nil: never.
	ExpiresAt *string `json:"expires_at"`
	Expired   bool    `json:"expired"`
	// LastUsedAt is the last request it authenticated, as the throttlers
	// write it about every 0.5 s; nil: not seen yet.
	LastUsedAt *string `json:"last_used_at"`
	Key        string  `json:"key,omitempty"`
	// Raw is the API's JSON for the key.
	Raw json.RawMessage `json:"-"`
}

func (k *APIKey) setRaw(b []byte) { k.Raw = b }

// KeyOptions shape CreateKey. The zero value makes a key that may act on
// no tenant and never expires.
type KeyOptions struct {
	// Tenants are glob patterns of the tenant ids the key may act on.
	Tenants []string
	// Limits are the checkable limits the key may check.
	Limits []string
	// Admin allows the admin routes.
	Admin bool
	// ExpiresAt, when not zero, is when every throttler starts refusing
	// the key; it must be in the future.
	ExpiresAt time.Time
}

// CreateKey makes the API key name (POST /v1/keys, admin keys) and returns
// it with Key, the bearer token, shown this once. Every throttler accepts
// it within a second. It is not retried once sent. The error is an *Error
// matching ErrConflict (a key of the file or by API has the name),
// ErrInvalid (a bad name, glob, limit or expiry), ErrForbidden,
// ErrUnauthorized, ErrRateLimited or ErrUnavailable; or ctx's error.
func (c *Client) CreateKey(ctx context.Context, name string, o KeyOptions) (*APIKey, error) {
	body := map[string]any{"name": name, "tenants": o.Tenants, "limits": o.Limits, "admin": o.Admin}
	if !o.ExpiresAt.IsZero() {
		body["expires_at"] = o.ExpiresAt.UTC().Format(time.RFC3339Nano)
	}
	return getJSON[APIKey](ctx, c, &request{method: http.MethodPost, path: "/v1/keys", body: body, mode: retryRefused}, "key")
}

// Keys lists every API key (GET /v1/keys, admin keys): the file's, then
// those made by the API, each by name, with its last use. Errors as
// CreateKey's, less ErrConflict and ErrInvalid.
func (c *Client) Keys(ctx context.Context) ([]APIKey, error) {
	p, err := c.getPage(ctx, &request{method: http.MethodGet, path: "/v1/keys"}, "keys", "cursor")
	if err != nil {
		return nil, err
	}
	return decodeEach[APIKey](p.items, "key")
}

// DeleteKey revokes the API key name made by the API (DELETE
// /v1/keys/{name}, admin keys); every throttler refuses it within a
// second. The error is an *Error matching ErrConflict (a key of the
// configuration file: change the file and reload), ErrNotFound,
// ErrForbidden, ErrUnauthorized or ErrRateLimited; or ctx's error.
func (c *Client) DeleteKey(ctx context.Context, name string) error {
	_, err := c.do(ctx, &request{method: http.MethodDelete, path: pathOf("/v1/keys", name), mode: retryRefused})
	return err
}

// Reload makes the throttler re-read its configuration file (POST
// /v1/admin/reload, admin keys), as SIGHUP does, and returns what changed,
// one line per key (never a value). A file with problems is refused as a
// whole: an *Error matching ErrInvalid whose Problems list every one (the
// running configuration is kept). Also ErrForbidden, ErrUnauthorized,
// ErrRateLimited, ErrUnavailable; or ctx's error.
func (c *Client) Reload(ctx context.Context) ([]string, error) {
	v, err := getJSON[struct {
		Changes []string `json:"changes"`
	}](ctx, c, &request{method: http.MethodPost, path: "/v1/admin/reload", mode: retryRefused}, "reload")
	if err != nil {
		return nil, err
	}
	return v.Changes, nil
}
