// Package quota keeps Sluice's shared upstream quotas in Redis (issue #15):
// the upstream registry — each upstream's configuration, version, source
// and pause (registry.go; PUT, the configuration file's seed, DELETE:
// delete.go) — and each upstream's coordinator, which hands the shards
// consecutive segments of the upstream's calendar (grant.go; aligned
// segments for jobs naming several upstreams: align.go), adapts its rate
// (adapt.go), corrects its calendar by the real cost of calls (charge.go)
// and keeps the concurrency leases of the jobs running under it (run.go).
// Enqueue and the workers read an upstream's settings through a Cache
// (settings.go). The configuration itself — defaults, validation, the
// scripts' integers — is internal/upstream's; the shards' side (a
// tenant's lanes, the shard's segments, the pass) is internal/store's.
//
// Invariants:
//
//   - An upstream's keys carry the hash tag {u:<name>} (keys.go), one Redis
//     Cluster slot apart from every shard's; every script here gets its keys
//     in KEYS, stands alone (clock.lua, no lib.lua: scripts.go) and touches
//     that one slot. No script touches an upstream's slot and a shard's: a
//     pass reads only its shard's copy of what a grant said.
//   - Only lua/upstream_grant.lua moves an upstream's calendar end (field
//     tat), besides the registry's writes and deletes, upstream_charge.lua's
//     cost corrections and upstream_run.lua's concurrency leases in
//     <p>:{u:N}:run, a ZSET whose TTL follows its latest lease: at most
//     Params.Concurrency leases in force after every acquire, a lease in
//     force = expiry > now, a lower concurrency revokes none.
//   - The coordinator hands out segments that are consecutive, disjoint
//     ranges of the upstream's virtual calendar (tat only grows), within
//     now + H; a shard releases a job of cost c at slot s under a segment
//     only if s ≥ tat − (B − c)·T and max(tat, s) + c·T ≤ ceil. So the
//     releases with slots in any window [a, a + Δ], whichever shard or
//     dispatcher released them, cost at most Δ/T + B: one GCRA chain in
//     calendar order. A segment not used in time is wasted, never reused.
//   - Aligned segments are segments too, carved at X ≥ tat (the gap before
//     X is never handed out), granted only to a shard that owes at most one.
//   - The listing <p>:upstreams is written after an upstream's hash: a name
//     with a hash may briefly be missing from it, never the reverse.
//   - Time is Redis TIME read in the scripts, integer µs; Config.Clock
//     passes a fake now through the same argument in tests.
package quota
