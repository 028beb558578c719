-- cancel.lua — cancel one job (docs/design.md §2, the DELETE column).
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  job id                    ARGV[4]  retention µs (≥ 1000)
-- ARGV[5]  idempotency retention µs (0 = the tombstone's)
-- Reply:   {'ok', prior state, field, value, …}  the record after the cancel
--          {'not_found'}
--          {'conflict', state}  the job is running or already terminal
--
-- queued → removed from the backlog (LREM), the head lane (ZREM) or its
-- upstream lane (lanes.lua);
-- scheduled, retrying → removed from the delayed set; released → removed from
-- the lease set (the asynq task still in flight finds a tombstone at its
-- claim). The record becomes a tombstone: state canceled, `ended` = now, body
-- dropped, expiring after the retention, as does its idempotency key; its
-- callback, when it has one, is queued (lifecycle.lua callback_due). The
-- tenant's counters are decremented, then reschedule(tenant), expiry and
-- the wake check (a canceled released job frees its tenant's concurrency
-- and release cap; a canceled head job lets a cheaper one be next).

local id = ARGV[3]
local retention_ms = math.floor(tonumber(ARGV[4]) / 1000)
local idem_ms = math.floor((tonumber(ARGV[5]) or 0) / 1000)
if idem_ms <= 0 then idem_ms = retention_ms end
local jk = k_job(id)

-- Read phase.
local j = redis.call('HMGET', jk, 'state', 'tenant', 'cost', 'bytes', 'idem', 'ups')
local state, tn = j[1], j[2]
if not state then return {'not_found'} end
if not LIVE[state] then return {'conflict', state} end
local cost, size, idem = tonumber(j[3]), tonumber(j[4]), j[5] or ''
local p = load_policy(tn)
local t = load_tenant(tn, p)
rescale_tat(t, p, NOW)
local before = shard_earliest()

-- Write phase.
if state == 'queued' then
  if (j[6] or '') ~= '' then
    LN.remove({id = id, tenant = tn, ups = j[6]}, t) -- lanes.lua
  elseif redis.call('LREM', k_queue(tn), 1, id) == 0 then
    t.hlen = t.hlen - redis.call('ZREM', k_head(tn), id)
  end
  t.qtok = t.qtok - cost
elseif state == 'released' then
  redis.call('ZREM', K_LEASES, id)
  t.released = t.released - 1
  t.rtok = t.rtok - cost
else
  redis.call('ZREM', K_DELAYED, id)
end
t.live = t.live - 1
t.bytes = t.bytes - size

redis.call('HSET', jk, 'state', 'canceled', 'ended', NOW)
redis.call('HDEL', jk, 'body')
callback_due({id = id}, NOW) -- lifecycle.lua
redis.call('PEXPIRE', jk, retention_ms)
if idem ~= '' then redis.call('PEXPIRE', k_idem(tn, idem), idem_ms) end

reschedule(tn, t, p, NOW)
save_tenant(tn, t)
expire_tenant(tn, t, p, NOW, retention_ms * 1000) -- listed while the tombstone is kept
wake(before)

local reply = {'ok', state}
for _, v in ipairs(redis.call('HGETALL', jk)) do reply[#reply + 1] = v end
return reply
