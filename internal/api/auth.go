package api

import (
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/config"
)

// keyring finds API keys by the SHA-256 of the presented token; it never
// holds a key itself.
type keyring map[string]config.KeyConfig

// authenticate returns the key for r's bearer token, or a 401.
func (kr keyring) authenticate(r *http.Request) (*config.KeyConfig, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return nil, errorf(http.StatusUnauthorized, CodeUnauthorized, "missing Authorization: Bearer <api key>")
	}
	scheme, token, ok := strings.Cut(h, " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return nil, errorf(http.StatusUnauthorized, CodeUnauthorized, "Authorization must be Bearer <api key>")
	}
	k, found := kr[config.HashKey(token)]
	if !found {
		return nil, errorf(http.StatusUnauthorized, CodeUnauthorized, "unknown API key")
	}
	return &k, nil
}
