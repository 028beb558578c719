-- replay.lua — re-queue a dead job (docs/design.md §2, dead → queued).
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  job id
-- Reply:   {'ok', field, value, …}  the record after the replay
--          {'not_found'}
--          {'conflict', state}      the job is not dead
--
-- dead → queued at the backlog's tail: same id, gen + 1, attempts and the
-- attempt log kept (a replayed job whose attempts or retry duration are used
-- up gets exactly one more attempt), admission not charged and backlog caps
-- not applied (an operator's decision). Out of the dead set, `ended`,
-- `due` and `reason` cleared, the record and the idempotency key persisted again; counters,
-- reschedule(tenant), expiry and the wake check.

local id = ARGV[3]

-- Read phase.
local j = load_job(id)
if not j then return {'not_found'} end
if j.state ~= 'dead' then return {'conflict', j.state} end
local tn = j.tenant
local p = load_policy(tn)
local t = load_tenant(tn, p)
rescale_tat(t, p, NOW)
local before = shard_earliest()

-- Write phase.
requeue_dead(j, t) -- tenants.lua

reschedule(tn, t, p, NOW)
save_tenant(tn, t)
expire_tenant(tn, t, p, NOW)
wake(before)
local reply = {'ok'}
for _, v in ipairs(redis.call('HGETALL', k_job(id))) do reply[#reply + 1] = v end
return reply
