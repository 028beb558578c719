package store

import (
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/sluicehq/sluice/internal/policy"
)

// Key layout (docs/design.md §3). Every key of a shard carries the hash tag {s<shard>},
// so one shard is one Redis Cluster slot:
//
//	<p>:{s7}:ready                 ZSET   tenant → next useful time (µs)
//	<p>:{s7}:delayed               ZSET   job id → due time (scheduled, retrying)
//	<p>:{s7}:leases                ZSET   job id → lease deadline (released, running)
//	<p>:{s7}:policy                HASH   "*" → defaults, <tenant> → overrides (JSON)
//	<p>:{s7}:wake                  channel the shard's new earliest time (µs, decimal)
//	<p>:{s7}:vclock                STRING the shard's virtual clock for weighted fairness (Pass)
//	<p>:{s7}:cb                    ZSET   job id → due time of its callback (callbacks.go)
//	<p>:{s7}:callbacks             channel a callback queued due now (µs, decimal; CallbackChannel)
//	<p>:{s7}:tenants               ZSET   tenant index: tenant → next check (µs), every tenant with state (lua/tenants.lua)
//	<p>:{s7}:tenant_names          ZSET   the index's members, each at score 0: name order (ZRANGE BYLEX)
//	<p>:{s7}:tenants_backfilled    STRING µs of the index backfill's end on this shard (backfill.go)
//	<p>:{s7}:fair                  HASH   w: weight of the tenants holding worker slots; r: weight left waiting by the last pass (fairshare.go)
//	<p>:{s7}:finished              HASH   Unix second → jobs that ended by an attempt in it, last 11 s; TTL 11 s (finished.go)
//	<p>:{s7}:agg                   HASH   observation aggregates: or (open + running · 2^32), dead, v (observe.go; lua/lib.lua AGG)
//	<p>:{s7}:top                   ZSET   tenant → backlog, every tenant with one (observe.go)
//	<p>:{s7}:gate:a|u|d|p          ZSET   tenant → end µs of its admin pause, upstream pause, disable, pause while not disabled (observe.go)
//	<p>:{s7}:dead:n, :dead:x       HASH, ZSET tenant → its dead letters; tenant → its dead set's expiry µs (observe.go)
//	<p>:{s7}:t:<tenant>            HASH   tenant state (fields: see TenantState)
//	<p>:{s7}:t:<tenant>:q          LIST   backlog, FIFO
//	<p>:{s7}:t:<tenant>:head       ZSET   head lane, by sequence
//	<p>:{s7}:t:<tenant>:dead       ZSET   dead letters
//	<p>:{s7}:t:<tenant>:ra         STRING the last attempts' records, appended (lua/recent.lua)
//	<p>:{s7}:j:<id>                HASH   job record (fields: see Job), attempt log included
//	<p>:{s7}:idem:<tenant>:<key>   STRING "<fingerprint hex> <job id>"
//	<p>:{s7}:waitmark              STRING "1", 1 min: a write for WAIT to confirm earlier ones (replication.go)
//	<p>:{s7}:sec:<tenant>          HASH   webhook secrets by API: id → "<created µs> <expires µs> <sealed>", "~live" (secrets.go)
//	<p>:{apikeys}:k                HASH   API keys by API: name → JSON record (hash, globs, admin, times), "~v" → version (apikeys.go)
//	<p>:{apikeys}:used             HASH   API key name (by API or from the file) → last used, Unix µs (apikeys.go)
//	<p>:{s7}:t:<tenant>:l:<ups>    ZSET   the tenant's lane for upstream set ups (names sorted, ','): job id → sequence (lua/lanes.lua)
//	<p>:{s7}:t:<tenant>:lanes      SET    the tenant's lanes holding jobs (their ups)
//	<p>:{s7}:uw:<upstream>         ZSET   tenants of the shard waiting on the upstream → when added (µs)
//	<p>:{s7}:ul                    HASH   upstream → the shard's segment state "tat ceil iv b pu nx h[ t0 ceil]…" (µs)
//	<p>:{s7}:ua                    HASH   ups (a set of upstreams) → its aligned reservation "nx h tat ceil …" (µs; TTL past the furthest)
//	<p>:{s7}:t:<tenant>:circ       HASH   the tenant's deferred destinations: destination → due µs of its last deferral (finish.lua defer; circuit.go)
//	<p>:{s7}:t:<tenant>:circ:<dest> ZSET  the tenant's jobs deferred for a destination → their due µs (finish.lua defer; lua/circuit_wake.lua)
//	<p>:{circuits}:c               HASH   destination → its circuit "<failures> <state> <until> <backoff> <probe deadline> <changed> <probe> <scout> <scout deadline>" (lua/circuit.lua; circuit.go), one for all shards
//	<p>:{circuits}:w:<dest>        SET    tenants with jobs held long for a destination, woken when it closes (lua/circuit.lua)
//
// The worker roster's keys (<p>:workers, <p>:mw:<queue>) are
// internal/fleet's; an upstream's own keys, in its slot {u:<name>}, and
// the upstream listing are internal/quota's.
//
// The Go functions below are the only place Go code builds these names. The
// scripts build the same names from the shard base "<p>:{s7}:" (lua/lib.lua,
// "key builders"); the tests read script-written keys through these functions,
// so the two layouts cannot drift apart unnoticed.
type keyspace struct {
	prefix string
	shards int
}

// ShardOf is the shard of tenant: crc32-IEEE(tenant) mod shards.
func ShardOf(tenant string, shards int) int {
	return int(crc32.ChecksumIEEE([]byte(tenant)) % uint32(shards))
}

// base is the common start of every key of shard: "<p>:{s<shard>}:".
func (k keyspace) base(shard int) string {
	return k.prefix + ":{s" + strconv.Itoa(shard) + "}:"
}

func (k keyspace) shardOf(tenant string) int { return ShardOf(tenant, k.shards) }

func (k keyspace) ready(shard int) string   { return k.base(shard) + "ready" }
func (k keyspace) delayed(shard int) string { return k.base(shard) + "delayed" }
func (k keyspace) leases(shard int) string  { return k.base(shard) + "leases" }
func (k keyspace) policy(shard int) string  { return k.base(shard) + "policy" }
func (k keyspace) wake(shard int) string    { return k.base(shard) + "wake" }
func (k keyspace) vclock(shard int) string  { return k.base(shard) + "vclock" }

// fair is shard's weights for the fair shares of the workers' pool (lua:
// FAIR.key()).
func (k keyspace) fair(shard int) string { return k.base(shard) + "fair" }

// finished is shard's finished-jobs counter (lua: BASE .. 'finished').
func (k keyspace) finished(shard int) string { return k.base(shard) + "finished" }

// callbacks is shard's callback set (lua: BASE .. 'cb').
func (k keyspace) callbacks(shard int) string { return k.base(shard) + "cb" }

// tenantIndex is shard's tenant index (lua/tenants.lua k_index).
func (k keyspace) tenantIndex(shard int) string { return k.base(shard) + "tenants" }

// tenantNames is shard's tenant name set (lua/lib.lua k_names).
func (k keyspace) tenantNames(shard int) string { return k.base(shard) + "tenant_names" }

// backfilled is shard's marker of a finished index backfill
// (lua/tenant_backfill.lua).
func (k keyspace) backfilled(shard int) string { return k.base(shard) + "tenants_backfilled" }

// agg is shard's observation aggregate named name — "agg", "top",
// "gate:a", "gate:u", "gate:d", "gate:p", "dead:n" or "dead:x" (lua/lib.lua
// AGG.key).
func (k keyspace) agg(shard int, name string) string { return k.base(shard) + name }

// lane is tenant's lane for the upstream set ups (lua/lanes.lua LN.k_lane).
func (k keyspace) lane(tenant, ups string) string { return k.tenant(tenant) + ":l:" + ups }

// lanes is the set of tenant's lanes holding jobs (LN.k_lanes).
func (k keyspace) lanes(tenant string) string { return k.tenant(tenant) + ":lanes" }

// upstreamWaiting is shard's set of tenants waiting on upstream (LN.k_wait).
func (k keyspace) upstreamWaiting(shard int, upstream string) string {
	return k.base(shard) + "uw:" + upstream
}

// upstreamLocal is shard's hash of upstream segment states (LN.k_state).
func (k keyspace) upstreamLocal(shard int) string { return k.base(shard) + "ul" }

// upstreamAligned is shard's hash of aligned reservations (LN.k_aligned).
func (k keyspace) upstreamAligned(shard int) string { return k.base(shard) + "ua" }

// WakeChannel is shard's wake channel under prefix, "<p>:{s<shard>}:wake":
// the scripts PUBLISH a shard's new earliest time (µs, decimal) on it, and
// the dispatcher (internal/dispatch) subscribes to it.
func WakeChannel(prefix string, shard int) string { return keyspace{prefix: prefix}.wake(shard) }

// LeasesKey is shard's lease set under prefix, "<p>:{s<shard>}:leases": the
// jobs released or running, by lease deadline (internal/migrate counts it).
func LeasesKey(prefix string, shard int) string { return keyspace{prefix: prefix}.leases(shard) }

// apiKeys and apiKeysUsed are the API keys by API and their last use, one
// slot for both (so a MULTI may write both on a Cluster).
func (k keyspace) apiKeys() string     { return k.prefix + ":{apikeys}:k" }
func (k keyspace) apiKeysUsed() string { return k.prefix + ":{apikeys}:used" }

// checkTenant checks a tenant id with policy.ValidTenantID (docs/design.md §1): such
// an id holds no key separator or hash-tag brace. The error wraps ErrInvalid
// and policy.ErrInvalidTenantID.
func checkTenant(id string) error {
	if err := policy.ValidTenantID(id); err != nil {
		return fmt.Errorf("%w: tenant: %w", ErrInvalid, err)
	}
	return nil
}

func (k keyspace) tenant(tenant string) string {
	return k.base(k.shardOf(tenant)) + "t:" + tenant
}

func (k keyspace) tenantQueue(tenant string) string { return k.tenant(tenant) + ":q" }
func (k keyspace) tenantHead(tenant string) string  { return k.tenant(tenant) + ":head" }
func (k keyspace) tenantDead(tenant string) string  { return k.tenant(tenant) + ":dead" }

// tenantCircuits is the tenant's deferred destinations (finish.lua defer
// builds it too).
func (k keyspace) tenantCircuits(tenant string) string { return k.tenant(tenant) + ":circ" }

// circuits is the destinations' circuits, one key for all shards; its
// waiters share its hash tag (one slot: circuit.lua touches both).
func (k keyspace) circuits() string { return k.prefix + ":{circuits}:c" }

// circuitWaiters is the tenants with jobs held long for destination.
func (k keyspace) circuitWaiters(destination string) string {
	return k.prefix + ":{circuits}:w:" + destination
}

// tenantCircuitJobs is tenant's jobs deferred for destination (finish.lua
// defer builds it too).
func (k keyspace) tenantCircuitJobs(tenant, destination string) string {
	return k.tenantCircuits(tenant) + ":" + destination
}

// tenantRecent is the tenant's recent attempts (lua/recent.lua builds it too).
func (k keyspace) tenantRecent(tenant string) string { return k.tenant(tenant) + ":ra" }

// job is the key of a job record; the shard comes from the id itself.
func (k keyspace) job(id string) (string, error) {
	shard, err := ShardOfJobID(id)
	if err != nil {
		return "", err
	}
	return k.base(shard) + "j:" + id, nil
}

// secrets is the hash of tenant's webhook secrets by API.
func (k keyspace) secrets(tenant string) string { return k.base(k.shardOf(tenant)) + "sec:" + tenant }

func (k keyspace) idem(tenant, key string) string {
	return k.base(k.shardOf(tenant)) + "idem:" + tenant + ":" + key
}

// NewJobID returns a fresh job id "j<shard>_<ulid>" whose ULID carries the
// millisecond of at. Ids are unique across processes (80 random bits,
// monotonic within one process and millisecond). Safe for concurrent use.
func NewJobID(shard int, at time.Time) (string, error) {
	u, err := ulid.New(ulid.Timestamp(at), ulid.DefaultEntropy())
	if err != nil {
		return "", fmt.Errorf("new job id: %w", err)
	}
	return "j" + strconv.Itoa(shard) + "_" + u.String(), nil
}

// ShardOfJobID returns the shard encoded in a job id "j<shard>_<ulid>". A
// malformed id is an error wrapping ErrInvalid.
func ShardOfJobID(id string) (int, error) {
	num, rest, ok := strings.Cut(strings.TrimPrefix(id, "j"), "_")
	if !ok || !strings.HasPrefix(id, "j") || num == "" || len(num) > 5 || strings.TrimLeft(num, "0123456789") != "" {
		return 0, fmt.Errorf("job id %q: %w: want j<shard>_<ulid>", id, ErrInvalid)
	}
	if len(num) > 1 && num[0] == '0' {
		return 0, fmt.Errorf("job id %q: %w: shard has a leading zero", id, ErrInvalid)
	}
	if _, err := ulid.ParseStrict(rest); err != nil {
		return 0, fmt.Errorf("job id %q: %w: %w", id, ErrInvalid, err)
	}
	shard, _ := strconv.Atoi(num) // digits only, at most 5: cannot fail
	return shard, nil
}

// JobKey is the key of job id's record, for tools that measure the
// keyspace (scripts/bench-enqueue); an id that names no shard is an error.
func (s *Store) JobKey(id string) (string, error) { return s.keys.job(id) }

// BacklogKey is the key of tenant's backlog list, for tools that measure
// the keyspace.
func (s *Store) BacklogKey(tenant string) string { return s.keys.tenantQueue(tenant) }
