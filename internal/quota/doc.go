// Package quota keeps Sluice's shared upstream quotas in Redis (issue #15):
// the upstream registry — each upstream's configuration, version, source
// and pause (registry.go; PUT, the configuration file's seed, DELETE:
// delete.go) — and each upstream's coordinator, which hands the shards
// consecutive segments of the upstream's calendar (grant.go; aligned
// segments for jobs naming several upstreams: align.go), adapts its rate
// (adapt.go), corrects its calendar by the real cost of calls (charge.go),
// paces it by the quota its answers report (pacing.go) and keeps the
// concurrency leases of the jobs running under it (run.go).
// Enqueue and the workers read an upstream's settings through a Cache
// (settings.go). The configuration itself — defaults, validation, the
// scripts' integers — is internal/upstream's; the shards' side (a
// tenant's lanes, the shard's segments, the pass) is internal/store's.
//
// Invariants:
//
//   - Every script here stands alone (clock.lua, no lib.lua: scripts.go),
//     gets every key it touches in KEYS (keys.go) and touches one upstream's
//     slot {u:<name>}, apart from every shard's: no script touches both.
//   - An upstream's keys carry {u:<name>} and only upstream_grant.lua
//     touches them, besides the registry's writes and deletes,
//     upstream_charge.lua's tat, upstream_adapt.lua's rf,
//     upstream_quota.lua's reported quota (qu, qr, ql, qt, qh, qs, qf; the
//     grant adds to qf and writes qi: pacing.go) and
//     upstream_run.lua's leases in <p>:{u:N}:run (a ZSET whose TTL follows
//     its latest lease: at most concurrency leases in force after every
//     acquire, a lease in force = expiry > now, a lower concurrency revokes
//     none). A pass reads only its shard's copy of what a grant said.
//   - Pacing (pacing.go) only ever lengthens the interval a grant round
//     uses (T' ≥ T) and caps its units, so the bound below holds paced.
//   - The bound B + R·Δ + 1 holds across shards because (a) the coordinator
//     hands out consecutive, disjoint ranges of the upstream's virtual
//     calendar (its tat only grows), and (b) a shard releases a job of cost
//     c at slot s under a segment only if s ≥ tat − (B − c)·T and v + c·T ≤
//     ceil with v = max(tat, s), then tat ← v + c·T. Each release occupies
//     its own interval [v, v + c·T) with s ≤ v and v + c·T ≤ s + B·T, so the
//     releases with slots in [a, a + Δ] lie disjoint in [a, a + Δ + B·T]:
//     their costs sum to at most Δ/T + B, whichever shard or dispatcher
//     released each. A segment or its rest not used in time is wasted,
//     never reused.
//   - Aligned segments are segments too, carved at X ≥ tat (the gap before
//     X is never handed out), granted only to a shard that owes at most one
//     (store's package doc, "Aligned grants").
//   - Time is Redis TIME read in the scripts, integer µs; Config.Clock
//     passes a fake now through the same argument in tests.
//
// # The upstream registry
//
// An upstream is one hash in its own slot, <p>:{u:<name>}:u (fields cfg —
// the upstream.View JSON —, p — the scripts' integers —, v version ≥ 1, src
// config | api, pu paused until µs — 2^52 until resumed —, pr the pause's
// reason; the coordinator's fields beside them), written only by standalone
// scripts whose one key is that hash (upstream_put.lua,
// upstream_pause.lua). The listing <p>:upstreams (ZSET, score 0, paged
// BYLEX) is written after the hash by a separate command, so a hash may
// lack its listing entry (the next PUT or seed adds it; enqueue's check
// reads each named upstream's hash, never the listing) but a listed name
// always has a hash. A pause never shortens one in force; a PUT keeps the
// pause. The seed at start writes an upstream unless its last writer was a
// PUT (src api wins); it has no tombstones, so an upstream the API deleted
// that the file still lists is created again at the next start.
// DeleteUpstream checks the shards' waiting sets (UpstreamRuntime) and
// then, in one script, the version and the leases in force, and deletes
// every key of the slot (u, cal, g, run), then the listing entry; a job
// that enters a lane between the two steps (or later, from the delayed
// set) is dead-lettered as unknown_upstream by its shard's dispatcher once
// the coordinator answers not_found. The keyspace audit checks every hash
// is complete, listed and without TTL.
package quota
