package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/secretbox"
	"github.com/sluicehq/sluice/internal/store"
)

// SigningRefreshDefault is SigningKeys.Refresh's default, and its bound: a
// new or deleted secret by API signs (or stops signing) within a second.
const SigningRefreshDefault = time.Second

// MaxSigningTenants bounds SigningKeys' and ResultSettings' caches; past
// it a cache starts afresh.
const MaxSigningTenants = 100_000

// ErrNoSigningKey: the tenant has no signing secret and its policy does not
// say unsigned.
var ErrNoSigningKey = errors.New("no webhook signing secret")

// SettingsVersions tells whether a tenant's cached settings need a new
// read: the version of its shard's secrets and policies
// (store.SettingsVersion). *store.Store.
type SettingsVersions interface {
	TenantShard(tenant string) (int, error)
	SettingsVersion(ctx context.Context, shard int) (string, error)
}

// SecretReader reads a tenant's secrets by API: *store.Store.
type SecretReader interface {
	Secrets(ctx context.Context, tenant string) (store.SecretSet, error)
	SettingsVersions
}

var _ SecretReader = (*store.Store)(nil)

// SigningKeys gives the keys a tenant's webhooks are signed with: its live
// secrets by API (decrypted with Keyring), newest first, then its
// configuration's (File), at most policy.MaxWebhookSecrets. A tenant's
// secrets by API and unsigned flag are read again (one read-only script;
// concurrent callers share it) only when its shard's version
// (store.SettingsVersion: the policy epoch and the secrets counter) moved
// since its last read; that version is read at most once per Refresh/2 per
// shard, and a tenant compares it at most once per Refresh/2, so a change
// is used within Refresh and a worker's steady cost is one HMGET per shard
// per Refresh/2, not one script per tenant per Refresh. A secret's expiry
// is applied at every call (its Redis-time expiry against the local clock).
// Safe for concurrent use; the zero value signs with nothing.
type SigningKeys struct {
	// Store reads the secrets by API and the unsigned flag; nil: only File,
	// and a tenant without file secrets is unsigned.
	Store SecretReader
	// Keyring opens the secrets by API (config.SecretsConfig.Keyring); nil
	// while secrets.key is not configured: a tenant holding secrets by API
	// then cannot be signed (an error, so its jobs retry).
	Keyring *secretbox.Keyring
	// File returns the tenant's configuration secrets (policy.SigningKeys).
	File func(tenant string) [][]byte
	// Refresh is how long a tenant's read is used; 0 < Refresh ≤ 1s;
	// default SigningRefreshDefault.
	Refresh time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time

	cache    tenantCache[signingEntry]
	versions shardVersions
	keys     tenantCache[openedKey] // by tenant "\x00" sealed text
}

// openedKey is a sealed secret's signing key once opened; mu serialises
// the opening.
type openedKey struct {
	mu  sync.Mutex
	key []byte
}

// signingEntry is one tenant's last read; mu serialises its refresh.
type signingEntry struct {
	mu sync.Mutex
	versioned
	unsigned bool
	secrets  []openedSecret // oldest first
}

// versioned is what a per-tenant cache entry (SigningKeys', ResultSettings')
// keeps to know when to read again: when it was last read or found current,
// and its shard's settings version before that read.
type versioned struct {
	read    time.Time // zero: never read
	version string    // "": unknown, read again at the next check
}

// due reports whether the entry is to be checked at now: never read, or
// last checked half ago (or in the local clock's future).
func (e *versioned) due(now time.Time, half time.Duration) bool {
	return e.read.IsZero() || now.Sub(e.read) >= half || now.Before(e.read)
}

// moved reports whether the entry must be read again, its shard now at
// version: never read, or the version moved or is unknown.
func (e *versioned) moved(version string) bool {
	return e.read.IsZero() || version == "" || version != e.version
}

// shardVersions caches each shard's store.SettingsVersion with the local
// time it was read (SigningKeys', ResultSettings').
type shardVersions struct {
	mu sync.Mutex
	m  map[int]shardVersion
}

type shardVersion struct {
	version string
	at      time.Time
}

// of returns the version of tenant's shard, read again when the cached one
// is maxAge old (or from the local clock's future).
func (v *shardVersions) of(ctx context.Context, st SettingsVersions, tenant string, now time.Time, maxAge time.Duration) (string, error) {
	shard, err := st.TenantShard(tenant)
	if err != nil {
		return "", err
	}
	v.mu.Lock()
	c, ok := v.m[shard]
	v.mu.Unlock()
	if ok && now.Sub(c.at) < maxAge && !now.Before(c.at) {
		return c.version, nil
	}
	version, err := st.SettingsVersion(ctx, shard)
	if err != nil {
		return "", fmt.Errorf("read the tenant settings' version: %w", err)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil {
		v.m = make(map[int]shardVersion)
	}
	v.m[shard] = shardVersion{version: version, at: now}
	return version, nil
}

type openedSecret struct {
	key     []byte
	expires time.Time // zero: never
}

// Keys returns tenant's signing keys. With none, it returns ErrNoSigningKey
// unless the tenant's policy says unsigned (then nil, nil: send unsigned).
// Other errors (Redis, a secret the keyring cannot open) mean the keys are
// not known now: the caller retries later rather than sending unsigned.
func (k *SigningKeys) Keys(ctx context.Context, tenant string) ([][]byte, error) {
	file := k.fileKeys(tenant)
	if k.Store == nil {
		return file, nil
	}
	e := k.cache.entry(tenant)
	e.mu.Lock()
	defer e.mu.Unlock()
	now := k.now()
	refresh := SigningRefreshDefault
	if k.Refresh > 0 && k.Refresh < refresh {
		refresh = k.Refresh
	}
	if half := refresh / 2; e.due(now, half) {
		// The shard's version first, then the secrets: what is read is at
		// least as new as the version recorded with it.
		version, err := k.versions.of(ctx, k.Store, tenant, now, half)
		if err != nil {
			return nil, err
		}
		if e.moved(version) {
			if err := k.read(ctx, tenant, e); err != nil {
				return nil, err
			}
			e.version = version
		}
		e.read = now
	}
	return signingKeys(tenant, e.secrets, file, e.unsigned, now)
}

// KeysFrom is Keys for a claimed webhook job whose claim gave its tenant's
// signing state (store.ClaimedJob.Signing): the secrets by API and the
// unsigned flag as the claim read them, no read of its own. Each sealed
// secret is opened once (a cache by tenant and sealed text, bounded like
// the tenants').
func (k *SigningKeys) KeysFrom(tenant string, set store.SecretSet) ([][]byte, error) {
	opened, err := k.open(tenant, set.Secrets)
	if err != nil {
		return nil, err
	}
	return signingKeys(tenant, opened, k.fileKeys(tenant), set.Unsigned, k.now())
}

// fileKeys is tenant's configuration secrets (File; none without it).
func (k *SigningKeys) fileKeys(tenant string) [][]byte {
	if k.File == nil {
		return nil
	}
	return k.File(tenant)
}

// open opens tenant's stored secrets (openKey each).
func (k *SigningKeys) open(tenant string, secrets []store.StoredSecret) ([]openedSecret, error) {
	opened := make([]openedSecret, 0, len(secrets))
	for _, s := range secrets {
		key, err := k.openKey(tenant, s)
		if err != nil {
			return nil, err
		}
		opened = append(opened, openedSecret{key: key, expires: s.Expires})
	}
	return opened, nil
}

// openKey opens a stored secret of tenant with Keyring (its additional
// data: the tenant) and parses its signing key, once per sealed text (the
// keys cache).
func (k *SigningKeys) openKey(tenant string, s store.StoredSecret) ([]byte, error) {
	e := k.keys.entry(tenant + "\x00" + s.Sealed)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.key != nil {
		return e.key, nil
	}
	plain, err := k.Keyring.Open(s.Sealed, []byte(tenant))
	if err != nil {
		return nil, fmt.Errorf("open signing secret %s of tenant %q: %w", s.ID, tenant, err)
	}
	key, err := policy.ParseWebhookSecret(string(plain))
	if err != nil {
		return nil, fmt.Errorf("signing secret %s of tenant %q: %w", s.ID, tenant, err)
	}
	e.key = key
	return key, nil
}

// signingKeys is the keys to sign tenant's webhooks with at now: its live
// secrets by API (secrets: oldest first), newest first, then the file's,
// at most policy.MaxWebhookSecrets; none and not unsigned is
// ErrNoSigningKey.
func signingKeys(tenant string, secrets []openedSecret, file [][]byte, unsigned bool, now time.Time) ([][]byte, error) {
	keys := make([][]byte, 0, len(secrets)+len(file))
	for i := len(secrets) - 1; i >= 0; i-- { // newest first
		if s := secrets[i]; s.expires.IsZero() || s.expires.After(now) {
			keys = append(keys, s.key)
		}
	}
	keys = append(keys, file...)
	if len(keys) == 0 && !unsigned {
		return nil, fmt.Errorf("tenant %q: %w", tenant, ErrNoSigningKey)
	}
	return keys[:min(len(keys), policy.MaxWebhookSecrets)], nil
}

// read refreshes e from Redis, opening each secret.
func (k *SigningKeys) read(ctx context.Context, tenant string, e *signingEntry) error {
	set, err := k.Store.Secrets(ctx, tenant)
	if err != nil {
		return fmt.Errorf("read signing secrets: %w", err)
	}
	opened, err := k.open(tenant, set.Secrets)
	if err != nil {
		return err
	}
	e.secrets, e.unsigned = opened, set.Unsigned
	return nil
}

// tenantCache is a per-tenant cache of entries E (SigningKeys',
// ResultSettings'; SigningKeys' opened keys, by tenant and sealed text),
// each refreshed under its own lock so that concurrent callers of one
// tenant share a read; past MaxSigningTenants tenants it
// starts afresh. The zero value is ready.
type tenantCache[E any] struct {
	mu sync.Mutex
	m  map[string]*E
}

// entry returns tenant's entry, a new zero one the first time.
func (c *tenantCache[E]) entry(tenant string) *E {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= MaxSigningTenants {
		c.m = make(map[string]*E)
	}
	e := c.m[tenant]
	if e == nil {
		e = new(E)
		c.m[tenant] = e
	}
	return e
}

func (k *SigningKeys) now() time.Time {
	if k.Now != nil {
		return k.Now()
	}
	return time.Now()
}
