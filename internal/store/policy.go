package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redisscript"
)

// AnyVersion, as PutTenantPolicy's ifVersion, writes unconditionally.
const AnyVersion int64 = -1

// Policy storage (docs/design.md §3): the shard's policy hash holds field "*", the
// shard's defaults, and one field per tenant with overrides. Each value is a
// JSON object of integer fields named as in Params (rate_us, burst, …) plus an
// integer "version", e.g. {"version":3,"rate_us":20000,"burst":5}. The scripts
// decode and merge DefaultParams ← "*" ← tenant on every call, so a write is
// effective at the next decision on every instance. "*" is written to every
// shard by SeedDefaults (SeedPolicies at startup); a tenant's field lives on
// the tenant's shard.

// PolicyRecord is what is stored for one tenant.
type PolicyRecord struct {
	Defaults  Overrides // the shard's "*" entry (nil fields: DefaultParams)
	Overrides Overrides // the tenant's entry
	Version   int64     // the tenant entry's version; 0 when it has none
	Effective Params    // DefaultParams ← Defaults ← Overrides
}

// PutTenantPolicy replaces tenant's overrides and returns the new version.
// With ifVersion ≥ 0 the write happens only if the current version equals it
// (0: the tenant has no overrides yet), else a *VersionMismatchError
// (ErrVersionMismatch); AnyVersion writes unconditionally. In the same script
// the change is applied to the tenant's state: TAT is rescaled to the new
// rate and burst (TAT′ = now + max(0, TAT − now)·T′/T, capped at now + b′·T′),
// admission tokens are kept (capped at the new admit burst), and the tenant is
// rescheduled.
func (s *Store) PutTenantPolicy(ctx context.Context, tenant string, o Overrides, ifVersion int64) (int64, error) {
	if err := checkTenant(tenant); err != nil {
		return 0, fmt.Errorf("put policy of tenant %q: %w", tenant, err)
	}
	if err := o.Validate(); err != nil {
		return 0, fmt.Errorf("put policy of tenant %q: %w", tenant, err)
	}
	v, err := s.putPolicy(ctx, s.keys.shardOf(tenant), tenant, o, ifVersion)
	if versionMismatch(err) {
		err = &VersionMismatchError{Tenant: tenant, Want: ifVersion, Current: v}
	}
	if err != nil {
		return 0, fmt.Errorf("put policy of tenant %q: %w", tenant, err)
	}
	return v, nil
}

// SeedDefaults writes p as the defaults ("*") of every shard. Tenants without
// an override of rate or burst see the change at their next decision, which
// rescales their TAT then.
func (s *Store) SeedDefaults(ctx context.Context, p Params) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("seed policy defaults: %w", err)
	}
	for shard := range s.keys.shards {
		if _, err := s.putPolicy(ctx, shard, "*", p.Full(), AnyVersion); err != nil {
			return fmt.Errorf("seed policy defaults on shard %d: %w", shard, err)
		}
	}
	return nil
}

// SeedPolicies writes a configuration's policy (docs/design.md §3): defaults,
// resolved over policy.Builtin, to every shard's "*" entry on every call (the
// file is their only source), and each tenant's overrides only when the
// tenant has none yet (If-Match version 0), so a restart never reverts a
// change made through PUT /v1/tenants/{tenant}/policy. A tenant whose stored
// overrides differ from tenants' is logged as a warning and left as stored.
// The policies are not validated beyond Params' bounds: validate them first
// (the configuration does).
func (s *Store) SeedPolicies(ctx context.Context, defaults policy.Overrides, tenants map[string]policy.Overrides, log *slog.Logger) error {
	p := policy.Resolve(defaults)
	if err := s.SeedDefaults(ctx, ParamsOf(p)); err != nil {
		return err
	}
	view, _ := json.Marshal(p.View()) // cannot fail: plain fields
	log.InfoContext(ctx, "seeded policy defaults", "shards", s.Shards(), "policy", string(view))
	for _, tenant := range slices.Sorted(maps.Keys(tenants)) {
		o := OverridesOf(tenants[tenant])
		version, err := s.PutTenantPolicy(ctx, tenant, o, 0)
		switch {
		case err == nil:
			log.InfoContext(ctx, "seeded tenant policy", "tenant", tenant, "version", version)
		case errors.Is(err, ErrVersionMismatch):
			if err := s.compareTenantPolicy(ctx, tenant, o, log); err != nil {
				return err
			}
		default:
			return fmt.Errorf("seed policy of tenant %q: %w", tenant, err)
		}
	}
	return nil
}

// compareTenantPolicy logs a warning when tenant's stored overrides differ
// from file.
func (s *Store) compareTenantPolicy(ctx context.Context, tenant string, file Overrides, log *slog.Logger) error {
	rec, err := s.TenantPolicy(ctx, tenant)
	if err != nil {
		return fmt.Errorf("compare policy of tenant %q: %w", tenant, err)
	}
	stored, _ := json.Marshal(rec.Overrides) // cannot fail: plain fields
	want, _ := json.Marshal(file)
	if string(stored) != string(want) {
		log.WarnContext(ctx, "tenant policy in Redis differs from the configuration file; keeping Redis's (change it with PUT /v1/tenants/{tenant}/policy)",
			"tenant", tenant, "version", rec.Version, "redis", string(stored), "file", string(want))
		return nil
	}
	log.InfoContext(ctx, "tenant policy already seeded", "tenant", tenant, "version", rec.Version)
	return nil
}

// versionMismatch reports whether err is a script's version_mismatch
// refusal (policy_put.lua), which the callers turn into
// their typed error.
func versionMismatch(err error) bool {
	return redisscript.RefusalStatus(err) == statusVersionMismatch
}

// putPolicy runs policy_put.lua. On a version mismatch it returns the current
// version with the *redisscript.Refusal error.
func (s *Store) putPolicy(ctx context.Context, shard int, field string, o Overrides, ifVersion int64) (int64, error) {
	entry, err := json.Marshal(o)
	if err != nil {
		return 0, err
	}
	d, err := s.run(ctx, scriptPolicyPut, shard, field, entry, max(ifVersion, AnyVersion))
	if err != nil && !errors.Is(err, ErrVersionMismatch) {
		return 0, err
	}
	v := d.int(1)
	if derr := d.Err(); derr != nil {
		return 0, derr
	}
	return v, err
}

// TenantPolicy returns tenant's stored policy: the shard defaults, the
// tenant's overrides and version, and the effective values.
func (s *Store) TenantPolicy(ctx context.Context, tenant string) (PolicyRecord, error) {
	if err := checkTenant(tenant); err != nil {
		return PolicyRecord{}, fmt.Errorf("get policy of tenant %q: %w", tenant, err)
	}
	vals, err := s.rdb.HMGet(ctx, s.keys.policy(s.keys.shardOf(tenant)), "*", tenant).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return PolicyRecord{}, fmt.Errorf("get policy of tenant %q: %w", tenant, err)
	}
	var rec PolicyRecord
	var defaults, overrides storedEntry
	if err := defaults.decode(vals[0]); err != nil {
		return PolicyRecord{}, fmt.Errorf("get policy of tenant %q: defaults: %w", tenant, err)
	}
	if err := overrides.decode(vals[1]); err != nil {
		return PolicyRecord{}, fmt.Errorf("get policy of tenant %q: overrides: %w", tenant, err)
	}
	rec.Defaults, rec.Overrides, rec.Version = defaults.Overrides, overrides.Overrides, overrides.Version
	rec.Effective = rec.Overrides.Apply(rec.Defaults.Apply(DefaultParams()))
	return rec, nil
}

// storedEntry is one value of the policy hash.
type storedEntry struct {
	Version int64 `json:"version"`
	Overrides
}

// decode reads v (an HMGET element: nil when absent, else a string).
func (e *storedEntry) decode(v any) error {
	if v == nil {
		return nil
	}
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("%w: policy entry is %T", ErrProtocol, v)
	}
	if err := json.Unmarshal([]byte(s), e); err != nil {
		return fmt.Errorf("%w: policy entry %q: %w", ErrProtocol, s, err)
	}
	return nil
}
