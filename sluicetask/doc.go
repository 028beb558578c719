// Package sluicetask runs Sluice `task` jobs in your own asynq workers
// (docs/design.md §2.5). It is an asynq middleware: wrap the handlers of an
// asynq.Server that serves the queues your producers name in task jobs, and
// Sluice's guarantees extend to them.
//
// # The protocol
//
// A producer enqueues {"type":"task","task_type":"email:send",
// "queue":"default","payload":{…}} with Sluice's API. Sluice keeps it in the
// tenant's backlog and, at the tenant's rate, hands it to the asynq queue
// "default" as a task of type "email:send" with an empty payload and the
// headers sluice-job (the job id), sluice-gen (its generation) and
// sluice-slot-us (the instant it may run, Redis time in µs), shortly before
// that instant. The middleware then does what Sluice's own workers do
// (docs/design.md §2.3):
//
//  1. wait on the monotonic clock, against an estimate of Redis's clock,
//     until the job's slot;
//  2. claim the job (one Redis script: the generation must be current, the
//     job not canceled, the tenant neither paused nor at its concurrency
//     cap) — a duplicate, canceled or returned job runs nothing;
//  3. call your handler with a task whose type is the job's task_type, whose
//     payload is the job's payload (the raw JSON bytes) and whose headers are
//     the delivery's, under the tenant's per-attempt timeout;
//  4. finish the job with the outcome: nil is a success; an error made by
//     Throttled pauses the tenant without using an attempt; an error made by
//     Permanent, or wrapping asynq.SkipRetry, is a dead letter; any other
//     error, or a panic, is retried through Sluice's backoff. An actual cost
//     the handler reported with SetCost goes with the finish: Sluice charges
//     or refunds its difference to the reserved cost on the tenant's and the
//     job's upstreams' schedules.
//
// It keeps the rules of Sluice's own workers: nothing runs before the claim
// said ok, a delivery whose lease (its slot + grace) has passed on the clock
// estimate is not claimed (the sweep returns it), and the finish always
// carries the claimed generation.
//
// The wrapper returns nil to asynq once the job is settled: Sluice owns
// retries (the tasks are enqueued with MaxRetry(0)). Only a task whose sluice
// headers do not parse, or one that arrives before Start, is returned as an
// error (asynq archives it; Sluice's sweep returns the job). A task without
// any sluice header is not a Sluice job: it goes to your handler untouched.
//
// # Guarantees
//
//   - Rate: a tenant's jobs start no faster than its rate and burst allow;
//     concurrency: no more than its concurrency run at once (claim → finish),
//     across every worker.
//   - Retries go back through the tenant's own bucket with the policy's
//     backoff (min_backoff, max_backoff, max_doublings, max_attempts,
//     max_retry_duration); exhausted or permanent failures become dead
//     letters, visible and replayable through the API.
//   - kill -9 safety: the middleware keeps no state outside Redis. A job
//     released to a worker that dies before claiming returns to its tenant's
//     backlog when its lease expires; one that dies while running is retried
//     after claim + timeout + grace (the only way a job can run twice).
//     Within an attempt, use JobFromContext's ID as an idempotency key
//     upstream.
//
// # Heartbeats
//
// A started Middleware heartbeats every queue it serves into the Redis hash
// <prefix>:mw:<queue> (instance id → concurrency, expiry in Redis time,
// TaskCheckInterval); Sluice's API answers an enqueue of a task job for a
// queue without a live entry with 422 no_task_worker. It also heartbeats its
// concurrency once (not per queue) into <prefix>:workers under
// "mw:<instance>", so the dispatcher's back-pressure counts it with the
// capacity of Sluice's own workers: a deployment that runs only task jobs
// needs no Sluice worker at all. Stop withdraws both at once; a killed
// instance's entries expire after three heartbeat intervals.
//
// # Settings
//
// The middleware takes none of Sluice's configuration file: shards,
// dispatch.min_lead, the claim tolerance, retention and throttle are the
// deployment's, kept in <prefix>:meta. Start reads them there; the
// adjustable ones (everything but shards, dispatch.lead and
// dispatch.min_lead) are re-read every few seconds, so a throttler
// restarted with a new configuration changes them without restarting the
// middleware. Started before any Sluice process has written <prefix>:meta,
// the middleware logs a warning and uses Sluice's defaults, following the
// settings once a throttler writes them (shards and dispatch.min_lead from
// its next Start).
//
// # Running it
//
// Start the Middleware before the asynq server and stop it after
// (srv.Shutdown, then Stop). Config.Concurrency and TaskCheckInterval must
// be the asynq server's: asynq picks a task up to 1.5 × TaskCheckInterval
// after it was enqueued, and Start refuses unless Sluice's dispatch.min_lead
// covers that plus two Redis round trips (asynq's default interval, 1 s, is
// far too slow; 20 ms is typical). Give the server a ShutdownTimeout of at
// least 2 × dispatch.lead + the largest per-attempt timeout + 2 s. The
// server may serve other queues too; their tasks pass through.
package sluicetask
