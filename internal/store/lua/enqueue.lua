-- enqueue.lua — admit and store up to 1000 jobs of one tenant (docs/design.md §2.1).
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  tenant                    ARGV[4]  n, the number of items
-- ARGV[5…] n items of 13 values each:
--          id, type, cost, run_at µs (0 = none), delay µs (0 = none),
--          idempotency key ('' = none), fingerprint (hex), body,
--          unless code ('' = none), unless detail, callback URL ('' = none;
--          record field cb), upstreams ('' = none; the names, sorted,
--          unique, joined by ','; record field ups), destination ('' =
--          none; record field dst: the pass holds the job while its
--          tenant's circuit for it is open, pass.lua X.hold)
-- Reply:   {'ok', now, woke (0|1), admit_us, admit_burst, r1, …, rn}: the
--          effective admission policy, then one ri per item, in order:
--          {'accepted',  id, state ('queued'|'scheduled'), eta µs, atok, full_in µs}
--          {'duplicate', id, state ('' when the record expired), eta µs, atok, full_in µs}
--          {'refused',   code, retry_after µs (0 = never by waiting), detail, atok, full_in µs}
--          code: 'idempotency_mismatch' | 'invalid' | 'rate_limited' | 'backlog_full'
--          | the item's unless code
--          atok, full_in: the admission bucket right after the item's decision —
--          whole tokens left and the time until it is full again (0 = full).
--
-- Per item, in order: stored already (a re-sent call, below) → idempotency → the item's unless refusal (a new job
-- the caller does not want stored; a replay still answers; the code
-- 'no_webhook_secret' is waived when the tenant's policy says unsigned or
-- it holds a live webhook secret by API, lib.lua secret_live) → cost fits
-- min(burst, admit_burst) →
-- admission token bucket → backlog caps (max_backlog jobs, max_backlog_bytes)
-- → store the job → backlog (RPUSH), the lane of its upstreams (lanes.lua
-- LN.push: a job naming upstreams) or delayed set (run_at in the future) →
-- counters. Then once: reschedule(tenant), tenant expiry, and a PUBLISH on the
-- wake channel when the shard's earliest time moved earlier. A refused item
-- writes nothing (no idempotency key either); a call that accepts nothing
-- writes nothing at all.
--
-- eta is a lower bound on the job's slot: with Q tokens queued ahead of it,
-- eta = max(run_at, now, max(TAT, now) + (Q − (b − cost))·T). Each token
-- ahead moves TAT by T at least, and the job's slot is TAT − (b − cost)·T.
-- T is the effective interval T_eff of an adaptive tenant (lib.lua
-- interval), as in every GCRA computation.

local tn = ARGV[3]
local n = tonumber(ARGV[4])
if not n or n < 1 or #ARGV ~= 4 + 13 * n then
  return redis.error_reply('ERR sluice enqueue: want 13 values per item')
end

local items = {}
for i = 1, n do
  local o = 4 + (i - 1) * 13
  local it = {id = ARGV[o + 1], type = ARGV[o + 2], cost = tonumber(ARGV[o + 3]),
    run_at = tonumber(ARGV[o + 4]), delay = tonumber(ARGV[o + 5]),
    idem = ARGV[o + 6], fp = ARGV[o + 7], body = ARGV[o + 8], unless = ARGV[o + 9], unless_detail = ARGV[o + 10],
    cb = ARGV[o + 11], ups = ARGV[o + 12], dst = ARGV[o + 13]}
  -- Decoding only: Go checks every item (job.Attrs.Check) before the call.
  if not it.cost or not it.run_at or not it.delay then
    return redis.error_reply('ERR sluice enqueue: non-numeric cost, run_at or delay in item ' .. i)
  end
  items[i] = it
end

-- Read phase.
local p = load_policy(tn)
local t = load_tenant(tn, p)
-- A call run before: go-redis re-sends a command whose connection broke
-- before its reply came, and the first run may have stored its jobs. Every
-- call's ids are new (the caller makes them), so a record under one of them
-- means this call ran already: such an item answers as the first run stored
-- it ('accepted', its state and eta now) and is not stored again. One EXISTS
-- over every id (one slot) tells; the records are read only then. In a
-- block: the prologue's locals leave the scripts few to spare.
do
  local ids = {}
  for i, it in ipairs(items) do ids[i] = k_job(it.id) end
  if redis.call('EXISTS', unpack(ids)) > 0 then
    for _, it in ipairs(items) do
      local r = redis.call('HMGET', k_job(it.id), 'state', 'eta')
      if r[1] then it.stored = {'accepted', it.id, r[1], tonumber(r[2]) or 0} end
    end
  end
end
local before = shard_earliest()
local signed -- read only when an item carries 'no_webhook_secret'
for _, it in ipairs(items) do
  if it.unless == 'no_webhook_secret' then
    signed = p.unsigned == 1 or secret_live(tn)
    break
  end
end
for _, it in ipairs(items) do
  if it.idem ~= '' then
    local v = redis.call('GET', k_idem(tn, it.idem))
    if v then
      it.prev_fp, it.prev_id = string.match(v, '^(%S+) (%S+)$')
      if it.prev_id then
        local j = redis.call('HMGET', k_job(it.prev_id), 'state', 'eta')
        it.prev_state, it.prev_eta = j[1] or '', tonumber(j[2]) or 0
      end
    end
  end
end
rescale_tat(t, p, NOW)
refill(t, p, NOW)

local claimed = {} -- idempotency key → the item of this call that stored it

local function idempotency(it)
  if it.idem == '' then return nil end
  local prev = claimed[it.idem]
  if not prev and it.prev_id then
    prev = {fp = it.prev_fp, id = it.prev_id, state = it.prev_state, eta = it.prev_eta}
  end
  if not prev then return nil end
  if prev.fp == it.fp then return {'duplicate', prev.id, prev.state, prev.eta} end
  return {'refused', 'idempotency_mismatch', 0, 'idempotency key was used with another request'}
end

-- drain_wait estimates when `jobs` more jobs will have left the backlog at the
-- dispatch rate: the wait for the next slot (or the end of a pause), then T
-- per job.
local function drain_wait(jobs)
  local iv = interval(t, p)
  local next_at = math.max(t.tat - (p.burst - 1) * iv, gate(t))
  return math.max(0, next_at - NOW) + jobs * iv
end

local function caps(it)
  local size = #it.body
  if it.cost > math.min(p.burst, p.admit_burst) then
    return {'refused', 'invalid', 0, 'cost ' .. istr(it.cost) .. ' exceeds min(burst, admit.burst) = '
      .. istr(math.min(p.burst, p.admit_burst))}
  end
  if size > p.max_backlog_bytes then
    return {'refused', 'invalid', 0, 'body of ' .. istr(size) .. ' bytes exceeds max_backlog_bytes'}
  end
  local wait = admit_wait(t, p, it.cost, NOW)
  if wait > 0 then return {'refused', 'rate_limited', wait, 'admission rate exceeded'} end
  if t.live + 1 > p.max_backlog then
    return {'refused', 'backlog_full', drain_wait(t.live + 1 - p.max_backlog), 'max_backlog reached'}
  end
  if t.bytes + size > p.max_backlog_bytes then
    local avg = math.max(1, math.floor(t.bytes / math.max(1, t.live)))
    local jobs = math.ceil((t.bytes + size - p.max_backlog_bytes) / avg)
    return {'refused', 'backlog_full', drain_wait(jobs), 'max_backlog_bytes reached'}
  end
  return nil
end

local function store(it)
  -- c1 (lib.lua head_job): set when a tenant holding no job gets one of
  -- cost 1, cleared by any job of a higher cost.
  if it.cost > 1 then
    t.c1 = 0
  elseif t.live == 0 and t.running == 0 then
    t.c1 = 1
  end
  if it.ups ~= '' then t.c1 = 0 end -- lanes.lua: off while the tenant has lane jobs
  local run_at = it.run_at
  if it.delay > 0 then run_at = NOW + it.delay end
  local eta = math.max(NOW, math.max(t.tat, NOW) + (t.qtok - p.burst + it.cost) * interval(t, p))
  local state = 'queued'
  if run_at > NOW then
    state = 'scheduled'
    eta = math.max(eta, run_at)
    redis.call('ZADD', K_DELAYED, istr(run_at), it.id)
  elseif it.ups ~= '' then
    LN.push({id = it.id, tenant = tn, cost = it.cost, ups = it.ups}, t, false)
  else
    redis.call('RPUSH', k_queue(tn), it.id)
    t.qtok = t.qtok + it.cost
  end
  -- Numbers as istr strings (lib.lua): Redis would format each with %.17g.
  -- Fields at their default are not written — gen and attempt 0, run_at 0
  -- (none), idem, dst, cb and ups '' —: every reader takes an absent one
  -- for it (lifecycle.lua load_job: tonum(v) or 0, v or ''; Go parseJob),
  -- and the bytes saved keep a record with a 1 KiB payload in a smaller
  -- allocator class (docs/operations.md, Sizing).
  local args = {'tenant', tn, 'type', it.type, 'cost', istr(it.cost), 'bytes', istr(#it.body),
    'body', it.body, 'state', state, 'created', istr(NOW), 'eta', istr(eta)}
  if run_at > 0 then args[#args + 1], args[#args + 2] = 'run_at', istr(run_at) end
  for _, f in ipairs({'idem', 'dst', 'cb', 'ups'}) do -- dst: pass.lua X.hold; cb: callbacks.lua; ups: lanes.lua
    if it[f] ~= '' then args[#args + 1], args[#args + 2] = f, it[f] end
  end
  redis.call('HSET', k_job(it.id), unpack(args))
  if it.idem ~= '' then
    redis.call('SET', k_idem(tn, it.idem), it.fp .. ' ' .. it.id)
    claimed[it.idem] = {fp = it.fp, id = it.id, state = state, eta = eta}
  end
  t.atok = t.atok - it.cost
  inflow_add(t, it.cost)
  t.live = t.live + 1
  t.bytes = t.bytes + #it.body
  return {'accepted', it.id, state, eta}
end

-- with_admission appends the admission bucket's state after a decision.
local function with_admission(r)
  local full_at = t.ats + math.max(0, p.admit_burst - t.atok) * p.admit_us
  r[#r + 1] = t.atok
  r[#r + 1] = math.max(0, full_at - NOW)
  return r
end

-- Decide and write, item by item.
local reply = {'ok', NOW, 0, p.admit_us, p.admit_burst}
local accepted = 0
for _, it in ipairs(items) do
  local r = it.stored or idempotency(it)
  if not r and it.unless ~= '' and not (signed and it.unless == 'no_webhook_secret') then
    r = {'refused', it.unless, 0, it.unless_detail}
  end
  r = r or caps(it)
  if not r then
    r = store(it)
    accepted = accepted + 1
  end
  reply[#reply + 1] = with_admission(r)
end

if accepted > 0 then
  reschedule(tn, t, p, NOW)
  save_tenant(tn, t)
  expire_tenant(tn, t, p, NOW)
  reply[3] = wake(before)
end
return reply
