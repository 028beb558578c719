// Package store is Sluice's Redis layer for jobs and tenants
// (docs/design.md §2–§3): the one package that reads and writes job and
// tenant state. It holds
// job records, the per-tenant backlog, head lane and upstream lanes, the
// shard's ready, delayed and lease sets, per-tenant policies, and the
// scripts that change them atomically — enqueue with token-bucket
// admission, cancel, the dispatcher's pass (promotion, lease sweep, paced
// release), the workers' claim and finish (one job, or many of one shard in
// one script: ClaimBatch, FinishBatch, and the Coalescer that batches
// concurrent callers; Enqueue batches its concurrent callers by itself,
// batcher.go), the admin pause/resume, dead letters and replay —
// the tenant index and listings, results and callbacks, webhook secrets by
// API, a shard's side of shared upstreams, and the meta hash. The upstream
// registry and coordinator (internal/quota) and the worker roster
// (internal/fleet) keep their own slots in their own packages; a Store
// embeds both.
//
// Every operation on a tenant or a job is one Lua script on one shard (one
// Redis Cluster slot). The clock is Redis TIME read inside the scripts, in
// integer microseconds; Config.Clock injects a fake one for tests.
//
// # Where things are
//
//   - every key name: keys.go (and lua/lib.lua's key builders, the Lua twin,
//     which the tests tie to it); every script's registration: scripts.go,
//     functions.go (the Redis Functions library; allowOOM);
//   - the hot path: enqueue.go, pass.go, claim.go, finish.go, coalescer.go,
//     batcher.go (the shared calls of enqueues and of the Coalescer),
//     protocol.go (the types the dispatcher and workers exchange); a pass
//     planned in Go (Config.Planner PlannerGo: planpass.go, its reads and
//     the internal/plan decisions, lua/plan_apply.lua its writes);
//   - a tenant's state and forecast (tenant.go: TenantState.Forecast;
//     admitted.go: AdmittedSince), the listing (tenantlist.go,
//     tenantpage.go: Tenants, TenantNames, TenantViews, TenantKeys) and the
//     index backfill (backfill.go);
//   - the fair-share weights of the workers' pool (fairshare.go:
//     FairWeights);
//   - the observation aggregates (observe.go: Observe, RebuildAggregates;
//     lua/lib.lua AGG, lua/observe.lua, lua/observe_rebuild.lua);
//   - the finished-jobs counter (finished.go: Finished, FinishRate), a
//     tenant's recent attempts (recent.go), results and callbacks
//     (result.go, callbacks.go), webhook secrets (secrets.go), policy
//     storage (policy.go; ParamsOf derives the scripts' integers from a
//     policy.Policy), the meta hash (meta.go: EnsureMeta, WriteMeta,
//     ReadMeta), WAIT confirmation (replication.go);
//   - a shard's side of shared upstreams: a job's upstream list
//     (upstream_names.go), the pass's grant arguments and demand
//     (upstream_pass.go; PassGranted in pass.go), the shard's waiting sets
//     (upstream_pass.go: UpstreamWaiting), jobs left naming a deleted
//     upstream (upstream_orphans.go); the jobs occupying workers
//     (inflight.go: InFlight, FreeCapacity); the destinations' circuits
//     (circuit.go: CircuitGate, CircuitRecord, Circuits, CloseCircuit,
//     TenantCircuits — one plain hash <p>:circuits, lua/circuit.lua; a
//     deferral is Finish's FinishDeferred, docs/design.md §4.5);
//   - in packages of their own, which a Store embeds (their methods are
//     its): the upstream registry and coordinator, internal/quota
//     (PutUpstream, GrantUpstreams, AlignUpstreams, UpstreamSettings behind
//     UpstreamCache, ChargeUpstream, AcquireUpstreamRun, …), and the worker
//     roster, internal/fleet (Heartbeat, Capacity, TaskHeartbeat, …).
//
// The deployment's timing, retention and throttle defaults are exported
// here (LeadDefault, GraceDefault, SucceededRetentionDefault, …) and
// applied by WithDefaults; their values are declared once in
// internal/tuning, which the configuration resolves its file with. A
// tenant's policy defaults are in package policy. The scripts take a policy as
// integers (Params, from ParamsOf; the Lua BUILTIN table is DefaultParams,
// ParamsOf(policy.Builtin())), stored per shard in <p>:{sN}:policy as
// integer JSON and merged BUILTIN ← "*" ← tenant on every script call, so a
// PUT applies at once. Every write of a policy or of a secret by API renews
// the hash's epoch "#v", by which the scripts remember the policy texts
// (the defaults' and the tenants') and, for claims, the tenants' secrets
// hashes across calls (lib.lua load_policy, signing_set): a write of either
// by other means must renew it too, or scripts may go on with what they
// remembered. The key names of the last call's shard are remembered too
// (lib.lua begin).
//
// # Invariants
//
//   - A planned pass (Config.Planner PlannerGo) writes, in plan_apply.lua,
//     only tenants whose fields s, rs, f0 and ff are still the ones its
//     plain reads saw, and decides nothing there; so every script that
//     changes a tenant's backlog, counts or schedule changes its s (or, a
//     fast finish, its ff). It leaves Redis as pass.lua would have
//     (plan_apply_test.go), and falls back to pass.lua for everything
//     internal/plan does not decide.
//   - Every state change of a job or tenant is one Lua script in one slot,
//     reads before writes. A shard script declares one key, KEYS[1], the
//     shard's ready set; ARGV[1] is the shard base "<p>:{sN}:", checked
//     against KEYS[1] (lib.lua begin), and every other key the script
//     touches is built from it, so all carry the shard's hash tag {s<shard>}.
//     meta.lua stands alone and declares its one key in KEYS (so do the
//     scripts of internal/quota and internal/fleet, each in one slot).
//   - Time is Redis TIME (tests pass now through the same argument);
//     integers at the Lua boundary (µs).
//   - gen fences every transition: a stale claim or finish changes nothing
//     but the attempt log.
//   - A shared call (the batcher: enqueues of one shard, the Coalescer's
//     claims and finishes) decides each request as if it were alone, in
//     arrival order, and answers each its own result; an enqueue call reads
//     every policy and tenant of its requests before its first write, so a
//     corrupt policy fails the whole call with nothing written.
//   - One claim transition (lua/lifecycle.lua CLAIM.run): claim.lua's and
//     the pass's pre-claim of due jobs (PassConfig.Preclaim; PreClaimed
//     reads one from the hand-off) are the same code. A pre-claimed job
//     (record field pc = its gen) whose lease ran out without a finish is
//     swept as a lost release, not as a crashed attempt.
//   - reschedule(tenant) after every change, so a tenant never sits in
//     ready at a score it cannot use (claim and finish skip it when what the
//     score depends on is as the last reschedule left it: tenant field rs).
//   - Every script that moves a shard's earliest time earlier publishes it
//     on the shard's wake channel.
//   - Every key has a TTL or is reachable from a tenant or a shard.
//   - A tenant's state is one packed field (s, lib.lua T_FIELDS; rs beside
//     it), read and written whole, its trailing zero values left out (a
//     shorter s reads the fields past its end as 0); a field stored under
//     its own name (the representation before) is read over it and folded
//     in at the next save. A job record holds no field at its default
//     (gen, attempt, run_at 0; idem, dst, cb, ups empty): readers take an
//     absent field for it. Its recent attempts are a separate key, <p>:{sN}:t:<tenant>:ra,
//     appended by finish only (recent.lua), read by RecentAttempts.
//   - Fast finishes (lib.lua T_FIELDS.mint, fold): a tenant's save mints
//     tokens in its fields ff and f0 (with fx for a tenant held at its
//     fair share with one job running) for as many of its running jobs as
//     may finish without anything of it but running, ready and rs
//     changing — dead set known empty (dz = 1; flush_tenants reads a set
//     never read of a tenant with jobs running), no quota to pace by, rate
//     factor full, no lanes, below its concurrency, its digest rs as a
//     finish computes it (or, held at its fair share, the pass's), and it
//     keeps a backlog or another job running. A plain success of a tenant
//     the call has not read takes one with HINCRBY instead of a load and a
//     save, moves the aggregates (and, with the last token of a tenant
//     with nothing released, the held weight) itself, and puts a tenant
//     held at its share back in ready. Every load folds the tokens taken
//     into running (and fw), so no reader sees the difference; the next
//     save mints afresh. A plain success that finds none has counted its
//     running − 1 through the token all the same and goes on as a full
//     finish.
//   - Fair shares (fairshare.go, lib.lua FAIR): tenant field fw is the
//     tenant's policy weight while it holds a worker slot (running +
//     released > 0), else 0, and <p>:{sN}:fair field w is the sum of its
//     shard's fw — every save_tenant moves both together (one HINCRBY when
//     fw changes, one per call for the pass and a batch of finishes; a sum
//     of 0 is deleted), so no script keeps the sum apart.
//     Only a pass given λ (PassConfig.FairShare > 0) blocks a tenant for
//     its share ('fair'); its digest rs records it, so the next claim,
//     finish or sweep of the tenant (which hold no λ) reschedules it: a
//     tenant held at its share holds a slot, so one of them comes.
//   - Observation aggregates (lib.lua AGG): once a shard's are built (agg
//     field v), its agg or (open + running · 2^32) and dead equal the sums of its
//     tenants' live + running, running and dead letters; top holds every
//     tenant with live > 0 scored by live; gate:a|u|d|p hold every tenant
//     admin-paused, upstream-paused, disabled, paused and not disabled,
//     scored by the end (entries past their end may stay). save_tenant
//     keeps them from what load_tenant read (no script changes live,
//     running or a gate but through save_tenant), the dead-set writers
//     through AGG.dead_add, a dead set expired by its TTL is taken out by
//     the next Observe or the pass's check of its tenant's index entry
//     (index_trim, whether the tenant leaves the index or stays listed:
//     TestIndexTrimForgetsAListedTenantsExpiredDeadSet), so an unobserved
//     deployment keeps nothing of it; TestObserveStaysExactThroughEveryTransition checks
//     them against a walk of the tenants after every kind of transition.
//     A process of a release before them does not keep them:
//     RebuildAggregates after a rolling upgrade. A build walks the
//     tenants in name order, RebuildChunk a call; while it runs the
//     scripts note only the changes of the tenants it has counted (its
//     cursor, the policy hash's field "#ab", read with the policy:
//     lib.lua AGG.counted), so the aggregates are exact when it ends
//     (TestAggregatesBuiltInChunksStayExact).
//   - A job to a destination whose circuit is open for its tenant (record
//     field dst, set at enqueue; the tenant's <p>:{sN}:t:<tenant>:circ, field
//     cu) is held by the pass without a slot (pass.lua X.hold), unless the
//     gate deferred it (record field hd = 0): it then goes back to the gate
//     at its due (docs/design.md §4.5). Only a tenant whose cu is after now
//     pays the read.
//   - Tenant fields in_m, in_c, in_p count admitted tokens by minute
//     (enqueue's save, no extra command; the forecast's input); they expire
//     with the hash.
//   - The functions that deliver or free — pass, claim, finish, cancel,
//     callback take and done — and the reads are registered allow-oom
//     (functions.go allowOOM, part of the library's version): with
//     maxmemory and noeviction Redis refuses FCALL of a function without
//     flags before it runs, even one that only deletes, so without the flag
//     a full Redis would refuse the finishes of jobs already sent and they
//     would be sent again. Enqueue, replays, policy and secret writes,
//     pause/resume and the backfill keep Redis's refusal (the API's memory
//     guard refuses new jobs before it is reached; see package api).
//   - Secrets: the store holds only sealed values (package secretbox, the
//     tenant id as additional data); nothing here logs or counts one.
//   - With Config.WaitReplicas N > 0 a write is confirmed by WAIT N on the
//     connection that ran it (replication.go; redisscript.RunFunctionWait).
//
// # The tenant index
//
// <p>:{sN}:tenants (ZSET tenant → next check, µs) holds every tenant of the
// shard with state — a hash, dead letters or policy overrides. A tenant
// enters it when its hash is created (save_tenant: one ZADD per creation)
// or its overrides are written; when it goes idle, expire_tenant's PEXPIRE
// is joined by one ZADD making its entry due a second after the hash
// expires, or when the retention of the jobs that just ended runs out if
// later (nothing for a busy tenant's jobs; the creation's hour-long recheck
// time is replaced, not kept: a tenant drained under a short retention
// leaves with it); an entry leaves when a check finds no state left: each
// pass checks up to 64 due entries (index_trim, after its release work) and,
// when it found that many due, asks for the next pass 100 ms on (its next
// wake), so a million tenants drained at once leave the index in about
// 1 000 000 ÷ (64 × 10 × shards) seconds, not at 64 per idle pass; the
// listing drops the empty ones it meets (index_remove). Its name set <p>:{sN}:tenant_names (ZSET, every member at
// score 0) holds exactly the same members, so sort=name pages it with
// ZRANGE BYLEX from the cursor in each shard, merged (TenantNames; a name
// prefix is a lexicographic range too, "[prefix" to "(prefix\xff" — no
// tenant id holds that byte — so a search costs what a page does), reading
// views only for the page (TenantViews, one script per shard): O(limit ·
// shards) per page. Every write that adds a tenant new to the index adds
// its name (save_tenant's creation, policy_put, the backfill), every
// removal removes both; expire_tenant only moves an existing entry's check
// time. sort=backlog|oldest and the metrics walk the index with ZSCAN
// (every entry present throughout is met; TenantKeys reads only the sort
// key and state, Tenants a summary). Nothing on the hot path reads them.
// The keyspace audit (audit_test.go) checks that every tenant hash is in
// its index and that the name set equals the index.
// BackfillTenantIndex (run in the background by cmd/throttler at start,
// once per shard: marker <p>:{sN}:tenants_backfilled) adds the tenants of a
// release before the index — SCAN per master for <p>:{sN}:t:*, the policy
// hashes' tenants — in batches of 500 (lua/tenant_backfill.lua:
// index_check's score, ZADD NX, idempotent).
//
// # The finished-jobs counter
//
// Every finish adds the jobs it ended (succeeded, or dead by the attempt)
// to <p>:{sN}:finished (HASH Unix second → count; one HINCRBY per finish
// call, at its end). The second's first call (the field is new) drops the
// fields older than 11 s and sets the key's TTL to 11 s, so the hash holds
// at most 12 fields and expires 11 s after its last second. Finished
// (lua/finished.lua, one HMGET per shard) adds the whole seconds of a
// window before now's: the console's deployment-wide deliveries per second,
// right with any number of throttlers and workers because the count lives
// in Redis. FinishRate (the same script, which also answers now's second so
// far) divides the last whole second and the current one by the time they
// span, for the dispatch budget's headroom. The sweep's dead letters (lease
// expired, no finish) and cancels are not counted.
//
// # Results and callbacks
//
// An http job's result (the last attempt's response, JSON as the view shows
// it) and the attempt log's 4 KiB body excerpts live in the job record, so
// they expire with it; finish writes result only for a current attempt. A
// job with a callback has record field cb (enqueue); every terminal
// transition queues it on <p>:{sN}:cb in the same script (lifecycle.lua
// callback_due, which also PUBLISHes on <p>:{sN}:callbacks), so a terminal
// state without its queued callback cannot be observed; an entry leaves the
// set only by callback_done.lua (delivered, dropped, or its job gone or
// live again). The set is a permanent per-shard key like delayed.
// result_headers and upstreams are the non-integer policy fields: stored in
// the policy JSON, read by no script; merge_policy carries result_headers,
// the tenant view (tenants.lua tenant_view) adds upstreams, and enqueue's
// resolution reads them with TenantPolicy (merged in Go).
//
// # Cost correction
//
// Only a current (not stale) finish corrects, in the same script as the
// attempt's outcome, so a job is corrected at most once per attempt; record
// field acost is the latest reported actual cost. The difference δ = actual
// − reserved moves TAT by δ·T_eff: a charge never lowers TAT and is capped
// at now + policy.MaxSpan; a refund never moves TAT below now and never
// raises it. The same rule holds on an upstream's tat
// (upstream_charge.lua), which touches only field tat of the upstream's
// hash and writes nothing for an upstream without params (p). Rates keep
// burst × T ≤ policy.MaxSpan (3.6·10¹⁵ µs), so every TAT stays an exact
// integer in the scripts' doubles; lib.lua interval computes T_eff without
// forming T·10⁶.
//
// The window bound. A job of tenant τ reserves c (its enqueue cost) at its
// release; its attempt's actual cost is a, and δ = a − c is applied to τ's
// TAT when the finish runs. For any window [x, y] of slots, the actual cost
// of τ's jobs slotted in it is at most b + (y − x)/T + E, with
//
//	E = Σ δ⁺ over the window's jobs not yet finished when its last job was
//	    released (charges still due)
//	  + Σ |δ⁻| over jobs slotted before x, released before and finished
//	    after the window's first job was released (refunds of earlier jobs
//	    that landed inside the window's releases)
//	  ≤ concurrency × (max δ⁺ + max |δ⁻|)
//
// (released + running ≤ concurrency at any instant; one of the two terms is
// 0 when every report errs the same way). Proof: take the window's jobs in
// release order, 1 … n. At its release a job gets s ≥ TAT − (b − c)·T and
// sets TAT ← max(TAT, s) + c·T, so just after job n, TAT ≤ s_n + b·T ≤ y +
// b·T, and just after job 1, TAT ≥ s_1 + c_1·T ≥ x + c_1·T. Between the two,
// every release adds its c·T, every charge applied adds its δ·T (its cap is
// about 114 years ahead, ignored here), and a refund subtracts at most |δ|·T.
// Refunds of the window's own jobs subtract exactly what their actual cost
// saves; a job released between the window's first and last release but
// slotted before x added its c·T before its refund can take it back; a
// refund of a later-slotted job cannot land before job n's release (a job
// finishes after its slot, and every slot is ≥ the now of its release). So
// Σ_window a ≤ b + (y − x)/T + E; with δ = 0 this is the plain GCRA bound.
// Shown by TestCostChargesStayWithinTheBoundPlusE (reserve 1, report 5,
// concurrency 3: the worst window exceeds b + ⌊Δ/T⌋ by exactly E = 12),
// TestCostRefundsReachTheTokenRate and
// TestCostMixedReportsStayWithinTheBoundPlusE, over the send instants (the
// claims' SendAt: the send schedule keeps every send at or after its slot
// and the planned distances between sends, so the bound over slots carries
// over). A refund lowers TAT, which pass.lua's gap test (slot > TAT − (b −
// c)·T) can take for a gap and move the send schedule back by up to c·T;
// the claims after it then wait that much (claim.lua send_target) — later,
// never earlier. An upstream's schedule follows the same argument with its
// segments: a refund of its tat below segments already granted can let them
// overlap by at most the refund, and never by more than H/T_U.
//
// # Shared upstream quotas
//
// An upstream (docs/design.md §2.2) keeps its state in its own slot
// {u:<name>}; a pass runs in its shard's slot {s<N>}; no script touches
// both.
//
//  1. Enqueue: a job's upstreams (≤ 4, sorted into record field ups) put it
//     in its tenant's lane for that set, <p>:{sN}:t:<tenant>:l:<ups>
//     (lanes.lua LN.push; the lane set …:lanes, tenant fields uq and qtok),
//     and the tenant in the shard's waiting set of each upstream,
//     <p>:{sN}:uw:<name>. Plain jobs keep the backlog; the c1 fast path is
//     off while the tenant has lane jobs.
//  2. Pass: a tenant with lane jobs releases the oldest eligible of its
//     plain next job and its lanes' heads (pass.lua X.release_lanes): its
//     slot, max(its GCRA slot, pauses, each named upstream's local
//     earliest), is ≤ now + D, and each upstream's shard-local segment has
//     room at that slot;
//     the tenant's TAT and each upstream's local tat are charged there. A
//     head whose upstream has no room adds to the pass's Demand (wanted
//     cost, weight, unit) unless the shard has asked already (its state's
//     next grant time nx is then now + D, so the tenant's ready score is
//     past the horizon: no spin). A head naming several upstreams first uses
//     its set's aligned reservation, else the shard's segments when they
//     give it a common instant; else it adds to the pass's Aligned demand
//     (its set, cost, the span from its lane's first job's slot to its
//     last's at its slowest rate — D/2 at most —, weight, its earliest slot
//     by its tenant alone), once per set per D (the set's nx).
//  3. Coordinator: the dispatcher calls GrantUpstreams for the demand (one
//     pipelined lua/upstream_grant.lua per upstream): the shard's
//     registration (wanted, weight, unit, debt; expiring) is updated and,
//     while the upstream's calendar end tat < now + H (H = D), a round
//     hands consecutive segments [t0, t0 + q·T) to the registered shards in
//     order of virtual finish (served units per weight), t0 ≥ max(tat, now,
//     pu); the caller gets its own (others', kept in <p>:{u:N}:g, at their
//     next call). For aligned demand it calls AlignUpstreams. A coordinator
//     that answers not_found (the upstream was deleted while jobs naming it
//     were delayed, or just before they were enqueued) comes back as an
//     *UpstreamNotFoundError (MissingUpstreams lists them; a Redis error
//     never is one), and the dispatcher calls DeadLetterUnknownUpstream
//     (lua/upstream_orphans.lua, in the shard's slot): the queued jobs of
//     the lanes naming it, created before the pass's now, become dead
//     letters with reason unknown_upstream (no attempt used; a replay clears
//     it), at most 100 per call; the shard's ul state and ua reservations of
//     the upstream go.
//  4. Next pass: PassGranted installs the grants in the shard's upstream
//     states (<p>:{sN}:ul; the aligned grants of a set, whole, as its
//     reservation in <p>:{sN}:ua) and visits the tenants of those
//     upstreams' waiting sets whatever their ready score.
//  5. Worker: the claim carries the job's upstreams; for each with a
//     concurrency the worker takes a lease in the upstream's slot before
//     the send, in name order (AcquireUpstreamRun, lua/upstream_run.lua:
//     prune expired, ZADD <p>:{u:N}:run "<id>:<gen>" now + timeout + grace
//     if fewer than N). A throttle of a job naming an upstream with
//     pause_scope upstream finishes with FinishConfig.UpstreamScope (the job
//     back to the front of its lane, no attempt used, the tenant not
//     paused) and the worker pauses the upstream (pu). For an adaptive
//     upstream the worker reports each congestion signal or success
//     (UpstreamOutcome, lua/upstream_adapt.lua: the tenant AIMD rule on the
//     upstream's factor rf); the coordinator spaces new segments by the
//     effective interval.
//
// Invariants of the upstreams (the registry's and the coordinator's own —
// one slot per upstream, consecutive disjoint segments, the rate bound across
// shards — are internal/quota's, in its package doc):
//
//   - A grant is installed at most once: a pass run again with the same
//     grants (its reply lost: go-redis re-sends a script on a read timeout;
//     the dispatcher keeps a failed pass's grants) finds them below the end
//     of what the shard holds (LN.install keeps only what lies past it; an
//     aligned reservation ending no later than the set's current one is
//     skipped) — installed twice, the same calendar would be handed out
//     twice (TestGrantsInstalledTwiceHandOutNothingTwice).
//   - Lanes: every job queued in a lane is in the tenant's lane set and
//     counted in uq and qtok; cancel, retries, sweeps, claim give-backs and
//     replays keep a job naming upstreams in its lane, never in the backlog.
//
// # Aligned grants
//
// A job naming U1 and U2 leaves only at an instant with room in the shard's
// segments of both. Each coordinator hands its calendar out on its own, so
// under contention from other shards the shard's segments of U1 and U2
// need never overlap, and such a job could wait without bound. So:
//
//   - Demand (pass.lua 3c): a multi-upstream head with no usable reservation
//     and no common instant reports Aligned demand for its set.
//   - Probe, then request (AlignUpstreams): the probe (merged into the plain
//     demand's pipeline) returns each coordinator's tat and whether it is
//     the shard's turn. When all say yes, X = the latest of the head's
//     earliest slot and each known tat and pause end (Calendars, kept per
//     shard loop from every reply), plus a margin H/8 (and a jitter up to
//     H/8 in the dispatcher), and one pipeline asks each upstream for
//     [X, X + q·T), q = c + max(c − B, ⌈span/T⌉, 0). A coordinator grants
//     it before its round when max(tat, now, pu) ≤ X ≤ now + 3H + 2·span,
//     setting tat ← X + q·T; the gap [tat, X) is never handed out. A set
//     refused only because a tat had passed X is asked again at once with X
//     from the replies (≤ 3 tries a call). A set granted by some of its
//     upstreams only gets no reservation (their parts become ordinary
//     segments of the shard: never lost, never unsafe) and asks again.
//   - Sharing (upstream_grant.lua): an aligned segment is an advance on the
//     shard's weighted share — its registration's debt grows by q (and vf by
//     q) and the shard's next rounds repay it first; the probe says "your
//     turn" only when the shard owes nothing, and a request is refused
//     (turn) when it owes more than one segment. So a shard's aligned and
//     plain segments together stay about its weighted share
//     (TestMultiUpstreamJobsShareTheirUpstreams holds it to half ± 0.15);
//     the split is approximate, not exact. (Comparing vf instead starved
//     aligned requests: a shard whose other lanes also wanted the upstream
//     kept its vf ahead forever.)
//   - Reservation (lanes.lua LN.al_*): the shard keeps the set's parts in
//     <p>:{sN}:ua (field: the lane's set; value "nx h tat₁ ceil₁ …"; the
//     key's TTL outlives the furthest entry), used only by heads of lanes
//     of exactly that set, each part with its own local tat under the burst
//     rule; a single-upstream lane never sees it. A reservation that cannot
//     take the head any more is dropped (wasted: safe).
//   - Rate bound with gaps: an aligned part is carved from the calendar at
//     X ≥ tat, so it is disjoint from every other segment; inside it a
//     release at s takes v = max(tat_i, s) under s ≥ tat_i − (B − c)·T (even
//     before X, inside the gap), so v + c·T ≤ s + B·T still holds and the
//     bound above is unchanged: a gap only leaves calendar unused.
//   - Liveness: a multi-upstream head blocked only by its upstreams reports
//     its set within D; its shard's turn comes once its share of each
//     upstream has repaid its last aligned segment; then X ≤ now + H + a
//     segment + H/8 and the pass at X − D releases it: it waits about 2H +
//     H/8 + a segment + the repayment (TestMultiUpstreamJobsLeaveUnderContention
//     holds it to 4·H). Not covered: two shards asking for sets that share
//     upstreams at the same instant may both be refused and retry (the
//     jitter makes a repeat unlikely, not impossible); a tenant whose own
//     rate is slower than the reservation's pace wastes the rest of it.
package store
