package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// API keys by API (POST /v1/keys): one hash in its own slot (keys.go,
// {apikeys}:k) holding a JSON record per key name — the key's SHA-256,
// never the key — and a version "~v" bumped by every write, so a throttler
// polls one small value and reads the hash only when it changed. Their last
// use, by name (keys from the file too), is a second hash in the same slot,
// written in batches by the throttlers (TouchAPIKeys).

// apiKeysVersionField is the version field of the API keys hash; no key
// name (ValidAPIKeyName) can be it.
const apiKeysVersionField = "~v"

// APIKey is one API key by API as stored.
type APIKey struct {
	Name    string
	SHA256  string   // lower-case hex SHA-256 of the key
	Tenants []string // path.Match globs of the tenants it may act on
	Limits  []string // the checkable limits it may check
	Admin   bool
	Created time.Time
	Expires time.Time // zero: never
}

// apiKeyRecord is APIKey's JSON in Redis, times in Unix µs.
type apiKeyRecord struct {
	SHA256  string   `json:"sha256"`
	Tenants []string `json:"tenants,omitempty"`
	Limits  []string `json:"limits,omitempty"`
	Admin   bool     `json:"admin,omitempty"`
	Created int64    `json:"created"`
	Expires int64    `json:"expires,omitempty"`
}

var apiKeyName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ValidAPIKeyName checks an API key name: 1–64 characters of
// [A-Za-z0-9_.-], as in the configuration file. The error wraps ErrInvalid.
func ValidAPIKeyName(name string) error {
	if !apiKeyName.MatchString(name) {
		return invalidf("API key name %q: want 1 to 64 characters of [A-Za-z0-9_.-]", name)
	}
	return nil
}

// CreateAPIKey stores k. ErrConflict when a key by API has its name;
// ErrInvalid for a bad name or hash.
func (s *Store) CreateAPIKey(ctx context.Context, k APIKey) error {
	err := ValidAPIKeyName(k.Name)
	if !sha256Hex.MatchString(k.SHA256) {
		err = errors.Join(err, invalidf("API key hash: want 64 lower-case hex digits"))
	}
	if err != nil {
		return fmt.Errorf("create API key %q: %w", k.Name, err)
	}
	rec := apiKeyRecord{SHA256: k.SHA256, Tenants: k.Tenants, Limits: k.Limits, Admin: k.Admin, Created: k.Created.UnixMicro()}
	if !k.Expires.IsZero() {
		rec.Expires = k.Expires.UnixMicro()
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("create API key %q: %w", k.Name, err)
	}
	var added *redis.BoolCmd
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		added = p.HSetNX(ctx, s.keys.apiKeys(), k.Name, raw)
		p.HIncrBy(ctx, s.keys.apiKeys(), apiKeysVersionField, 1)
		return nil
	})
	switch {
	case err != nil:
		return fmt.Errorf("create API key %q: %w", k.Name, err)
	case !added.Val():
		return fmt.Errorf("create API key %q: %w: the name is taken", k.Name, ErrConflict)
	}
	return nil
}

// DeleteAPIKey removes the key by API called name and its last use.
// ErrNotFound when there is none.
func (s *Store) DeleteAPIKey(ctx context.Context, name string) error {
	if err := ValidAPIKeyName(name); err != nil {
		return fmt.Errorf("delete API key: %w", err)
	}
	var gone *redis.IntCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		gone = p.HDel(ctx, s.keys.apiKeys(), name)
		p.HDel(ctx, s.keys.apiKeysUsed(), name)
		p.HIncrBy(ctx, s.keys.apiKeys(), apiKeysVersionField, 1)
		return nil
	})
	switch {
	case err != nil:
		return fmt.Errorf("delete API key %q: %w", name, err)
	case gone.Val() == 0:
		return fmt.Errorf("delete API key %q: %w", name, ErrNotFound)
	}
	return nil
}

// APIKeysVersion is the version of the API keys by API: it changes with
// every create and delete ("0" before the first). One HGET.
func (s *Store) APIKeysVersion(ctx context.Context) (string, error) {
	v, err := s.rdb.HGet(ctx, s.keys.apiKeys(), apiKeysVersionField).Result()
	if errors.Is(err, redis.Nil) {
		return "0", nil
	}
	if err != nil {
		return "", fmt.Errorf("read API keys version: %w", err)
	}
	return v, nil
}

// APIKeys reads every key by API, by name, and the version they are at, in
// one HGETALL. A record that does not decode is an error wrapping
// ErrProtocol.
func (s *Store) APIKeys(ctx context.Context) (keys []APIKey, version string, err error) {
	all, err := s.rdb.HGetAll(ctx, s.keys.apiKeys()).Result()
	if err != nil {
		return nil, "", fmt.Errorf("read API keys: %w", err)
	}
	version = "0"
	for _, name := range slices.Sorted(maps.Keys(all)) {
		if name == apiKeysVersionField {
			version = all[name]
			continue
		}
		var rec apiKeyRecord
		if err := json.Unmarshal([]byte(all[name]), &rec); err != nil || !sha256Hex.MatchString(rec.SHA256) {
			return nil, "", fmt.Errorf("read API key %q: %w: record %q", name, ErrProtocol, all[name])
		}
		k := APIKey{Name: name, SHA256: rec.SHA256, Tenants: rec.Tenants, Limits: rec.Limits, Admin: rec.Admin,
			Created: time.UnixMicro(rec.Created).UTC()}
		if rec.Expires > 0 {
			k.Expires = time.UnixMicro(rec.Expires).UTC()
		}
		keys = append(keys, k)
	}
	return keys, version, nil
}

// TouchAPIKeys records when each named key (by API or from the file) was
// last used, in one HSET; a later touch by another throttler may move a
// time back by the spread of their flushes, never by more.
func (s *Store) TouchAPIKeys(ctx context.Context, used map[string]time.Time) error {
	if len(used) == 0 {
		return nil
	}
	args := make([]any, 0, 2*len(used))
	for name, at := range used {
		args = append(args, name, at.UnixMicro())
	}
	if err := s.rdb.HSet(ctx, s.keys.apiKeysUsed(), args...).Err(); err != nil {
		return fmt.Errorf("record API keys' last use: %w", err)
	}
	return nil
}

// APIKeysUsed reads when each key was last used, by name.
func (s *Store) APIKeysUsed(ctx context.Context) (map[string]time.Time, error) {
	all, err := s.rdb.HGetAll(ctx, s.keys.apiKeysUsed()).Result()
	if err != nil {
		return nil, fmt.Errorf("read API keys' last use: %w", err)
	}
	out := make(map[string]time.Time, len(all))
	for name, v := range all {
		us, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("read API key %q's last use: %w: %q", name, ErrProtocol, v)
		}
		out[name] = time.UnixMicro(us).UTC()
	}
	return out, nil
}
