-- claim.lua — a worker's claim of a released job at its slot (DESIGN §2.3, step 3).
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  job id                    ARGV[4]  gen the task carries
-- ARGV[5]  ε: tolerance µs           ARGV[6]  D: lead µs (the re-slot window)
-- Reply:   {'ok', 'claimed', tenant, type, body, gen, attempt, timeout µs, slot µs}
--          {'ok', 'early', wait µs}           now < slot − ε; wait = slot − now
--          {'ok', 'stale', state}             gen not current or not released ('' = no record)
--          {'ok', 'canceled'}
--          {'ok', 'returned', reason}         back to the head lane unsent, gen + 1, no
--                                             attempt: disabled | paused | concurrency | late
--          {'ok', 'reslotted', slot µs, gen}  late: claim again at the new slot with gen
--
-- released(gen) → running(gen) when gen is current, the job is not
-- canceled, the tenant is neither disabled nor paused (admin or upstream)
-- and has running < concurrency (the job itself is counted as released), and
-- |now − slot| ≤ ε. Then attempt + 1, claimed = now, first = now on the first
-- attempt, the lease deadline becomes now + timeout + grace (grace: the
-- pass's, field grace), and the job counts toward concurrency as running.
-- Late (now > slot + ε), once per delivery: a new slot from the GCRA (TAT ←
-- max(TAT, slot′) + cost·T, T the effective interval T_eff), gen + 1, lease
-- slot′ + grace, when slot′ ≤ now + D; else, or when the delivery was
-- already re-slotted, back to the head lane. Every change ends with
-- reschedule(tenant). No wake-up is published: the dispatcher passes at
-- least every D/2.

local id, gen, eps, D = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
if not (gen and eps and D) then
  return redis.error_reply('ERR sluice claim: want integer gen, tolerance and lead')
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

if NOW > j.slot + eps then
  if j.reslot == 1 then return give_back('late') end
  local slot = earliest(t, p, j.cost, NOW)
  if slot > NOW + D then return give_back('late') end
  take(t, p, slot, j.cost)
  j.gen = j.gen + 1
  redis.call('HSET', k_job(id), 'gen', j.gen, 'slot', slot, 'reslot', 1)
  redis.call('ZADD', K_LEASES, slot + grace, id)
  return finish({'ok', 'reslotted', slot, j.gen})
end

unrelease(j, t)
t.running = t.running + 1
t.live = t.live - 1
t.bytes = t.bytes - j.bytes
j.attempt = j.attempt + 1
if j.first == 0 then j.first = NOW end
redis.call('HSET', k_job(id), 'state', 'running', 'attempt', j.attempt, 'claimed', NOW, 'first', j.first)
redis.call('ZADD', K_LEASES, NOW + p.timeout_us + grace, id)
local body = redis.call('HGET', k_job(id), 'body') or ''
return finish({'ok', 'claimed', tn, j.type, body, j.gen, j.attempt, p.timeout_us, j.slot})
