package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strings"
)

// AuthConfig lists the API keys. With no keys every /v1 request is refused.
type AuthConfig struct {
	Keys []KeyConfig `yaml:"keys"`
}

// KeyConfig is one API key. Exactly one of SHA256 and Key is set in the
// file; Load hashes a plaintext Key into SHA256 and clears Key, so a loaded
// Config never holds a plaintext key.
type KeyConfig struct {
	// Name identifies the key in logs and metrics; 1–64 characters of
	// [A-Za-z0-9_.-], unique.
	Name string `yaml:"name"`
	// SHA256 is the hex SHA-256 of the key (64 hex digits, either case).
	SHA256 string `yaml:"sha256"`
	// Key is the plaintext key, for local use only.
	Key string `yaml:"key"`
	// Tenants are path.Match glob patterns of the tenant ids the key may
	// act on ("*", "acme-*"); default none.
	Tenants []string `yaml:"tenants"`
	// Limits names the limits the key may check with
	// POST /v1/limits/{name}/check; default none (admin keys may check any).
	Limits []string `yaml:"limits"`
	// Admin allows the admin routes (policy, pause, resume) and checking
	// every limit; default false.
	Admin bool `yaml:"admin"`
	// FromPlaintext is set by Load when the file gave the key in plaintext,
	// so a binary can warn that it is meant for local use.
	FromPlaintext bool `yaml:"-"`
}

// KeySHA256 returns the lower-case hex SHA-256 of the key: SHA256 when set,
// else the hash of Key.
func (k KeyConfig) KeySHA256() string {
	if k.SHA256 != "" {
		return strings.ToLower(k.SHA256)
	}
	return HashKey(k.Key)
}

// HashKey returns the lower-case hex SHA-256 of an API key, the form
// KeySHA256 and ByHash use.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// ByHash maps each key's KeySHA256 to its entry: the API's lookup of a
// presented key is ByHash()[HashKey(presented)].
func (a AuthConfig) ByHash() map[string]KeyConfig {
	m := make(map[string]KeyConfig, len(a.Keys))
	for _, k := range a.Keys {
		m[k.KeySHA256()] = k
	}
	return m
}

// AllowsTenant reports whether one of k.Tenants matches tenant id.
// Admin does not widen it.
func (k KeyConfig) AllowsTenant(id string) bool {
	for _, p := range k.Tenants {
		if ok, _ := path.Match(p, id); ok {
			return true
		}
	}
	return false
}

// AllowsLimit reports whether k may check the limit called name: an admin
// key any, another key those in k.Limits; the reserved APILimitName never.
func (k KeyConfig) AllowsLimit(name string) bool {
	if name == APILimitName {
		return false
	}
	return k.Admin || slices.Contains(k.Limits, name)
}

// hashPlaintextKeys replaces each plaintext key by its hash, unless the entry
// also has SHA256 (an error validate reports).
func (a *AuthConfig) hashPlaintextKeys() {
	for i := range a.Keys {
		k := &a.Keys[i]
		if k.Key != "" && k.SHA256 == "" {
			k.SHA256, k.Key, k.FromPlaintext = HashKey(k.Key), "", true
		}
	}
}

func (a AuthConfig) validate(p *problems, limits map[string]LimitConfig) {
	names := map[string]int{}
	hashes := map[string]int{}
	for i, k := range a.Keys {
		at := fmt.Sprintf("auth.keys[%d]", i)
		if !validName(k.Name) {
			p.add(at+".name", "%s, got %q", nameRule, k.Name)
		} else if j, dup := names[k.Name]; dup {
			p.add(at+".name", "%q is also the name of auth.keys[%d]", k.Name, j)
		} else {
			names[k.Name] = i
		}
		switch {
		case k.SHA256 != "" && k.Key != "":
			p.add(at, "set one of sha256 and key, not both")
		case k.SHA256 == "" && k.Key == "":
			p.add(at, "set one of sha256 and key")
		case k.SHA256 != "" && !isSHA256Hex(k.SHA256):
			p.add(at+".sha256", "must be 64 hex digits")
		default:
			if j, dup := hashes[k.KeySHA256()]; dup {
				p.add(at, "same key as auth.keys[%d]", j)
			} else {
				hashes[k.KeySHA256()] = i
			}
		}
		for j, pattern := range k.Tenants {
			if _, err := path.Match(pattern, ""); err != nil || pattern == "" {
				p.add(fmt.Sprintf("%s.tenants[%d]", at, j), "%q is not a glob pattern", pattern)
			}
		}
		for j, name := range k.Limits {
			jpath := fmt.Sprintf("%s.limits[%d]", at, j)
			if name == APILimitName {
				p.add(jpath, "%q is reserved for the API's own limiter and cannot be checked", name)
			} else if _, ok := limits[name]; !ok {
				p.add(jpath, "no limit named %q in limits", name)
			}
		}
	}
}

func isSHA256Hex(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == sha256.Size
}

// WarnPlaintextKeys logs a warning for each key given in plaintext (its
// name, never the key): fine for local use, not for production.
func (a AuthConfig) WarnPlaintextKeys(log *slog.Logger) {
	for _, k := range a.Keys {
		if k.FromPlaintext {
			log.Warn("API key given in plaintext: for local use only, list it by sha256 in production", "key", k.Name)
		}
	}
}
