// Package api is Sluice's HTTP API: authentication by API key, the API's own
// rate limiter, the rate-limit headers, JSON errors, and the routes of
// docs/design.md §6 (rate limiting as a service; health, readiness and metrics).
//
// # Invariants
//
//   - A refused request changes nothing; a 202 is stored before it is
//     answered — and, with redis.wait_replicas N > 0, confirmed by WAIT N
//     on the connection that ran the write (redisscript.RunFunctionWait:
//     script and WAIT in one pipeline on the master of the shard's slot).
//     Fewer confirmations answer 503 replication_timeout naming the
//     possibly stored job, and a retry that replays its idempotency key
//     confirms again (Runner.Confirm, after a marker write in the slot)
//     before its 202.
//   - New jobs never take the memory delivery needs. Enqueue and batch are
//     refused with 507 storage_full while the master of the tenant's shard
//     slot uses more than redis.memory_high_water (0.9) of its maxmemory
//     (memory.go: INFO memory of each master at most once a second, on an
//     enqueue, plus this process's own stored jobs since, estimated;
//     Retry-After from the pace of the last two readings), leaving the rest
//     for the drain, which frees each delivered job's body at once; the
//     store's delivering functions are allow-oom (see package store), so
//     past the limit anyway the jobs a worker already holds still finish.
//     Without both, a full Redis stalled delivery for seconds at a time and
//     sent finished jobs again; with small bodies it stayed wedged
//     (internal/e2e TestRedisMemoryFull).
//   - A webhook secret is shown only in the 201 that made it, and reaches
//     Redis only sealed (secretbox, the tenant id as additional data).
//   - The console's two read-only routes bound their cost: the summary's
//     base (the walk of every tenant and the deployment-wide reads,
//     summarybase.go) is shared by every key and read at most once per
//     max(1 s, 20 × its read time), each key's part (the attention and
//     busiest tenants, TenantViews) at most as often; with the console on,
//     the base is kept warm while it is asked for (Server.Start: while a
//     request came in the last SummaryWarmIdle, read at least once a
//     minute; nothing before the first request, served up to 2 minutes old
//     while the next is read in the background). live.go reads a tenant's
//     state at most once a second for its live series (per process, ≤ 256
//     tenants × 15 min) and its recent attempts.
//
// # Files
//
// auth.go (API keys by SHA-256), jobs.go (parse; acceptance by
// accept.Job, whose tenant — tenantContext — reads the capacity once per
// request and the upstreams through upstreamcache.go: each named upstream's
// settings via a store.UpstreamCache, each tenant's default upstreams, read
// at most once a second per process), tenants.go, tenantlist.go, admin.go, secrets.go,
// upstreams.go (the upstream routes, DELETE included), limits.go (rate
// limiting as a service), memory.go (the memory guard), replication.go,
// summary.go, summarybase.go and live.go (the console's routes),
// taskworkers.go (the task queues' heartbeats), errors.go, openapi.go and
// openapi.json (its test checks every route).
package api
