package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/sluicehq/sluice/internal/policy"
)

// MaxTenantNames is the most names one TenantNames call returns.
const MaxTenantNames = 1000

// TenantNames returns up to n (1 … MaxTenantNames) names of tenants with
// state in Redis that begin with prefix ("" = any) and come after after
// ("" = from the first) in byte order, merged across the shards' name sets
// (lua/tenant_names.lua: one ZRANGE BYLEX of n+1 names per shard, a prefix
// being a lexicographic range too, O(shards · (log N + n))), and whether
// any such name follows the last one returned. A name whose tenant's state
// is gone but not yet trimmed may be among them (TenantViews leaves it
// out). Bad input — n, or a prefix that cannot begin a tenant id
// (policy.ValidTenantPrefix) — wraps ErrInvalid.
func (s *Store) TenantNames(ctx context.Context, prefix, after string, n int) (names []string, more bool, err error) {
	if n < 1 || n > MaxTenantNames {
		return nil, false, fmt.Errorf("tenant names: %w", invalidf("n %d: want 1 … %d", n, MaxTenantNames))
	}
	if err := policy.ValidTenantPrefix(prefix); err != nil {
		return nil, false, fmt.Errorf("tenant names: %w: %w", ErrInvalid, err)
	}
	if after < prefix {
		after = "" // the names with the prefix all come after it: start at the prefix
	}
	for shard := range s.keys.shards {
		d, err := s.run(ctx, scriptTenantNames, shard, after, n+1, prefix)
		if err != nil {
			return nil, false, fmt.Errorf("tenant names of shard %d: %w", shard, err)
		}
		for i := 2; i < d.Len(); i++ {
			names = append(names, d.str(i))
		}
		if err := d.Err(); err != nil {
			return nil, false, fmt.Errorf("tenant names of shard %d: %w", shard, err)
		}
	}
	slices.Sort(names) // a tenant is on one shard: no repeats
	if len(names) > n {
		return names[:n], true, nil
	}
	return names, false, nil
}

// TenantViews reads the state of each tenant named, as TenantState does, in
// one script per shard (lua/tenant_views.lua), and returns them in the order
// given; a tenant with no state in Redis (no hash, dead letters or policy
// overrides) is left out and dropped from the tenant index. At most
// MaxTenantNames names; bad input wraps ErrInvalid and reads nothing.
func (s *Store) TenantViews(ctx context.Context, tenants []string) ([]TenantState, error) {
	if len(tenants) > MaxTenantNames {
		return nil, fmt.Errorf("tenant views: %w", invalidf("%d tenants: want at most %d", len(tenants), MaxTenantNames))
	}
	byShard := map[int][]any{}
	for _, tn := range tenants {
		if err := checkTenant(tn); err != nil {
			return nil, fmt.Errorf("tenant views: %w", err)
		}
		shard := s.keys.shardOf(tn)
		byShard[shard] = append(byShard[shard], tn)
	}
	found := make(map[string]TenantState, len(tenants))
	for shard, names := range byShard {
		if err := s.tenantViews(ctx, shard, names, found); err != nil {
			return nil, fmt.Errorf("tenant views of shard %d: %w", shard, err)
		}
	}
	out := make([]TenantState, 0, len(found))
	for _, tn := range tenants {
		if st, ok := found[tn]; ok {
			out = append(out, st)
		}
	}
	return out, nil
}

// tenantViews runs tenant_views.lua on shard and adds its views to found.
func (s *Store) tenantViews(ctx context.Context, shard int, names []any, found map[string]TenantState) error {
	d, err := s.run(ctx, scriptTenantViews, shard, names...)
	if err != nil {
		return err
	}
	for i := 2; i < d.Len(); i++ {
		item := d.list(i)
		tn := item.str(0)
		st, err := parseTenantState(tn, item.list(1))
		if err != nil {
			return err
		}
		found[tn] = st
	}
	return d.Err()
}

// TenantKey is what TenantKeys reads of a tenant: its sort key and state.
type TenantKey struct {
	Tenant string
	// Key is the sort key TenantKeys was asked for: "backlog", the tenant's
	// live jobs (TenantState.Backlog); "oldest", its oldest queued job's
	// creation (µs since the epoch), -1 when none is queued.
	Key int64
	// State is the tenant's state now: TenantDisabled, TenantPaused (an
	// operator's or an upstream's pause) or TenantActive.
	State string
}

// Tenant states of TenantKey.State (lua/tenant_keys.lua).
const (
	TenantActive   = "a"
	TenantPaused   = "p"
	TenantDisabled = "d"
)

// TenantKeys returns the sort key key ("backlog" or "oldest") and the state
// of every tenant with state in Redis, walking each shard's tenant index
// (lua/tenant_keys.lua, one script per ~250 tenants); in no particular
// order, each tenant once. Cheaper than Tenants (no summary: the existence
// checks, the packed state field, and for "oldest" the head jobs), but its
// cost still grows with the tenants. Bad input wraps ErrInvalid.
func (s *Store) TenantKeys(ctx context.Context, key string) ([]TenantKey, error) {
	if key != "backlog" && key != "oldest" {
		return nil, fmt.Errorf("tenant keys: %w", invalidf("key %q: want backlog or oldest", key))
	}
	seen := map[string]bool{}
	var out []TenantKey
	err := s.walkIndex(ctx, scriptTenantKeys, []any{tenantListStep, key}, func(d decoder) {
		for i := 3; i+2 < d.Len(); i += 3 {
			if tk := (TenantKey{Tenant: d.str(i), Key: d.int(i + 1), State: d.str(i + 2)}); !seen[tk.Tenant] {
				seen[tk.Tenant] = true
				out = append(out, tk)
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("tenant keys: %w", err)
	}
	return out, nil
}
