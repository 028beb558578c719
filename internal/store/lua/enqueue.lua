-- enqueue.lua — admit and store the jobs of one or more enqueue requests of
-- the shard's tenants (docs/design.md §2.1): the Store's callers that meet
-- share a call (enqueue.go), at most 1000 items in all.
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  g, the number of requests; then g requests of 2 + 13n values:
--          tenant, n (the number of its items), n items of 13 values each:
--          id, type, cost, run_at µs (0 = none), delay µs (0 = none),
--          idempotency key ('' = none), fingerprint (hex), body,
--          unless code ('' = none), unless detail, callback URL ('' = none;
--          record field cb), upstreams ('' = none; the names, sorted,
--          unique, joined by ','; record field ups), destination ('' =
--          none; record field dst: the pass holds the job while its
--          tenant's circuit for it is open, pass.lua X.hold)
-- Reply:   {'ok', now, woke (0|1), q1, …, qg}, one qj per request, in order:
--          qj = {admit_us, admit_burst, r1, …, rn}: its tenant's effective
--          admission policy, then one ri per item, in order:
--          {'accepted',  id, state ('queued'|'scheduled'), eta µs, atok, full_in µs}
--          {'duplicate', id, state ('' when the record expired), eta µs, atok, full_in µs}
--          {'refused',   code, retry_after µs (0 = never by waiting), detail, atok, full_in µs}
--          code: 'idempotency_mismatch' | 'invalid' | 'rate_limited' | 'backlog_full'
--          | the item's unless code
--          atok, full_in: the admission bucket right after the item's decision —
--          whole tokens left and the time until it is full again (0 = full).
--
-- The requests are decided in order, and a tenant's requests see each
-- other's effects as consecutive calls would (one tenant state, loaded
-- once, saved once). Per item, in order: stored already (a re-sent call, below) → idempotency → the item's unless refusal (a new job
-- the caller does not want stored; a replay still answers; the code
-- 'no_webhook_secret' is waived when the tenant's policy says unsigned or
-- it holds a live webhook secret by API, lib.lua secret_live) → cost fits
-- min(burst, admit_burst) →
-- admission token bucket → backlog caps (max_backlog jobs, max_backlog_bytes)
-- → store the job → backlog (RPUSH), the lane of its upstreams (lanes.lua
-- LN.push: a job naming upstreams) or delayed set (run_at in the future) →
-- counters. Then once per tenant that accepted an item: reschedule, save,
-- expiry; the shard's aggregates once; and a PUBLISH on the wake channel
-- when the shard's earliest time moved earlier. A refused item writes
-- nothing (no idempotency key either); a tenant that accepts nothing is not
-- written, and a call that accepts nothing writes nothing at all. Every
-- policy is read (and a corrupt one raises) before the first write.
--
-- eta is a lower bound on the job's slot: with Q tokens queued ahead of it,
-- eta = max(run_at, now, max(TAT, now) + (Q − (b − cost))·T). Each token
-- ahead moves TAT by T at least, and the job's slot is TAT − (b − cost)·T.
-- T is the effective interval T_eff of an adaptive tenant (lib.lua
-- interval), as in every GCRA computation.

local g = tonumber(ARGV[3])
if not g or g < 1 then return redis.error_reply('ERR sluice enqueue: want a count of requests') end

-- Decoding only: Go checks every item (job.Attrs.Check) before the call.
-- TS[tn] is a tenant's part of the call: its policy p and state t (read
-- here, before any write: a corrupt policy raises at once), the
-- idempotency keys its items stored (claimed), its accepted count, and
-- whether it may send unsigned (signed, read only when an item needs it).
-- Numeric loops throughout: ipairs costs a C call a step.
local RT, RI, TS, order, keys = {}, {}, {}, {}, {} -- request r: its tenant's part RT[r], its items RI[r]
local o = 3
for r = 1, g do
  local tn, n = ARGV[o + 1], tonumber(ARGV[o + 2])
  if not n or n < 1 or o + 2 + 13 * n > #ARGV then
    return redis.error_reply('ERR sluice enqueue: want 13 values per item')
  end
  o = o + 2
  local items = {}
  for i = 1, n do
    local it = {id = ARGV[o + 1], type = ARGV[o + 2], cost = tonumber(ARGV[o + 3]),
      run_at = tonumber(ARGV[o + 4]), delay = tonumber(ARGV[o + 5]),
      idem = ARGV[o + 6], fp = ARGV[o + 7], body = ARGV[o + 8], unless = ARGV[o + 9], unless_detail = ARGV[o + 10],
      cb = ARGV[o + 11], ups = ARGV[o + 12], dst = ARGV[o + 13]}
    if not it.cost or not it.run_at or not it.delay then
      return redis.error_reply('ERR sluice enqueue: non-numeric cost, run_at or delay in item ' .. i)
    end
    items[i] = it
    keys[#keys + 1] = k_job(it.id)
    o = o + 13
  end
  local T = TS[tn]
  if not T then
    local p = load_policy(tn)
    T = {tn = tn, p = p, t = load_tenant(tn, p), claimed = false, accepted = 0, signed = nil}
    TS[tn] = T
    order[#order + 1] = T
  end
  RT[r], RI[r] = T, items
end
if o ~= #ARGV then return redis.error_reply('ERR sluice enqueue: want 13 values per item') end

-- A call run before: go-redis re-sends a command whose connection broke
-- before its reply came, and the first run may have stored its jobs. Every
-- call's ids are new (the caller makes them), so a record under one of them
-- means this call ran already: such an item answers as the first run stored
-- it ('accepted', its state and eta now) and is not stored again. One EXISTS
-- over every id (one slot) tells; the records are read only then.
local replayed = redis.call('EXISTS', unpack(keys)) > 0
local before = shard_earliest()
for r = 1, g do
  local T, items = RT[r], RI[r]
  for i = 1, #items do
    local it = items[i]
    if replayed then
      local j = redis.call('HMGET', k_job(it.id), 'state', 'eta')
      if j[1] then it.stored = {'accepted', it.id, j[1], tonumber(j[2]) or 0} end
    end
    if it.unless == 'no_webhook_secret' and T.signed == nil then
      T.signed = T.p.unsigned == 1 or secret_live(T.tn)
    end
    if it.idem ~= '' then
      local v = redis.call('GET', k_idem(T.tn, it.idem))
      if v then
        it.prev_fp, it.prev_id = string.match(v, '^(%S+) (%S+)$')
        if it.prev_id then
          local j = redis.call('HMGET', k_job(it.prev_id), 'state', 'eta')
          it.prev_state, it.prev_eta = j[1] or '', tonumber(j[2]) or 0
        end
      end
    end
  end
end
for i = 1, #order do
  rescale_tat(order[i].t, order[i].p, NOW)
  refill(order[i].t, order[i].p, NOW)
end

-- T.claimed: idempotency key → the item of this call that stored it.
local function idempotency(T, it)
  if it.idem == '' then return nil end
  local prev = T.claimed and T.claimed[it.idem]
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
local function drain_wait(t, p, jobs)
  local iv = interval(t, p)
  local next_at = math.max(t.tat - (p.burst - 1) * iv, gate(t))
  return math.max(0, next_at - NOW) + jobs * iv
end

local function caps(T, it)
  local t, p, size = T.t, T.p, #it.body
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
    return {'refused', 'backlog_full', drain_wait(t, p, t.live + 1 - p.max_backlog), 'max_backlog reached'}
  end
  if t.bytes + size > p.max_backlog_bytes then
    local avg = math.max(1, math.floor(t.bytes / math.max(1, t.live)))
    local jobs = math.ceil((t.bytes + size - p.max_backlog_bytes) / avg)
    return {'refused', 'backlog_full', drain_wait(t, p, jobs), 'max_backlog_bytes reached'}
  end
  return nil
end

local function store(T, it)
  local t, p, tn = T.t, T.p, T.tn
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
    T.claimed = T.claimed or {}
    T.claimed[it.idem] = {fp = it.fp, id = it.id, state = state, eta = eta}
  end
  t.atok = t.atok - it.cost
  inflow_add(t, it.cost)
  t.live = t.live + 1
  t.bytes = t.bytes + #it.body
  return {'accepted', it.id, state, eta}
end

-- with_admission appends the admission bucket's state after a decision.
local function with_admission(t, p, r)
  local full_at = t.ats + math.max(0, p.admit_burst - t.atok) * p.admit_us
  r[#r + 1] = t.atok
  r[#r + 1] = math.max(0, full_at - NOW)
  return r
end

-- Decide and write, request by request, item by item.
local reply = {'ok', NOW, 0}
local accepted = 0
for r = 1, g do
  local T, items = RT[r], RI[r]
  local rq = {T.p.admit_us, T.p.admit_burst}
  for i = 1, #items do
    local it = items[i]
    local res = it.stored or idempotency(T, it)
    if not res and it.unless ~= '' and not (T.signed and it.unless == 'no_webhook_secret') then
      res = {'refused', it.unless, 0, it.unless_detail}
    end
    res = res or caps(T, it)
    if not res then
      res = store(T, it)
      T.accepted = T.accepted + 1
      accepted = accepted + 1
    end
    rq[i + 2] = with_admission(T.t, T.p, res)
  end
  reply[r + 3] = rq
end

if accepted > 0 then
  AGG.hold() -- the aggregates' changes of every tenant, written once
  for i = 1, #order do
    local T = order[i]
    if T.accepted > 0 then
      reschedule(T.tn, T.t, T.p, NOW)
      save_tenant(T.tn, T.t)
      expire_tenant(T.tn, T.t, T.p, NOW)
    end
  end
  AGG.flush()
  reply[3] = wake(before)
end
return reply
