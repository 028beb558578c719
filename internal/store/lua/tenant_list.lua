-- tenant_list.lua — one step of a walk over the shard's tenant index.
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  ZSCAN cursor of the index ("0" = from the start)
-- ARGV[4]  COUNT hint, 1 … 1000
-- Reply:   {'ok', now, next cursor ("0" = the walk is done),
--           {tenant, exists (0|1), live, running, oldest queued job's created
--            µs (-1 = none), admin_paused, admin_until, paused_until,
--            disabled, dead letters}, …}
--
-- A ZSCAN step (tenants.lua: every entry present throughout the walk is
-- met at least once; the caller drops repeats), with a summary of each
-- tenant: a few reads each (the hash; the head of its lists and that job's
-- created time when it holds jobs; the dead set's size). An entry whose
-- tenant has no state left (no hash, no dead letters, no policy overrides)
-- is left out and removed from the index and its name set: the only writes.

local cursor, count = ARGV[3], tonumber(ARGV[4])
if not count or count < 1 or count > 1000 then
  return redis.error_reply('ERR sluice tenant_list: want a COUNT of 1 … 1000')
end
local key = k_index()
local r = redis.call('ZSCAN', key, cursor, 'COUNT', count)
local reply, gone = {'ok', NOW, r[1]}, {}
for i = 1, #r[2], 2 do
  local tn = r[2][i]
  local exists = redis.call('EXISTS', k_tenant(tn))
  local dead = redis.call('ZCARD', k_dead(tn))
  if exists == 0 and dead == 0 and redis.call('HEXISTS', K_POLICY, tn) == 0 then
    gone[#gone + 1] = tn
  else
    local t = load_tenant(tn, BUILTIN)
    local oldest = -1
    if t.qtok > 0 or t.hlen > 0 then oldest = oldest_queued(tn, t) end
    reply[#reply + 1] = {tn, exists, t.live, t.running, oldest, t.admin_paused, t.admin_until,
      t.paused_until, t.disabled, dead}
  end
end
index_remove(gone) -- tenants.lua
return reply
