package quota

import (
	"fmt"

	"github.com/sluicehq/sluice/internal/upstream"
)

// Key layout (docs/design.md §3, issue #15). Every key of an upstream
// carries the hash tag {u:<name>}, so one upstream is one Redis Cluster
// slot, apart from every shard's:
//
//	<p>:upstreams                  ZSET   every registered upstream name at score 0 (not slot-tagged; registry.go)
//	<p>:{u:N}:u                    HASH   one upstream: cfg, p, v, src, pu, pr (registry.go), tat … (the coordinator), rf (adapt.go), qu qr ql qt qh qs qf qi (pacing.go)
//	<p>:{u:N}:cal                  HASH   shard → "wanted weight unit expires vf": demand registered (lua/upstream_grant.lua)
//	<p>:{u:N}:g                    HASH   shard → "t0 ceil …": segments granted, waiting for the shard's next call
//	<p>:{u:N}:run                  ZSET   "<job id>:<gen>" → lease expiry µs: the jobs running under its concurrency (lua/upstream_run.lua)
//
// The Go functions below are the only place Go code builds these names;
// every script gets its keys in KEYS. A shard's own view of an upstream
// (its lanes, waiting sets, segment states, aligned reservations) is
// internal/store's, in the shard's slot.
type keyspace struct {
	prefix string
}

// upstreams is the upstream listing, one for all upstreams.
func (k keyspace) upstreams() string { return k.prefix + ":upstreams" }

// upstreamBase is the common start of every key of upstream name's slot:
// "<p>:{u:<name>}:". name must be valid (upstream.ValidName: no brace or
// colon).
func (k keyspace) upstreamBase(name string) string { return k.prefix + ":{u:" + name + "}:" }

// upstream is upstream name's registry hash.
func (k keyspace) upstream(name string) string { return k.upstreamBase(name) + "u" }

// demand is upstream name's hash of the shards' registered demand.
func (k keyspace) demand(name string) string { return k.upstreamBase(name) + "cal" }

// granted is upstream name's hash of the segments waiting for their shard.
func (k keyspace) granted(name string) string { return k.upstreamBase(name) + "g" }

// run is upstream name's set of concurrency leases.
func (k keyspace) run(name string) string { return k.upstreamBase(name) + "run" }

// grantKeys are lua/upstream_grant.lua's KEYS for upstream name: its hash,
// its demand registrations and its waiting segments.
func (k keyspace) grantKeys(name string) []string {
	return []string{k.upstream(name), k.demand(name), k.granted(name)}
}

// runKeys are lua/upstream_run.lua's KEYS for upstream name.
func (k keyspace) runKeys(name string) []string { return []string{k.upstream(name), k.run(name)} }

// deleteKeys are lua/upstream_delete.lua's KEYS: every key of upstream
// name's slot.
func (k keyspace) deleteKeys(name string) []string { return append(k.grantKeys(name), k.run(name)) }

// UpstreamKey is the key of upstream name's hash (<p>:{u:<name>}:u), for
// tools and tests that read or seed it; "" for a name that is not valid.
func (q *Registry) UpstreamKey(name string) string {
	if CheckName(name) != nil {
		return ""
	}
	return q.keys.upstream(name)
}

// ListingKey is the upstream listing's key (<p>:upstreams), for tools and
// tests that read it.
func (q *Registry) ListingKey() string { return q.keys.upstreams() }

// UpstreamKeys are every key of upstream name's slot — its hash, demand,
// granted segments and concurrency leases, in that order — for tools and
// tests; nil for a name that is not valid.
func (q *Registry) UpstreamKeys(name string) []string {
	if CheckName(name) != nil {
		return nil
	}
	return q.keys.deleteKeys(name)
}

// CheckName checks an upstream name (upstream.ValidName: no ':' or
// hash-tag brace, so the name cannot leave its slot). The error wraps
// ErrInvalid.
func CheckName(name string) error {
	if err := upstream.ValidName(name); err != nil {
		return fmt.Errorf("%w: upstream name: %w", ErrInvalid, err)
	}
	return nil
}
