-- pop.lua — FIRST VERSION, a test stand-in: release one job of one tenant.
-- The dispatcher issue replaces it with the per-shard pass of DESIGN §2.2
-- (promotion, sweep, many tenants, release cap, slot = max(slot, now + L)).
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  tenant
-- ARGV[4]  lead µs: release the head job when its slot ≤ now + lead
-- ARGV[5]  lease µs: the lease deadline is slot + lease
-- Reply:   {'ok', 0}                    nothing released
--          {'ok', 1, id, gen, slot µs}  one job released
--
-- Takes the head job (head lane first, then the backlog), skipping records
-- that are not queued (tombstones), when the tenant is not disabled, paused
-- or at its concurrency cap and the job's GCRA slot is due; then TAT ←
-- max(TAT, slot) + cost·T, gen + 1, state released, lease ZADD, counters,
-- reschedule(tenant).

local tn = ARGV[3]
local lead, lease = tonumber(ARGV[4]), tonumber(ARGV[5])
local horizon = NOW + lead

-- Read phase.
if redis.call('EXISTS', k_tenant(tn)) == 0 then return {'ok', 0} end
local p = load_policy(tn)
local t = load_tenant(tn, p)
rescale_tat(t, p, NOW)
local blocked = t.disabled == 1 or t.admin_paused == 1 or t.paused_until > horizon
  or t.running + t.released >= p.concurrency

local function take(id, from_head)
  if from_head then redis.call('ZREM', k_head(tn), id) else redis.call('LPOP', k_queue(tn)) end
end

local released = nil
while not blocked and not released do
  local from_head = true
  local id = redis.call('ZRANGE', k_head(tn), 0, 0)[1]
  if not id then
    from_head = false
    id = redis.call('LINDEX', k_queue(tn), 0)
  end
  if not id then break end
  local j = redis.call('HMGET', k_job(id), 'state', 'cost')
  if j[1] ~= 'queued' then
    take(id, from_head) -- a tombstone or a vanished record: skip it
  else
    local cost = tonumber(j[2])
    local slot = earliest(t, p, cost, NOW)
    if slot > horizon then break end
    take(id, from_head)
    t.tat = math.max(t.tat, slot) + cost * p.rate_us
    t.qtok = t.qtok - cost
    t.released = t.released + 1
    local gen = redis.call('HINCRBY', k_job(id), 'gen', 1)
    redis.call('HSET', k_job(id), 'state', 'released', 'slot', slot)
    redis.call('ZADD', K_LEASES, slot + lease, id)
    released = {'ok', 1, id, gen, slot}
  end
end

save_tenant(tn, t)
reschedule(tn, t, p, NOW)
expire_tenant(tn, t, p, NOW)
return released or {'ok', 0}
