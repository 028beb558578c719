-- claim.lua — a worker's claim of a released job at its slot (DESIGN §2.3, step 3).
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  job id                    ARGV[4]  gen the task carries
-- ARGV[5]  ε: tolerance µs
-- Reply:   {'ok', 'claimed', tenant, type, body, gen, attempt, timeout µs, slot µs, created µs}
--          {'ok', 'early', wait µs}           not yet: claim again after wait
--          {'ok', 'stale', state}             gen not current or not released ('' = no record)
--          {'ok', 'canceled'}
--          {'ok', 'returned', reason}         back to the head lane unsent, gen + 1, no
--                                             attempt: disabled | paused | concurrency
--
-- released(gen) → running(gen) when gen is current, the job is not
-- canceled, the tenant is neither disabled nor paused (admin or upstream)
-- and has running < concurrency (the job itself is counted as released),
-- and now ≥ target − ε (below). Then attempt + 1, claimed = now, first =
-- now on the first attempt, the lease deadline becomes now + timeout +
-- grace (grace: the pass's, field grace), and the job counts toward
-- concurrency as running.
--
-- The send schedule (tenant fields slast, sslot, stat) keeps late claims
-- from clumping. slast is when the last job went out and sslot its planned
-- slot; a job planned at or after sslot goes out at target = max(slot,
-- slast + (slot − sslot)) (lib.lua send_target): on time that is its slot;
-- after a late claim — the task waited in asynq, Redis was slow — the jobs
-- planned after it keep their planned distances from it, each at its own
-- instant, in order. A job planned before the last one sent (it arrived
-- out of order) goes out when stat, a GCRA over claim instants, allows:
-- target = max(slot, stat − (b − c)·T) (T the effective interval T_eff);
-- when that is not now, the target is reserved for it (record field resv;
-- stat and slast move past it, so the jobs planned later wait behind it
-- instead of starving it). A claim is allowed from target − ε; then stat ←
-- max(stat, now) + c·T and slast, sslot ← now, slot — for an out-of-order
-- job only slast ← max(slast, now), and nothing for one that had reserved
-- its turn. Late jobs thus never go out in a clump, none forfeits its
-- slot, and the order holds. The pass moves sslot where the plan has a gap
-- (pass.lua), so a lateness does not outlive the backlog it happened in;
-- it also tells the worker send_target, so one claim per job is the norm.
-- Every change ends with reschedule(tenant). No wake-up is published: the
-- dispatcher passes at least every D/2.

local id, gen, eps = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
if not (gen and eps) then
  return redis.error_reply('ERR sluice claim: want integer gen and tolerance')
end

-- Read phase.
local j = load_job(id)
if not j then return {'ok', 'stale', ''} end
if j.state == 'canceled' then return {'ok', 'canceled'} end
if j.state ~= 'released' or j.gen ~= gen then return {'ok', 'stale', j.state} end
if NOW < j.slot - eps then return {'ok', 'early', j.slot - NOW} end
local tn = j.tenant
local p = load_policy(tn)
local t = load_tenant(tn, p)
rescale_tat(t, p, NOW)
local grace = j.grace or 1000000

local function finish(reply)
  save_tenant(tn, t)
  reschedule(tn, t, p, NOW)
  expire_tenant(tn, t, p, NOW)
  return reply
end

local function give_back(reason)
  redis.call('ZREM', K_LEASES, id)
  unrelease(j, t)
  to_head(j, t, 1)
  return finish({'ok', 'returned', reason})
end

-- Write phase.
local reason = nil
if t.disabled == 1 then
  reason = 'disabled'
elseif t.admin_paused == 1 or gate(t) > NOW then
  reason = 'paused'
elseif t.running >= p.concurrency then
  reason = 'concurrency'
end
if reason then return give_back(reason) end

-- The send schedule (lib.lua send_target; a GCRA for out-of-order jobs).
local iv = interval(t, p)
local target = send_target(t, j.slot)
local in_plan = target ~= nil
if not in_plan and j.resv > 0 then
  target = j.resv
elseif not in_plan then
  target = math.max(j.slot, t.stat - (p.burst - j.cost) * iv)
  if NOW < target - eps then
    -- Reserve its turn: the GCRA and the jobs planned after the last one
    -- sent move behind it, so a stream of them cannot starve it.
    t.stat = math.max(t.stat, target) + j.cost * iv
    t.slast = math.max(t.slast, target)
    redis.call('HSET', k_job(id), 'resv', target)
    save_tenant(tn, t)
    return {'ok', 'early', target - NOW}
  end
end
if NOW < target - eps then return {'ok', 'early', target - NOW} end

unrelease(j, t)
if in_plan then
  t.stat = math.max(t.stat, NOW) + j.cost * iv
  t.slast, t.sslot = NOW, j.slot
elseif j.resv == 0 then
  t.stat = math.max(t.stat, NOW) + j.cost * iv
  t.slast = math.max(t.slast, NOW)
end
t.running = t.running + 1
t.live = t.live - 1
t.bytes = t.bytes - j.bytes
j.attempt = j.attempt + 1
if j.first == 0 then j.first = NOW end
redis.call('HSET', k_job(id), 'state', 'running', 'attempt', j.attempt, 'claimed', NOW, 'first', j.first)
redis.call('ZADD', K_LEASES, NOW + p.timeout_us + grace, id)
local rec = redis.call('HMGET', k_job(id), 'body', 'created')
local body, created = rec[1] or '', tonumber(rec[2]) or 0
return finish({'ok', 'claimed', tn, j.type, body, j.gen, j.attempt, p.timeout_us, j.slot, created})
