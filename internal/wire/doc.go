// Package wire is the contract between Sluice's processes (docs/design.md §2.2,
// §2.3, §2.5, §3): what the dispatcher hands to asynq and what a worker or
// the sluicetask middleware reads back, the job types, the outcome of an
// attempt a worker reports, and the schema of the deployment's meta hash.
//
// It holds types, constants and pure encoders only: no Redis, no HTTP, and
// it imports no other Sluice package, so every process can depend on it
// without depending on the others' internals.
//
// A change here is a protocol change between processes of different
// versions, which run side by side during an upgrade: add fields, never
// reuse or repurpose a name. CheckName is the rule for names that go into
// URL paths and Redis keys (tenant ids, upstream names).
package wire
