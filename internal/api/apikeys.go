package api

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/store"
)

// API keys by API (admin keys): POST /v1/keys, GET /v1/keys, DELETE
// /v1/keys/{name}. A key is shown only in the answer to the POST that made
// it; Redis holds its SHA-256 (store.CreateAPIKey). Keys from the
// configuration file are listed with source "config" and are changed only
// in the file (a DELETE is 409 conflict).

// GeneratedAPIKeyBytes is the randomness of a key the API makes; the key is
// APIKeyPrefix and these bytes in unpadded base64url.
const (
	GeneratedAPIKeyBytes = 32
	APIKeyPrefix         = "sk_"
)

// Sources of a listed key.
const (
	KeySourceConfig = "config"
	KeySourceAPI    = "api"
)

// keyRequest is the body of POST /v1/keys.
type keyRequest struct {
	Name      string   `json:"name"`
	Tenants   []string `json:"tenants"`
	Limits    []string `json:"limits"`
	Admin     bool     `json:"admin"`
	ExpiresAt *string  `json:"expires_at"` // RFC 3339, in the future; null: never
}

// apiKeyListed is one key as GET /v1/keys lists it: never the key or its hash.
type apiKeyListed struct {
	Name      string   `json:"name"`
	Source    string   `json:"source"`
	Tenants   []string `json:"tenants"`
	Limits    []string `json:"limits"`
	Admin     bool     `json:"admin"`
	CreatedAt *string  `json:"created_at"` // null for a key from the file
	ExpiresAt *string  `json:"expires_at"` // null: never
	Expired   bool     `json:"expired"`
	LastUsed  *string  `json:"last_used_at"` // null: never seen; written by each throttler every key_refresh
}

// keyCreated answers POST /v1/keys: the only time the key is shown.
type keyCreated struct {
	apiKeyListed
	Key string `json:"key"`
}

type keyList struct {
	Keys []apiKeyListed `json:"keys"`
}

func adminOnly(c *call) error {
	if !c.key.Admin {
		return errorf(http.StatusForbidden, CodeForbidden, "API key %q is not an admin key", c.key.Name)
	}
	return nil
}

// createKey is POST /v1/keys (admin keys): 201 with the new key, shown
// once; 409 when a key of the file or by API has the name; 422 for a bad
// field. Every throttler accepts it within its key refresh (this one at
// once).
func (s *Server) createKey(r *http.Request, c *call) (int, any, error) {
	if err := adminOnly(c); err != nil {
		return 0, nil, err
	}
	var req keyRequest
	if err := decodeJSON(c.w, r, s.opts.MaxBodyBytes, &req); err != nil {
		return 0, nil, err
	}
	now := time.Now()
	expires, err := s.checkKeyRequest(req, now)
	if err != nil {
		return 0, nil, err
	}
	if s.keys.fileKey(req.Name) {
		return 0, nil, errorf(http.StatusConflict, CodeConflict, "name: the configuration file has a key %q", req.Name)
	}
	raw := make([]byte, GeneratedAPIKeyBytes)
	if _, err := rand.Read(raw); err != nil {
		return 0, nil, fmt.Errorf("make an API key: %w", err)
	}
	token := APIKeyPrefix + base64.RawURLEncoding.EncodeToString(raw)
	k := store.APIKey{Name: req.Name, SHA256: config.HashKey(token), Tenants: req.Tenants, Limits: req.Limits,
		Admin: req.Admin, Created: now, Expires: expires}
	err = s.opts.Store.CreateAPIKey(r.Context(), k)
	if errors.Is(err, store.ErrConflict) {
		return 0, nil, errorf(http.StatusConflict, CodeConflict, "name: a key by API is called %q; delete it first", req.Name)
	}
	if err != nil {
		return 0, nil, s.storeError(r, "create_key", err)
	}
	if err := s.keys.reload(r.Context(), s.opts.Store); err != nil { // this throttler: at once
		s.opts.Logger.WarnContext(r.Context(), "read API keys after a create; the refresh retries", "err", err)
	}
	return http.StatusCreated, keyCreated{apiKeyListed: apiKeyView(k, time.Time{}, now), Key: token}, nil
}

// checkKeyRequest reports every problem of req at once (422) and returns
// its expiry (zero: never).
func (s *Server) checkKeyRequest(req keyRequest, now time.Time) (time.Time, error) {
	var problems []string
	if store.ValidAPIKeyName(req.Name) != nil {
		problems = append(problems, fmt.Sprintf("name: want 1 to 64 characters of [A-Za-z0-9_.-], got %q", req.Name))
	}
	for i, p := range req.Tenants {
		if _, err := path.Match(p, ""); err != nil || p == "" {
			problems = append(problems, fmt.Sprintf("tenants[%d]: %q is not a glob pattern", i, p))
		}
	}
	for i, name := range req.Limits {
		if _, ok := s.rt().Limits[name]; !ok {
			problems = append(problems, fmt.Sprintf("limits[%d]: no checkable limit named %q", i, name))
		}
	}
	var expires time.Time
	if req.ExpiresAt != nil {
		t, err := time.Parse(time.RFC3339Nano, *req.ExpiresAt)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("expires_at: not an RFC 3339 time: %q", *req.ExpiresAt))
		case !t.After(now):
			problems = append(problems, fmt.Sprintf("expires_at: %s is not in the future", *req.ExpiresAt))
		default:
			expires = t
		}
	}
	if len(problems) > 0 {
		return time.Time{}, errorf(http.StatusUnprocessableEntity, CodeInvalid, "%s", strings.Join(problems, "; "))
	}
	return expires, nil
}

// listKeys is GET /v1/keys (admin keys): every key of the file, then every
// key by API, by name, with its last use.
func (s *Server) listKeys(r *http.Request, c *call) (int, any, error) {
	if err := adminOnly(c); err != nil {
		return 0, nil, err
	}
	keys, _, err := s.opts.Store.APIKeys(r.Context())
	if err != nil {
		return 0, nil, s.storeError(r, "list_keys", err)
	}
	used, err := s.opts.Store.APIKeysUsed(r.Context())
	if err != nil {
		return 0, nil, s.storeError(r, "list_keys", err)
	}
	out := keyList{Keys: []apiKeyListed{}}
	now := time.Now()
	for _, k := range *s.keys.file.Load() {
		out.Keys = append(out.Keys, apiKeyListed{Name: k.Name, Source: KeySourceConfig, Tenants: nonNil(k.Tenants),
			Limits: nonNil(k.Limits), Admin: k.Admin, LastUsed: timeString(used[k.Name])})
	}
	slices.SortFunc(out.Keys, func(a, b apiKeyListed) int { return strings.Compare(a.Name, b.Name) })
	for _, k := range keys {
		out.Keys = append(out.Keys, apiKeyView(k, used[k.Name], now))
	}
	return http.StatusOK, out, nil
}

// deleteKey is DELETE /v1/keys/{name} (admin keys): revokes a key by API
// (204); every throttler refuses it within its key refresh, this one at
// once. 409 for a key of the configuration file, 404 for none.
func (s *Server) deleteKey(r *http.Request, c *call) (int, any, error) {
	if err := adminOnly(c); err != nil {
		return 0, nil, err
	}
	name := r.PathValue("name")
	if store.ValidAPIKeyName(name) != nil {
		return 0, nil, errorf(http.StatusUnprocessableEntity, CodeInvalid, "name: want 1 to 64 characters of [A-Za-z0-9_.-], got %q", name)
	}
	if s.keys.fileKey(name) {
		return 0, nil, errorf(http.StatusConflict, CodeConflict,
			"key %q comes from the configuration file: remove it there and reload (SIGHUP or POST /v1/admin/reload)", name)
	}
	err := s.opts.Store.DeleteAPIKey(r.Context(), name)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil, errorf(http.StatusNotFound, CodeNotFound, "no API key %q", name)
	}
	if err != nil {
		return 0, nil, s.storeError(r, "delete_key", err)
	}
	if err := s.keys.reload(r.Context(), s.opts.Store); err != nil {
		s.opts.Logger.WarnContext(r.Context(), "read API keys after a delete; the refresh retries", "err", err)
	}
	return http.StatusNoContent, nil, nil
}

func apiKeyView(k store.APIKey, used, now time.Time) apiKeyListed {
	v := apiKeyListed{Name: k.Name, Source: KeySourceAPI, Tenants: nonNil(k.Tenants), Limits: nonNil(k.Limits), Admin: k.Admin,
		CreatedAt: timeString(k.Created), ExpiresAt: timeString(k.Expires), LastUsed: timeString(used)}
	v.Expired = !k.Expires.IsZero() && !now.Before(k.Expires)
	return v
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
