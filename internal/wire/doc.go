// Package wire is the contract between Sluice's processes (docs/design.md §2.2,
// §2.3, §2.5, §3): what the dispatcher hands to asynq and what a worker or
// the sluicetask middleware reads back, the job types, the outcome of an
// attempt a worker reports, and the schema of the deployment's meta hash.
//
// It holds types, constants and pure encoders only: no Redis, no HTTP, and
// it imports no other Sluice package, so every process can depend on it
// without depending on the others' internals.
package wire
