// Package dispatch runs Sluice's dispatch loops (docs/design.md §2.2): per shard,
// it holds the shard's lease, runs the pass script (promote, sweep, release
// due jobs at their tenants' rates) and hands the released jobs to asynq.
//
// # Hand-off
//
// A pass's webhook and http releases go in batches (package wire's
// TaskTypeBatch): in send-time order, at most BatchMax jobs and BatchSpan
// of send times each, on the shard's hand-off queue (wire.HandoffQueueOf),
// with the task id "b:<first job id>:<its gen>" (a repeated enqueue
// conflicts), MaxRetry(0) and a whole-second timeout covering, for its
// latest job, the wait for the slot, one late claim, the attempt and the
// grace. After the pass's batches are in, the queue's name is published
// once on wire.HandoffChannel: workers poll a hand-off queue when told. A
// task job goes as one task to its producer's queue, id "<job id>:<gen>".
//
// # Wake-ups
//
// After a pass a shard loop sleeps until the pass's NextWake (a ready score
// − D, a delayed job's due time or a lease deadline), at most MaxSleep
// (default MaxSleepDefault, 2 s: a safety net only). A script that moves a
// shard's earliest time earlier PUBLISHes it on the shard's wake channel;
// one SUBSCRIBE connection per Dispatcher carries the channels of all
// shards and wakes the shard's loop at that time − D. When that
// subscription is lost and restored (go-redis subscribes again on a new
// connection), messages published meanwhile are lost: every shard passes
// at once. A pass that stopped at a bound (More) while free worker
// capacity is left runs again at once — unless it changed nothing while
// fair shares are on (the tenants it read hold their shares: the next pass
// would read them again): then it waits for the next capacity reading,
// as a pass that used its share up does. Idle tenants cost nothing; an idle
// shard costs one cheap pass per MaxSleep.
//
// # Shard leases
//
// Each shard is passed by the Dispatcher holding <p>:dispatch:lease:<shard>
// (SET NX PX with a random owner token, renewed every LeaseTTL/3 — a loop
// wakes for it between passes —, deleted on Stop; a crashed owner's lease
// and membership expire after LeaseTTL, and another replica takes the
// shard within LeaseTTL/10 more). The Dispatchers register in <p>:dispatch:members and
// each holds at most its fair share, ⌈shards / members⌉: one above it gives
// leases up at renewal, one below it tries free leases every LeaseTTL/10,
// so dispatch work spreads over the replicas. Leases are for efficiency
// only: the scripts are atomic and fenced by generations, so any number of
// Dispatchers passing one shard at once never release a job twice
// (DisableLeases runs without them).
//
// # Back-pressure
//
// Workers heartbeat their concurrency; a pass may release at most its share
// of the free capacity (Capacity − InFlight − the batch tasks waiting in
// the hand-off queues, split across the shards this Dispatcher owns, at
// least a batch's worth, 64, while that much is free — 16 unless the
// shard's last pass used its share up or released 16 jobs or more: a
// release swept while its task waited leaves a stale copy a worker must
// still fetch, see budget), read by one goroutine so that no pass waits on the
// reading — on demand only: after passes that released jobs, at most every
// CapacityRefresh, and every 2 ms while loops wait for capacity — or,
// while the last reading lent a pass's worth of headroom, once the
// workers ended half of it (at most CapacityRefresh): a reading then frees
// enough for passes and batches of tens of jobs; an idle
// Dispatcher reads none. When it is used up the loops wait for the next
// reading.
//
// Fair shares (fairshare.go): while the pool is contended — within the
// last second a reading found 7/8 of the capacity in use, or the passes
// used the free capacity up — every pass also gets λ, the workers' slots
// per unit of tenant weight, one number for all shards: (capacity −
// ⌈capacity/16⌉) ÷ the largest fair-share weight (store.FairWeights:
// tenants holding slots, and those left waiting with none) read in the
// last second. The pass holds a tenant at max(1, ⌊weight·λ⌋) running +
// released jobs. Uncontended, λ is 0: no cap but concurrency.
//
// A released task job whose queue has no live middleware is not handed to
// asynq (the sweep returns it after its grace). Batch tasks asynq archived
// (past their timeout, or their worker died) are deleted once archived
// longer than the dead-letter retention (archive.go).
//
// Errors (Redis unavailable) are logged and counted; the loops back off and
// resume by themselves. A Dispatcher keeps no state outside Redis: killing
// it at any moment loses nothing (the sweep returns jobs it released but did
// not hand to asynq, after their grace).
//
// # Invariants
//
//   - At most one Dispatcher passes a shard at a time (lease), but the
//     scripts stay correct without it; nothing is acknowledged — a release
//     that never reaches a worker returns by the sweep once its send time
//     and grace have passed.
//   - The free capacity counts the batch tasks waiting in the hand-off
//     queues (LLEN of asynq's pending lists) besides the leases: a swept
//     release's task stays queued as a stale copy, and without counting
//     them a worker starved of CPU was handed a new copy of every job per
//     grace and stalled; counted, the stale copies stay within about the
//     capacity.
//   - A pass's share of the free capacity is reserved until the pass ends
//     (what it did not release goes back), and jobs released while a
//     reading runs come off that reading: the passes of several shards
//     running at once, or a reading racing a release, never hand the same
//     free capacity out twice.
//   - On top, the budget lends headroom (budget.go): the jobs the workers
//     ended in the last whole second (store.FinishRate, read in the
//     background at most every 250 ms while readings are taken and find the
//     workers at least half busy) × grace/4, at most twice the capacity, so the
//     workers never wait for a finish → reading → pass → hand-off round (by
//     Little's law that round bounded the throughput at 100 slots). Only
//     ended jobs count — a lease the sweep removed is no completion, so a
//     starved worker gets no headroom (worker's
//     TestStarvedWorkerResumesAtOnce) — and a rate older than 3 s lends
//     nothing. The workers' total concurrency is reused for up to a second
//     between readings, except a total of 0 (a throttler that started
//     before its first worker, or outlived its workers), read again at the
//     next reading.
//   - λ is 0 unless the pool was contended within contentionMemory, and
//     never above (capacity − R) ÷ the weights read: the shares of the
//     tenants counted sum to at most capacity − R, R = ⌈capacity/16⌉
//     slots left for tenants below their shares. The weights are read at
//     most every 100 ms, only while contended; W is the largest read in
//     the last second, so a dip in a quick tenant's holdings does not raise
//     λ.
//   - A batch holds jobs of one shard only, in send order, at most BatchMax
//     and BatchSpan apart; every batch enqueued is announced on the hand-off
//     channel after the pass's enqueues; task jobs are never batched (users'
//     asynq servers run them one task each).
//   - Archived hand-off tasks (asynq keeps their hashes without a TTL) are
//     deleted once archived longer than the dead retention.
//   - The state metrics' top-N tenants and "_other" (state_tenants.go) are
//     read in the background, one read at a time, a scrape answering the
//     last complete one; a read serves for max(CacheFor, 20 × its duration),
//     so the walks take at most about 5 % of the time.
//
// # Pub/sub on a Cluster
//
// The wake channels (<p>:{sN}:wake, published inside the scripts) and the
// hand-off channel (<p>:handoff) use classic PUBLISH/SUBSCRIBE, on purpose
// for now. A Cluster accepts them on any node and relays every message to
// every node over the bus, so one subscriber connection hears all shards,
// exactly as on one Redis (the integration packages run on a Cluster too).
// Sharded pub/sub (SPUBLISH/SSUBSCRIBE) would keep a wake-up on its
// shard's node, but needs a subscription per slot's node that moves with
// failovers and a change to the hot-path scripts' PUBLISH, and the
// hand-off channel has no shard. Worth it when the bus traffic shows in a
// Cluster's CPU.
//
// # Files
//
// ownership.go and lease.go (shard leases), loop.go (pass timing and
// wake-ups), budget.go (the capacity budget), fairshare.go (λ, the fair
// shares of the pool), handoff.go (hand-off to
// asynq), upstreams.go (asking the upstreams' coordinators for the segments
// a pass found missing; dead-lettering the jobs of an upstream they answer
// does not exist), archive.go (the trim of archived hand-off tasks),
// meta.go (following the settings in meta), state_metrics.go and
// state_tenants.go (state metrics), owners.go (ShardOwners, who holds each
// shard, for the console), keys.go (this package's keys).
package dispatch
