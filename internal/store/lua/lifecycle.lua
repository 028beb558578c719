-- lifecycle.lua — job lifecycle helpers shared by the dispatch scripts
-- (docs/design.md §2), assembled after lib.lua, whose names it uses.
--
-- Used by pass, claim, finish and the admin scripts. Callers keep the
-- tenant counters (see tenant.go) and call reschedule last.

local function ms(us) return istr(mmax(1, mfloor(us / 1000))) end

-- J_FIELDS are the record fields the lifecycle scripts decide on.
local J_FIELDS = {'state', 'tenant', 'cost', 'bytes', 'gen', 'attempt', 'first', 'slot',
  'idem', 'type', 'grace', 'logged', 'resv', 'ups'}

-- load_job reads a record's decision fields; nil when there is none.
local function load_job(id)
  local k = k_job(id)
  local r = rcall('HMGET', k, unpack(J_FIELDS))
  if not r[1] then return nil end
  return {id = id, k = k, state = r[1], tenant = r[2], cost = tonum(r[3]) or 1,
    bytes = tonum(r[4]) or 0, gen = tonum(r[5]) or 0, attempt = tonum(r[6]) or 0,
    first = tonum(r[7]) or 0, slot = tonum(r[8]) or 0,
    idem = r[9] or '', type = r[10] or '', grace = tonum(r[11]), logged = tonum(r[12]) or 0,
    resv = tonum(r[13]) or 0, ups = r[14] or ''}
end

-- CLAIM holds the claim's transition, shared by claim.lua and the pass's
-- pre-claim (pass.lua X.preclaim; docs/design.md §2.2): one table, the
-- prologue's locals are few. CLAIM.load and load_finished read only what a
-- claim and a finish decide on (each field named costs a scan of the
-- record, a string and, for a number, a tonumber): a claim the fields of
-- J_FIELDS but idem and logged, and the body and created time it replies
-- with; a finish what every outcome needs, the fields of J_FIELDS but cost,
-- bytes, first, slot, ups, type, grace and resv, and cb — cost, bytes,
-- first, slot and ups read as 1, 0, 0, 0, '' here, and finish.lua reads
-- them (finish_one) for every outcome but a plain success (at its tenant's
-- full rate, no actual cost, no quota report), which needs none of them
-- (its bytes go back to the tenant's count and out again: unrun,
-- to_succeeded).
local CLAIM = {}
CLAIM.NONE = {} -- the signing state of a job that is not a webhook (read only: shared)
function CLAIM.load(id)
  local k = k_job(id)
  local r = rcall('HMGET', k, 'state', 'tenant', 'cost', 'bytes', 'gen', 'attempt', 'first',
    'slot', 'type', 'grace', 'resv', 'body', 'created', 'ups')
  if not r[1] then return nil end
  return {id = id, k = k, state = r[1], tenant = r[2], cost = tonum(r[3]) or 1,
    bytes = tonum(r[4]) or 0, gen = tonum(r[5]) or 0, attempt = tonum(r[6]) or 0,
    first = tonum(r[7]) or 0, slot = tonum(r[8]) or 0, type = r[9] or '',
    grace = tonum(r[10]), resv = tonum(r[11]) or 0, body = r[12] or '',
    created = tonum(r[13]) or 0, ups = r[14] or ''}
end
-- CLAIM.num is tonumber for the small counts a finish reads again and
-- again — gens, attempts, log counts, statuses: the same few texts — from
-- a memo (CLAIM.nums, the library's scope: a text's number never changes;
-- only texts of at most 4 bytes, dropped at 512 entries), a table lookup
-- instead of a C call that converts the text twice (nil: nil).
CLAIM.nums, CLAIM.nums_n = {}, 0
function CLAIM.num(s)
  local v = CLAIM.nums[s]
  if v then return v end
  v = tonum(s)
  if v and #s <= 4 then
    if CLAIM.nums_n >= 512 then CLAIM.nums, CLAIM.nums_n = {}, 0 end
    CLAIM.nums[s], CLAIM.nums_n = v, CLAIM.nums_n + 1
  end
  return v
end
local function load_finished(id)
  local k = k_job(id)
  local r = rcall('HMGET', k, 'state', 'tenant', 'gen', 'attempt', 'idem', 'logged', 'cb')
  if not r[1] then return nil end
  local num = CLAIM.num
  return {id = id, k = k, state = r[1], tenant = r[2], cost = 1,
    bytes = 0, gen = num(r[3]) or 0, attempt = num(r[4]) or 0,
    first = 0, slot = 0, idem = r[5] or '',
    logged = num(r[6]) or 0, cb = r[7] or '', ups = ''}
end

-- hset_job writes fields of j's record in one HSET, together with the
-- fields log_attempt left pending in j.pending (then cleared).
local function hset_job(j, ...)
  local args = {...}
  if j.pending then
    local p, n = j.pending, #args
    for i = 1, #p do args[n + i] = p[i] end
    j.pending = nil
  end
  rcall('HSET', j.k or k_job(j.id), unpack(args))
end

-- to_head queues a job in its tenant's head lane, behind the jobs already
-- there (score: the tenant's next head sequence), gen + bump. A job naming
-- upstreams (field ups) goes to the front of its upstream lane instead
-- (lanes.lua LN.push), so it never holds back the tenant's other jobs.
local function to_head(j, t, bump)
  if j.ups and j.ups ~= '' then
    LN.push(j, t, true)
    j.gen = j.gen + bump
    hset_job(j, 'state', 'queued', 'gen', istr(j.gen))
    return
  end
  t.hseq = t.hseq + 1
  t.hlen = t.hlen + 1
  t.qtok = t.qtok + j.cost
  j.gen = j.gen + bump
  rcall('ZADD', k_head(j.tenant), istr(t.hseq), j.id)
  hset_job(j, 'state', 'queued', 'gen', istr(j.gen))
end

-- unrelease and unrun take a job out of the released or running counters.
local function unrelease(j, t)
  t.released = t.released - 1
  t.rtok = t.rtok - j.cost
end
local function unrun(j, t)
  t.running = t.running - 1
  t.live = t.live + 1 -- back to a backlog state; to_dead and to_succeeded undo it
  t.bytes = t.bytes + j.bytes
end

-- CLAIM.lost takes back pre-claimed job j (running at the gen its pass
-- claimed it at: record field pc = j.gen) that was never sent, of tenant
-- state t: out of running, the attempt the pre-claim counted given back
-- (field first dropped when that was its only one), to the head lane with
-- gen + 1 (every copy of the release is stale then). pcl = 1 sends its
-- later releases through the claim (the sweep's lost release: a worker may
-- have died while sending it). False, and nothing changed, for any other
-- job. The caller removes the lease.
function CLAIM.lost(j, t, pcl)
  local k = j.k or k_job(j.id)
  local r = rcall('HMGET', k, 'pc', 'first', 'claimed')
  if tonum(r[1]) ~= j.gen then return false end
  unrun(j, t)
  j.attempt = mmax(0, j.attempt - 1)
  if j.attempt == 0 and r[2] == r[3] then
    rcall('HDEL', k, 'first')
  end
  j.pending = {'attempt', istr(j.attempt), 'pc', '0'} -- written by to_head (hset_job)
  if pcl then
    j.pending[5], j.pending[6] = 'pcl', '1'
  end
  to_head(j, t, 1)
  return true
end

-- CLAIM.send is the instant a job claimed at now toward target is sent at:
-- the target, or now when the claim came after it; an in-plan target past
-- the job's slot (a late schedule) is sent the catch-up step early, never
-- before the slot (claim.lua explains why). The step is ε/4, at most
-- CLAIM.CATCH_UP µs: a wider ε lets claims go out earlier, not a late
-- schedule's sends bunch up (at 1.5 ms, ε = 6 ms, a tenant at 500/s sent
-- four times its rate while it caught up, and its claims outran the
-- schedule and came back early).
CLAIM.CATCH_UP = 500
function CLAIM.send(j, target, in_plan, eps)
  local send = target
  if in_plan and target > j.slot then
    local step = mfloor(eps / 4)
    if step > CLAIM.CATCH_UP then step = CLAIM.CATCH_UP end
    send = mmax(j.slot, target - step)
  end
  return mmax(NOW, send)
end

-- CLAIM.run moves released job j (CLAIM.load's fields) of the tenant of
-- cache entry c (lifecycle.lua tenant) to running, sent at send: the send
-- schedule (in_plan: send_target gave its target; else an out-of-order job,
-- which moves it only when it reserved no turn), running + 1, attempt + 1,
-- claimed = now, first = now on the first attempt, the lease until send +
-- timeout + grace, and the record's fields in one HSET with the pairs of
-- more (pc: the pre-claim's mark, pass.lua 3e); iv, when given, is the
-- tenant's interval(t, p), already computed. It returns claim.lua's 'claimed'
-- reply: a webhook job takes its tenant's signing state along (built once
-- per call and tenant, its secrets read once per policy epoch: lib.lua
-- signing_set), so the worker signs with it and reads nothing more. With
-- pre (the pass's reply row of the job), it appends to pre the pass's
-- pre-claimed part of that reply instead (pass.lua: attempt, body, created,
-- upstreams, then the signing state's values) and returns pre and the
-- send µs.
-- Now's text is formatted once per call of the script (CLAIM.now_s).
function CLAIM.run(j, c, send, in_plan, more, iv, pre)
  local t, p = c.t, c.p
  iv = iv or interval(t, p)
  unrelease(j, t)
  if in_plan then
    t.stat = mmax(t.stat, send) + j.cost * iv
    t.slast, t.sslot = send, j.slot
  elseif j.resv == 0 then
    t.stat = mmax(t.stat, send) + j.cost * iv
    t.slast = mmax(t.slast, send)
  end
  t.running = t.running + 1
  t.live = t.live - 1
  t.bytes = t.bytes - j.bytes
  j.attempt = j.attempt + 1
  if CLAIM.now ~= NOW then CLAIM.now, CLAIM.now_s = NOW, istr(NOW) end
  local first = CLAIM.now_s
  if j.first == 0 then j.first = NOW elseif j.first ~= NOW then first = istr(j.first) end
  rcall('HSET', j.k or k_job(j.id), 'state', 'running', 'attempt', istr(j.attempt), 'claimed', CLAIM.now_s,
    'first', first, unpack(more))
  lease_add(j.id, send + p.timeout_us + (j.grace or 1000000)) -- written at the end (lib.lua leases_flush)
  local sign = CLAIM.NONE
  if j.type == 'webhook' then
    if c.sign == nil then c.sign = signing_set(j.tenant, p, {}, true) or false end -- lib.lua
    sign = c.sign or CLAIM.NONE
  end
  if pre then
    local n = #pre
    pre[n + 1], pre[n + 2], pre[n + 3], pre[n + 4] = j.attempt, j.body, j.created, j.ups
    for i = 1, #sign do pre[n + 4 + i] = sign[i] end
    return pre, send
  end
  return {'claimed', j.tenant, j.type, j.body, j.gen, j.attempt, p.timeout_us, j.slot, j.created, j.cost, j.ups,
    sign, send}
end

-- log_attempt appends one entry to the job's attempt log (field log: JSON
-- objects, one a line, the newest last), keeping the last n (≥ 1), and counts
-- it in field logged (so the log holds min(logged, n) lines). Integers are
-- formatted here (istr): cjson would print µs times with 14 significant
-- digits. The entry is
-- {"at":%d,"gen":%d,"attempt":%d,"outcome":"%s","status":%d,"latency_us":%d,"error":%s}
-- built by one concatenation (string.format would sprintf each value;
-- istr knows now and the small integers already).
-- e.outcome is one of the fixed outcome names (no escaping needed); e.extra,
-- when set, is appended as it is (finish: ',"body":<JSON string>');
-- e.latency_s, when set, is e.latency's istr text (finish: as sent). With
-- defer, the write is left in j.pending for the next hset_job of j (the
-- caller makes sure one follows).
local function log_attempt(j, n, e, defer)
  local err = '""'
  if e.err and e.err ~= '' then err = cjson.encode(e.err) end
  local entry = '{"at":' .. istr(e.at) .. ',"gen":' .. istr(e.gen or j.gen) .. ',"attempt":' .. istr(j.attempt)
    .. ',"outcome":"' .. e.outcome .. '","status":' .. istr(e.status or 0) .. ',"latency_us":'
    .. (e.latency_s or istr(e.latency or 0)) .. ',"error":' .. err .. (e.stale and ',"stale":true' or '')
    .. (e.extra or '') .. '}' -- extra: the body excerpt
  local jk = nil -- built only when read or written here
  local s = entry
  if j.logged > 0 then
    jk = j.k or k_job(j.id)
    s = (rcall('HGET', jk, 'log') or '') .. '\n' .. entry
    if j.logged >= n then -- at the cap: count the lines (n may have changed)
      local _, nl = string.gsub(s, '\n', '')
      for _ = n, nl do s = string.sub(s, string.find(s, '\n', 1, true) + 1) end
    end
  end
  j.logged = j.logged + 1
  if defer then
    j.pending = {'log', s, 'logged', istr(j.logged)}
  else
    rcall('HSET', jk or j.k or k_job(j.id), 'log', s, 'logged', istr(j.logged))
  end
end

-- jitter is a fraction in [0, 1) drawn from the caller's seed and the job:
-- deterministic for one seed (tests), spread across jobs and generations.
local function jitter(seed, j)
  return tonum(string.sub(redis.sha1hex(seed .. ':' .. j.id .. ':' .. istr(j.gen)), 1, 8), 16)
    / 4294967296
end

-- backoff is the delay before retry k (k ≥ 1, after the k-th attempt), the
-- Google Cloud Tasks curve: min_backoff doubled k − 1 times while k − 1 ≤
-- max_doublings, then growing linearly by min_backoff·2^max_doublings per
-- retry, capped at max_backoff; then ±10 % jitter (frac ∈ [0, 1)).
local function backoff(p, k, frac)
  local lo, d = p.min_backoff_us, p.max_doublings
  local b
  if k - 1 <= d then b = lo * 2 ^ (k - 1) else b = lo * 2 ^ d * (k - d) end
  b = mmin(b, p.max_backoff_us)
  return mfloor(b + b * (frac * 0.2 - 0.1))
end

-- retry_expired: max_retry_duration (0 = none) has run out since the first attempt.
local function retry_expired(j, p, now)
  return p.max_retry_duration_us > 0 and j.first > 0 and now - j.first >= p.max_retry_duration_us
end

-- idem_ttl is how long an idempotency key outlives its job's terminal
-- time: cfg.idem_ret when the caller passed one, else the record's own.
local function idem_ttl(cfg, record_us)
  if cfg.idem_ret and cfg.idem_ret > 0 then return cfg.idem_ret end
  return record_us
end

-- callback_due queues j's callback, when it has one (record field cb, read
-- here unless the caller's load did), on the shard's callback set <p>:{sN}:cb
-- due now, its failure count reset, and announces it on the shard's
-- channel <p>:{sN}:callbacks (now µs) so a worker's Callbacks send it at
-- once (callback_take.lua, callback_done.lua). Every terminal transition
-- calls it; a job without a callback costs nothing more.
local function callback_due(j, now)
  if j.cb == nil then j.cb = rcall('HGET', j.k or k_job(j.id), 'cb') or '' end
  if j.cb == '' then return end
  rcall('ZADD', BASE .. 'cb', istr(now), j.id)
  rcall('HDEL', j.k or k_job(j.id), 'cb_n')
  rcall('PUBLISH', BASE .. 'callbacks', istr(now))
end

-- to_dead makes j a dead letter: state dead, ended = now, in the tenant's
-- dead set (score now), the record (body included, for a replay) expiring
-- after the dead retention — so do the dead set (from its newest entry) and
-- the idempotency key (after the idempotency retention): a tenant that goes
-- quiet leaves nothing behind. trim_dead also drops letters by age and count
-- at each finish. Undoes unrun's live and bytes.
local function to_dead(j, t, now, cfg)
  local jk = j.k or k_job(j.id)
  local dk = k_dead(j.tenant)
  hset_job(j, 'state', 'dead', 'ended', istr(now))
  callback_due(j, now)
  if not cfg.dead_ms then cfg.dead_ms = ms(cfg.dead_ret) end -- once per call
  rcall('PEXPIRE', jk, cfg.dead_ms)
  rcall('ZADD', dk, istr(now), j.id)
  rcall('PEXPIRE', dk, cfg.dead_ms)
  AGG.dead_add(j.tenant, 1, now + cfg.dead_ret) -- lib.lua
  if j.idem ~= '' then rcall('PEXPIRE', k_idem(j.tenant, j.idem), ms(idem_ttl(cfg, cfg.dead_ret))) end
  t.live = t.live - 1
  t.bytes = t.bytes - j.bytes
  t.dz = 2 -- known not empty (trim_dead)
  cfg.trim[j.tenant] = true
end

-- to_succeeded: state succeeded, ended = now, body dropped — emptied in
-- the same HSET rather than deleted by an HDEL of its own (one command less
-- a job; a succeeded record's body is never read: store.parseJob leaves it
-- out) —, the record expiring after the succeeded retention and its
-- idempotency key after the idempotency retention. Undoes unrun's counts.
local function to_succeeded(j, t, now, cfg)
  local jk = j.k or k_job(j.id)
  local pd = j.pending
  if pd and #pd == 4 then -- the log's write alone (log_attempt): no table for hset_job
    j.pending = nil
    rcall('HSET', jk, 'state', 'succeeded', 'ended', istr(now), 'body', '', pd[1], pd[2], pd[3], pd[4])
  else
    hset_job(j, 'state', 'succeeded', 'ended', istr(now), 'body', '')
  end
  if j.cb ~= '' then callback_due(j, now) end -- nil: not read yet
  if not cfg.succ_ms then -- once per call
    cfg.succ_ms, cfg.succ_idem_ms = ms(cfg.succ_ret), ms(idem_ttl(cfg, cfg.succ_ret))
  end
  rcall('PEXPIRE', jk, cfg.succ_ms)
  if j.idem ~= '' then rcall('PEXPIRE', k_idem(j.tenant, j.idem), cfg.succ_idem_ms) end
  t.live = t.live - 1
  t.bytes = t.bytes - j.bytes
end

-- retry_or_dead follows a failed attempt (already counted in j.attempt, j
-- already unrun): dead when attempt ≥ max_attempts or the retry duration has
-- run out, else retrying in the delayed set at now + backoff (field due).
-- Returns the state, and the due time when retrying.
local function retry_or_dead(j, t, p, now, cfg)
  if j.attempt >= p.max_attempts or retry_expired(j, p, now) then
    to_dead(j, t, now, cfg)
    return 'dead'
  end
  local due = now + backoff(p, j.attempt, jitter(cfg.seed, j))
  rcall('ZADD', K_DELAYED, istr(due), j.id)
  hset_job(j, 'state', 'retrying', 'due', istr(due))
  return 'retrying', due
end

-- trim_dead drops the tenant's dead letters older than the retention, then
-- the oldest beyond max — at most 1000 of each per call — deleting their
-- records and the idempotency keys that still name them. Returns the count.
-- A tenant whose dead set is known empty (field dz = 1: set when a trim
-- finds it empty; 2 when a trim or to_dead, the one writer of the set,
-- leaves it not empty; 0 when never read) needs no read; its caller saves
-- the tenant after it. flush_tenants reads a set never read of a tenant
-- with jobs running, so that their finishes may be fast (lib.lua
-- T_FIELDS.mint: it wants dz = 1).
local function trim_dead(tn, t, now, cfg)
  if t.dz == 1 then return 0 end
  local key = k_dead(tn)
  local n = rcall('ZCARD', key)
  if n == 0 then
    t.dz = 1
    return 0
  end
  local ids = rcall('ZRANGEBYSCORE', key, '-inf', '(' .. istr(now - cfg.dead_ret), 'LIMIT', 0, 1000)
  local over = n - #ids - cfg.dead_max
  if over > 0 then
    for _, id in ipairs(rcall('ZRANGE', key, #ids, #ids + mmin(over, 1000) - 1)) do
      ids[#ids + 1] = id
    end
  end
  for _, id in ipairs(ids) do
    local jk = k_job(id)
    local idem = rcall('HGET', jk, 'idem')
    if idem and idem ~= '' then
      local ik = k_idem(tn, idem)
      local v = rcall('GET', ik)
      if v and string.sub(v, -#id - 1) == ' ' .. id then rcall('DEL', ik) end
    end
    rcall('DEL', jk)
  end
  if #ids > 0 then rcall('ZREM', key, unpack(ids)) end
  AGG.dead_add(tn, -#ids) -- lib.lua
  if #ids == n then t.dz = 1 else t.dz = 2 end
  return #ids
end

-- Tenant cache for scripts that touch several tenants (pass): each loaded
-- once (policy, state, TAT rescaled), saved, rescheduled and expired once.
local TENANTS, TENANT_ORDER = {}, {}
RESETS[#RESETS + 1] = function() -- new tables only when the last call cached a tenant
  if #TENANT_ORDER > 0 then TENANTS, TENANT_ORDER = {}, {} end
end
local function tenant(tn)
  local c = TENANTS[tn]
  if not c then
    local p = load_policy(tn)
    local t = load_tenant(tn, p)
    rescale_tat(t, p, NOW)
    c = {p = p, t = t, head = nil, touched = nil, sig = nil, sign = nil} -- sized for the fields the scripts add
    TENANTS[tn] = c
    TENANT_ORDER[#TENANT_ORDER + 1] = tn
  end
  return c.t, c.p
end

-- flush_tenants saves, reschedules (with the head job the caller may have
-- left in the cache entry's head) and expires every cached tenant, and trims
-- the dead sets that grew. An entry whose touched field is false (the
-- caller read it but changed nothing) is skipped. The ready set is written
-- once, after the last tenant (lib.lua ready_defer; cfg.ready, optional:
-- the tenants the caller read from ready, tenant → anything).
local function flush_tenants(cfg)
  ready_defer(cfg and cfg.ready)
  FAIR.defer() -- lib.lua: one HINCRBY for the held weight of every tenant saved
  AGG.hold() -- lib.lua: the aggregates written once, after the last tenant
  for i = 1, #TENANT_ORDER do
    local tn = TENANT_ORDER[i]
    local c = TENANTS[tn]
    if c.touched ~= false then
      reschedule(tn, c.t, c.p, NOW, c.head)
      c.t.st_rsnow = FAIR.lv and 2 or 1 -- rs as computed, for save_tenant's mint (lib.lua)
      if cfg and (cfg.trim[tn] or (c.t.dz == 0 and c.t.running > 0)) then trim_dead(tn, c.t, NOW, cfg) end
      save_tenant(tn, c.t)
      expire_tenant(tn, c.t, c.p, NOW)
    end
  end
  ready_flush()
  FAIR.flush()
  AGG.flush()
end
