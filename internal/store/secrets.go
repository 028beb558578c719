package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redisscript"
)

// Webhook secrets by API (POST /v1/tenants/{t}/secrets): each tenant's are
// one hash on its shard (keys.go, sec:<tenant>), written by
// lua/secrets_write.lua and read by lua/secrets_read.lua; enqueue.lua reads
// its summary field to refuse webhook jobs of a tenant with no secret
// (CodeNoWebhookSecret). The store holds only sealed values (the caller
// encrypts, internal/secretbox): it never sees a secret.

// MaxSecrets is the most live secrets by API a tenant holds at once:
// policy.MaxWebhookSecrets.
const MaxSecrets = policy.MaxWebhookSecrets

// CodeNoWebhookSecret refuses a webhook job of a tenant with no signing
// secret (Item.Unless with this code): enqueue.lua waives it when the
// tenant has a live secret by API or its policy says unsigned.
const CodeNoWebhookSecret Code = "no_webhook_secret"

// StoredSecret is one webhook secret by API as stored: Sealed is the
// secretbox text (encrypted with the tenant id as additional data).
type StoredSecret struct {
	ID      string
	Created time.Time // Redis time of the add
	Expires time.Time // zero: never (until a later add expires it, or a delete)
	Sealed  string
}

// SecretSet is what Secrets reads: the tenant's live secrets by API,
// oldest first (by Created, then ID), whether its effective policy says
// unsigned, and Redis's now.
type SecretSet struct {
	Now      time.Time
	Unsigned bool
	Secrets  []StoredSecret
}

// NewSecretID returns a fresh secret id, "whs_<ULID>".
func NewSecretID(at time.Time) (string, error) {
	u, err := ulid.New(ulid.Timestamp(at), ulid.DefaultEntropy())
	if err != nil {
		return "", fmt.Errorf("new secret id: %w", err)
	}
	return "whs_" + u.String(), nil
}

// ValidSecretID checks the form NewSecretID gives; the error wraps
// ErrInvalid.
func ValidSecretID(id string) error {
	body, ok := strings.CutPrefix(id, "whs_")
	if _, err := ulid.ParseStrict(body); !ok || err != nil {
		return invalidf("secret id %q: want whs_<ULID>", id)
	}
	return nil
}

// AddSecret stores sealed as tenant's secret id in one script, and every
// other live secret of the tenant then expires at min(its expiry, now +
// expirePrevious) (0: at once) — a rotation: the previous secrets keep
// signing until then. It returns the Redis time of the add. ErrConflict
// when MaxSecrets live secrets would be exceeded; ErrInvalid
// for a bad tenant, id, sealed value or a negative expirePrevious.
func (s *Store) AddSecret(ctx context.Context, tenant, id, sealed string, expirePrevious time.Duration) (time.Time, error) {
	err := errors.Join(checkTenant(tenant), ValidSecretID(id))
	if sealed == "" || strings.ContainsAny(sealed, " \n") {
		err = errors.Join(err, invalidf("sealed secret: want one non-empty word"))
	}
	if expirePrevious < 0 || expirePrevious > policy.MaxDuration {
		err = errors.Join(err, invalidf("expire_previous_in %s: want 0 … %s", expirePrevious, policy.MaxDuration))
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("add secret of tenant %q: %w", tenant, err)
	}
	d, err := s.run(ctx, scriptSecretsWrite, s.keys.shardOf(tenant), tenant, "add", id, sealed,
		ceilMicros(expirePrevious), MaxSecrets)
	if errors.Is(err, ErrConflict) {
		return time.Time{}, fmt.Errorf("add secret of tenant %q: %w: it has %d live secrets, the most is %d",
			tenant, ErrConflict, d.int(1), MaxSecrets)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("add secret of tenant %q: %w", tenant, err)
	}
	now := d.int(1)
	if err := d.Err(); err != nil {
		return time.Time{}, fmt.Errorf("add secret of tenant %q: %w", tenant, err)
	}
	return redisscript.MicrosTime(now), nil
}

// DeleteSecret removes tenant's secret id; ErrNotFound when it has none
// by that id (or it expired).
func (s *Store) DeleteSecret(ctx context.Context, tenant, id string) error {
	err := errors.Join(checkTenant(tenant), ValidSecretID(id))
	if err == nil {
		_, err = s.run(ctx, scriptSecretsWrite, s.keys.shardOf(tenant), tenant, "delete", id)
	}
	if err != nil {
		return fmt.Errorf("delete secret %q of tenant %q: %w", id, tenant, err)
	}
	return nil
}

// TenantShard is the shard tenant's state, secrets and policy live on.
func (s *Store) TenantShard(tenant string) (int, error) {
	if err := checkTenant(tenant); err != nil {
		return 0, fmt.Errorf("shard of tenant %q: %w", tenant, err)
	}
	return s.keys.shardOf(tenant), nil
}

// SettingsVersion returns the version of shard's tenant settings — what
// the workers cache per tenant: signing keys (Secrets) and policies
// (TenantPolicy) —: the shard's policy epoch (field "#v" of its policy
// hash, new at every policy write) and its secrets counter ("#sv", bumped by
// every secret written or deleted on the shard), one HMGET. Equal versions
// mean no tenant of the shard had its secrets or policy changed in between,
// so a cache read after the first needs no new read (a secret's expiry
// aside: it is in the secret). A
// shard with no policy at all has the epoch "-"; "" when its policy hash
// holds policies but no epoch (written by an earlier release): no change
// can be told, the secrets must be read.
func (s *Store) SettingsVersion(ctx context.Context, shard int) (string, error) {
	if shard < 0 || shard >= s.keys.shards {
		return "", invalidf("shard %d of %d", shard, s.keys.shards)
	}
	vals, err := s.rdb.HMGet(ctx, s.keys.policy(shard), "#v", "#sv").Result()
	if err != nil {
		return "", fmt.Errorf("settings version of shard %d: %w", shard, err)
	}
	epoch, _ := vals[0].(string)
	counter, _ := vals[1].(string)
	if epoch == "" { // no policy written since epochs exist: none at all, or an earlier release's
		n, err := s.rdb.HLen(ctx, s.keys.policy(shard)).Result()
		if err != nil {
			return "", fmt.Errorf("settings version of shard %d: %w", shard, err)
		}
		if counter != "" {
			n--
		}
		if n > 0 {
			return "", nil
		}
		epoch = "-"
	}
	return epoch + "/" + counter, nil
}

// Secrets reads tenant's live secrets by API and its unsigned flag in one
// read-only script.
func (s *Store) Secrets(ctx context.Context, tenant string) (SecretSet, error) {
	if err := checkTenant(tenant); err != nil {
		return SecretSet{}, fmt.Errorf("secrets of tenant %q: %w", tenant, err)
	}
	d, err := s.run(ctx, scriptSecretsRead, s.keys.shardOf(tenant), tenant)
	if err != nil {
		return SecretSet{}, fmt.Errorf("secrets of tenant %q: %w", tenant, err)
	}
	set := decodeSecretSet(d, 1)
	if err := d.Err(); err != nil {
		return SecretSet{}, fmt.Errorf("secrets of tenant %q: %w", tenant, err)
	}
	return set, nil
}

// decodeSecretSet reads a signing state from element from of a reply on:
// now µs, unsigned (0|1), then the live secrets (lib.lua signing_set: id,
// created µs, expires µs, sealed each), oldest first (then by id) —
// secrets_read's reply and claim's.
func decodeSecretSet(d decoder, from int) SecretSet {
	set := SecretSet{Now: redisscript.MicrosTime(d.int(from)), Unsigned: d.int(from+1) == 1}
	if (d.Len()-from-2)%4 != 0 {
		d.fail("secrets reply of %d elements", d.Len())
	}
	var secrets []StoredSecret
	for i := from + 2; i+3 < d.Len(); i += 4 {
		sec := StoredSecret{ID: d.str(i), Created: redisscript.MicrosTime(d.int(i + 1)), Sealed: d.str(i + 3)}
		if e := d.int(i + 2); e > 0 {
			sec.Expires = redisscript.MicrosTime(e)
		}
		secrets = append(secrets, sec)
	}
	slices.SortFunc(secrets, func(a, b StoredSecret) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	set.Secrets = secrets
	return set
}
