// Package worker runs Sluice's webhook and http jobs inside an asynq.Server
// (docs/design.md §2.3). A Worker is the server's asynq.Handler for the queues
// Queues() names: a task is a batch of jobs (or one job of an earlier
// dispatcher); for each job it waits on the monotonic clock until the job's
// slot (converted from Redis time through a Clock; one scheduler wakes
// every waiting job of the process, precise to well under a millisecond),
// claims the job (the claim is the go-check), executes it with the job's
// timeout, and finishes it with the classified outcome. It always returns
// nil to asynq once the task's jobs are settled: Sluice owns retries and
// recovery, and asynq runs every task with MaxRetry(0).
//
// A DequeueGate (gate.go) on the asynq server's own Redis client keeps the
// server's idle polls off Redis: a hand-off queue is polled when a
// dispatcher announces a batch on it, or as a safety net.
//
// Besides the handler, a started Worker heartbeats its concurrency into
// Redis (the dispatcher releases no more jobs than the live workers can
// hold) and refreshes its Clock. It keeps no state outside Redis: killing it
// at any moment loses nothing (the dispatcher's sweep returns its jobs).
//
// # Invariants
//
// These hold for the Worker and for package sluicetask, which runs the same
// protocol around users' handlers:
//
//   - Never send before the claim said ok, and send at the claim's SendAt
//     (store.ClaimedJob.SendAt), never earlier. A pre-claimed job (the pass
//     claimed it: wire.Payload.Claimed, store.PreClaimed) counts as
//     claimed ok at its SendAt; it takes no claim (claims outcome
//     "preclaimed").
//   - Never claim a release whose send time + grace (its lease) has passed
//     on the Redis clock estimate: it is dropped unclaimed, without a job
//     slot (claims outcome "lapsed"), for the sweep. A pre-claimed job is
//     dropped so from its send time + grace/2 on, also after waiting for
//     its job slot: its attempt then ends at least grace/2 before its
//     lease (send + timeout + grace). It is given back at once
//     (wire.FinishLapsed: head lane, no attempt used), not left to the
//     sweep at its lease's end.
//   - While this worker's last claim or finish failed (not stale), send a
//     pre-claimed job only once Store.Confirm finds it running at its gen;
//     else drop it unsent (claims outcome "unconfirmed"). A confirmation
//     that Redis answered, or a claim or finish that succeeded at its
//     first try, ends this.
//   - Send a finish that Redis did not answer, or could not take now
//     (finishRetryable), again until finishTimeout:
//     one given up makes the sweep send an attempt that was made again.
//     Never send again one the Store answered (stale, not found, invalid).
//   - Say, in the heartbeat, that this worker runs pre-claimed jobs
//     (internal/fleet): dispatchers pre-claim only while every live worker
//     does.
//   - Always finish with the claimed gen; return nil to asynq once settled
//     (a batch: once every one of its jobs settled).
//   - Deliver at most Concurrency jobs at once.
//   - Claims and finishes go through store.Coalescer, which sends a shard's
//     waiting requests together and never delays the first; a claim call
//     claims in job id (creation) order, so a tenant's jobs that meet in one
//     call follow its send schedule instead of reserving turns behind each
//     other.
//   - Never send a webhook unsigned unless its tenant's policy says
//     unsigned: no key and not unsigned is a permanent no_webhook_secret.
//     No secret is logged, counted or shown.
//   - Serve returns at most the shutdown timeout + StopSlack after its
//     context ends, with asynq's servers stopped or, when one is stuck
//     (its fetch loop in a Redis round trip), left running with a
//     *StuckError; their Redis client is then never closed under them.
//
// # The dequeue gate
//
// The DequeueGate (gate.go) answers only asynq's dequeue of a queue known
// empty, and never while the hand-off channel is not heard. It holds one
// only while every gated queue is known empty, no longer than the next
// safety-net poll; a held dequeue whose safety-net poll finds the queues
// empty is held again, up to 20 safety nets, never while the channel is not
// heard (an empty answer would put asynq to sleep for its task-check
// interval); nor is one answered empty while a quiet per-job queue's
// safety-net poll is due: it polls that queue. A queue's safety-net poll is
// marked sent when it is sent, so the held dequeues of the worker's other
// servers wait for it instead of repeating it. An announcement wakes one
// held dequeue — a token each, not a broadcast, which sent every server to
// a queue holding one batch —, a change of hearing wakes them all. It
// redirects a dequeue only to an announced hand-off queue, or to a quiet
// per-job queue whose safety-net poll is due (asynq acks by the queue its
// message names).
//
// # Signing keys
//
// A send signs with what the claim returned beside the job
// (store.ClaimedJob.Signing: claim.lua reads the tenant's live secrets by
// API and its policy's unsigned flag once per call and tenant, the same
// reply secrets_read.lua gives), opened by SigningKeys.KeysFrom (each sealed
// secret opened once, a cache by tenant and sealed text), so a send reads
// no extra key. Only a claim that could not give them (a corrupt stored
// secret) falls back to SigningKeys.Keys: its cache, refreshed from
// secrets_read.lua only when the shard's version moved
// (store.SettingsVersion: the policy epoch #v and the secrets counter #sv
// that secrets_write.lua bumps, both in the shard's policy hash), read at
// most twice a second per shard; callbacks use that path too. The keys are
// the secrets by API and the configuration file's. An http job's result
// settings (results.go: ResultSettings) are read the same way, again only
// when the shard's settings version moved.
//
// # Callbacks
//
// Every worker process runs Callbacks (callbacks.go, docs/design.md §4.4):
// per shard, when the shard's channel <p>:{sN}:callbacks announces one,
// when the earliest due time its last take reported comes, and at least
// every CallbacksConfig.Poll (2 s: a safety net), store.TakeCallbacks leases the due ids;
// the sender reads the record, POSTs {"type":"job.<state>","timestamp",
// "data": jobview.Of(job)} signed with SigningKeys through the executor's
// egress-guarded client, and store.CallbackDone removes it, re-queues it at
// the tenant's backoff or drops it after retry.max_attempts (at once on an
// egress refusal).
//
// # Upstreams and cost
//
// An upstream's settings come through one store.UpstreamCache per process
// (NewUpstreamCache), shared by the Worker and its CostReader. For each
// upstream of a job with a concurrency the worker takes a lease before the
// send, in name order, keeping those it holds while it waits for the next
// (no cycle: every job asks in the same order); it waits while one is full
// (woken by a local release or a jittered 10–250 ms backoff), gives the job
// back to its lane after grace/2 (an upstream-scope throttle, no attempt
// used), and releases the lease when the attempt returns (upstreamrun.go).
// An upstream's pause_scope and adaptive rate: upstreams.go
// (Config.UpstreamRates). Cost correction (cost.go): CostReader reads an
// attempt's actual cost from the response header its upstreams name; the
// finish corrects the tenant's TAT, and after a finish that was not stale
// CorrectUpstreams charges the same difference to each upstream the job
// names (store.ChargeUpstream). Pacing per upstream (upstreams.go): the
// quota an answer reports to a job naming an upstream with pause_scope
// upstream and pacing headers goes to that upstream (UpstreamAnswer, with
// the attempt's cost correction), not to the tenant's finish.
//
// # Circuits
//
// Circuits (circuit.go, docs/design.md §4.5) guard the WebhookExecutor's
// sends by destination: a destination this process knows to have failed
// (its view of <p>:circuits, re-read at most every 250 ms while sending)
// is asked about before each send (store.CircuitGate); one that never
// failed costs nothing. A job whose destination is open finishes as
// FinishDeferred (no attempt used, never dead); every timeout or
// connection failure is reported, and an answer when the destination is in
// the view or the job was the probe. Errors fail open: the job is sent.
//
// # Files
//
// handler.go (the asynq handler of batches, and of an earlier dispatcher's
// per-job webhook and http tasks), scheduler.go (the one scheduler),
// clock.go (the Redis clock estimate), webhook.go (WebhookExecutor), gate.go,
// signing.go, results.go, callbacks.go, cost.go, circuit.go, upstreams.go,
// upstreamrun.go, settings.go (following the settings in meta), servers.go
// (running the asynq servers: Fetchers of them, each fetching one batch per
// round trip), metrics.go, task.go (ProcessTaskJob, what sluicetask runs).
package worker
