// Package fleet is the roster of Sluice's live workers in Redis
// (docs/design.md §2.2, §2.5): each worker process heartbeats its
// concurrency (workers.go: Heartbeat, Capacity, Workers), and the sluicetask
// middleware heartbeats every task queue it serves (taskworkers.go:
// TaskHeartbeat, TaskWithdraw, TaskWorkers, TaskQueueLive). The dispatcher
// budgets its releases by the workers' total concurrency; the API refuses
// task jobs for a queue without a live instance.
//
// Invariants:
//
//   - An entry lives until its expiry in Redis time (now + the ttl its
//     holder gave); a reading counts only entries not yet expired and
//     deletes the expired ones on the way, so a killed worker's capacity
//     leaves within its ttl. Each hash's own TTL is at least its latest
//     entry's.
//   - The keys are plain (keys.go), not slot-tagged: one hash for every
//     worker, one per task queue. Every script gets its key in KEYS[1] and
//     stands alone (clock.lua, no lib.lua: scripts.go).
//   - A worker's heartbeat field is "@1:<id>": the process runs pre-claimed
//     jobs (Preclaimable). Its value keeps the format earlier versions
//     parse, and their plain-id entries keep the dispatchers from
//     pre-claiming while they live.
//   - Time is Redis TIME read in the scripts, integer µs; Config.Clock
//     passes a fake now through the same argument in tests.
package fleet
