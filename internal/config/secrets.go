package config

import (
	"fmt"
	"log/slog"

	"github.com/sluicehq/sluice/internal/secretbox"
)

// Environment variables of SecretsConfig.
const (
	EnvSecretsKey   = "SLUICE_SECRETS_KEY"    // overrides secrets.key
	EnvSecretsKeyID = "SLUICE_SECRETS_KEY_ID" // overrides secrets.key_id
)

// SecretsKeyIDDefault is SecretsConfig.KeyID's default.
const SecretsKeyIDDefault = "k1"

// SecretsConfig configures webhook secrets by API (POST
// /v1/tenants/{t}/secrets): the AES-256-GCM key that encrypts them in Redis
// (internal/secretbox), and the guard against one secret shared by every
// tenant. Both binaries need the same keys: the throttler seals, the worker
// opens. fmt and slog print a SecretsConfig without its keys.
type SecretsConfig struct {
	// Key is the standard base64 of 32 random bytes (`openssl rand -base64
	// 32`) that encrypts new secrets; $SLUICE_SECRETS_KEY overrides it.
	// Empty (the default): secrets by API are off — their routes answer
	// 503 — and only the configuration's webhook_secrets sign.
	Key string `yaml:"key"`
	// KeyID names Key inside every value it encrypts, so that after a
	// rotation the value says which key opens it; 1–32 characters of
	// [A-Za-z0-9_.-]; default SecretsKeyIDDefault. $SLUICE_SECRETS_KEY_ID
	// overrides it.
	KeyID string `yaml:"key_id"`
	// PreviousKeys still open values encrypted before a rotation; they
	// never encrypt. Rotate by moving the old key here (with its id) and
	// setting a new Key and KeyID; default none.
	PreviousKeys []SecretKeyConfig `yaml:"previous_keys"`
	// AllowSharedSecret permits defaults.webhook_secrets: a secret every
	// tenant without its own is signed with, shared by all of them. Default
	// false: such a secret is a configuration error.
	AllowSharedSecret bool `yaml:"allow_shared_secret"`
}

// SecretKeyConfig is one previous key: its id and base64 key.
type SecretKeyConfig struct {
	ID  string `yaml:"id"`
	Key string `yaml:"key"`
}

// String implements fmt.Stringer without the keys.
func (c SecretsConfig) String() string {
	return fmt.Sprintf("{key set: %v, key_id: %q, previous_keys: %d, allow_shared_secret: %v}",
		c.Key != "", c.KeyID, len(c.PreviousKeys), c.AllowSharedSecret)
}

// GoString implements fmt.GoStringer without the keys.
func (c SecretsConfig) GoString() string { return c.String() }

// LogValue implements slog.LogValuer without the keys.
func (c SecretsConfig) LogValue() slog.Value { return slog.StringValue(c.String()) }

// Enabled reports whether a key is configured.
func (c SecretsConfig) Enabled() bool { return c.Key != "" }

// Keyring builds the keyring: Key (as KeyID) first, then PreviousKeys. Nil
// without a Key (secrets by API are off). Errors never contain a key.
func (c SecretsConfig) Keyring() (*secretbox.Keyring, error) {
	if c.Key == "" {
		return nil, nil
	}
	keys := make([]secretbox.Key, 0, 1+len(c.PreviousKeys))
	k, err := secretbox.ParseKey(c.KeyID, c.Key)
	if err != nil {
		return nil, err
	}
	keys = append(keys, k)
	for _, pk := range c.PreviousKeys {
		k, err := secretbox.ParseKey(pk.ID, pk.Key)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return secretbox.NewKeyring(keys...)
}

func (c SecretsConfig) withDefaults() SecretsConfig {
	out := c
	out.PreviousKeys = append([]SecretKeyConfig(nil), c.PreviousKeys...)
	if out.KeyID == "" {
		out.KeyID = SecretsKeyIDDefault
	}
	return out
}

// validate checks the keys (without showing them) and refuses a shared
// defaults secret unless allowed.
func (c SecretsConfig) validate(p *problems, defaultSecrets int) {
	if defaultSecrets > 0 && !c.AllowSharedSecret {
		p.add("defaults.webhook_secrets", "a secret in defaults signs every tenant without its own, "+
			"shared by all of them: give each tenant its own (tenants.<id>.webhook_secrets, or POST /v1/tenants/{t}/secrets), "+
			"or set secrets.allow_shared_secret: true")
	}
	if c.Key == "" {
		if len(c.PreviousKeys) > 0 {
			p.add("secrets.previous_keys", "need secrets.key (or $%s): previous keys only open", EnvSecretsKey)
		}
		return
	}
	if _, err := secretbox.ParseKey(c.KeyID, c.Key); err != nil {
		p.add("secrets.key", "%w (want the standard base64 of %d random bytes)", err, secretbox.KeyBytes)
	}
	seen := map[string]bool{c.KeyID: true}
	for i, pk := range c.PreviousKeys {
		path := fmt.Sprintf("secrets.previous_keys[%d]", i)
		if _, err := secretbox.ParseKey(pk.ID, pk.Key); err != nil {
			p.add(path, "%w", err)
		}
		if seen[pk.ID] {
			p.add(path+".id", "%q is used by another key", pk.ID)
		}
		seen[pk.ID] = true
	}
}
