package policy

import (
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// Webhook signing secrets, per Standard Webhooks: "whsec_" followed by the
// standard (padded) base64 of 24 to 64 random bytes.
const (
	SecretPrefix      = "whsec_"
	MinSecretBytes    = 24
	MaxSecretBytes    = 64
	MaxWebhookSecrets = 10 // secrets active at once; each adds a signature to every delivery
)

// Secrets is a tenant's webhook signing secrets, several during a rotation;
// every delivery is signed with each. JSON and YAML carry the strings (this is
// the storage form), but fmt and slog print only the count, so a logged
// Policy or Overrides does not leak them; API views use View.
type Secrets []string

// String implements fmt.Stringer without revealing the secrets.
func (s Secrets) String() string { return fmt.Sprintf("[%d secrets]", len(s)) }

// GoString implements fmt.GoStringer without revealing the secrets.
func (s Secrets) GoString() string { return s.String() }

// LogValue implements slog.LogValuer without revealing the secrets.
func (s Secrets) LogValue() slog.Value { return slog.IntValue(len(s)) }

// Keys decodes every secret into its key bytes, in order.
func (s Secrets) Keys() ([][]byte, error) {
	keys := make([][]byte, 0, len(s))
	for i, v := range s {
		k, err := ParseWebhookSecret(v)
		if err != nil {
			return nil, fmt.Errorf("webhook secret %d: %w", i, err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// ErrInvalidSecret is wrapped by every error ParseWebhookSecret returns.
var ErrInvalidSecret = errors.New("invalid webhook secret")

// ParseWebhookSecret returns the key bytes of a "whsec_<base64>" secret. The
// base64 must be canonical standard encoding (padded, no line breaks) of
// MinSecretBytes to MaxSecretBytes bytes. The error never contains the secret.
func ParseWebhookSecret(s string) ([]byte, error) {
	body, ok := strings.CutPrefix(s, SecretPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: must start with %q", ErrInvalidSecret, SecretPrefix)
	}
	key, err := base64.StdEncoding.Strict().DecodeString(body)
	if err != nil || base64.StdEncoding.EncodeToString(key) != body {
		return nil, fmt.Errorf("%w: not standard base64 after %q", ErrInvalidSecret, SecretPrefix)
	}
	if len(key) < MinSecretBytes || len(key) > MaxSecretBytes {
		return nil, fmt.Errorf("%w: key is %d bytes, want %d to %d", ErrInvalidSecret, len(key), MinSecretBytes, MaxSecretBytes)
	}
	return key, nil
}

// SigningKeys resolves the webhook signing keys of every tenant in tenants
// (Resolve(defaults, tenants[id])) and, for any other tenant, of defaults
// alone, and the largest attempt timeout among those policies. keys is safe
// for concurrent use. Secrets live only in the configuration, never in
// Redis; the error names the tenant whose secret is invalid.
func SigningKeys(defaults Overrides, tenants map[string]Overrides) (keys func(tenant string) [][]byte, maxTimeout time.Duration, err error) {
	base := Resolve(defaults)
	defaultKeys, err := base.WebhookSecrets.Keys()
	if err != nil {
		return nil, 0, fmt.Errorf("defaults: %w", err)
	}
	maxTimeout = base.Timeout
	byTenant := make(map[string][][]byte, len(tenants))
	for tenant, o := range tenants {
		p := Resolve(defaults, o)
		if byTenant[tenant], err = p.WebhookSecrets.Keys(); err != nil {
			return nil, 0, fmt.Errorf("tenant %q: %w", tenant, err)
		}
		maxTimeout = max(maxTimeout, p.Timeout)
	}
	return func(tenant string) [][]byte {
		if k, ok := byTenant[tenant]; ok {
			return k
		}
		return defaultKeys
	}, maxTimeout, nil
}
