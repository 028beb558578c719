-- tenant_list.lua — one step of a walk over the shard's tenant index.
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  ZSCAN cursor of the index ("0" = from the start)
-- ARGV[4]  COUNT hint, 1 … 1000
-- Reply:   {'ok', next cursor ("0" = the walk is done), {tenant, view}, …}
--          each view as tenant_state.lua's reply (tenants.lua tenant_view)
--
-- A ZSCAN step (tenants.lua: every entry present throughout the walk is
-- met at least once; the caller drops repeats). An entry whose tenant has
-- no state left (no hash, no dead letters, no policy overrides) is left out
-- and removed from the index: the only write.

local cursor, count = ARGV[3], tonumber(ARGV[4])
if not count or count < 1 or count > 1000 then
  return redis.error_reply('ERR sluice tenant_list: want a COUNT of 1 … 1000')
end
local key = k_index()
local r = redis.call('ZSCAN', key, cursor, 'COUNT', count)
local reply, gone = {'ok', r[1]}, {}
for i = 1, #r[2], 2 do
  local tn = r[2][i]
  local v = tenant_view(tn)
  -- v[3] exists, v[16] overrides version, v[21] dead letters
  if v[3] == 0 and v[16] == 0 and v[21] == 0 then
    gone[#gone + 1] = tn
  else
    reply[#reply + 1] = {tn, v}
  end
end
if #gone > 0 then redis.call('ZREM', key, unpack(gone)) end
return reply
