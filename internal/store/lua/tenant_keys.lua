-- tenant_keys.lua — one step of a walk over the shard's tenant index that
-- reads one sort key and the state of each tenant.
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  ZSCAN cursor of the index ("0" = from the start)
-- ARGV[4]  COUNT hint, 1 … 1000
-- ARGV[5]  key: 'backlog' (live jobs) or 'oldest' (the oldest queued job's
--          created µs, -1 = none)
-- Reply:   {'ok', now, next cursor ("0" = the walk is done),
--           tenant, key, state, tenant, key, state, …}
--          state: 'd' disabled, 'p' paused (operator or upstream, now),
--          'a' active
--
-- A ZSCAN step as tenant_list.lua's, reading less per tenant: the existence
-- checks (has_state), the packed state field, and for 'oldest' the head of
-- its lists and that job's created time. An entry whose tenant has no state
-- left is left out and removed (index_remove): the only writes.

local cursor, count, what = ARGV[3], tonumber(ARGV[4]), ARGV[5]
if not count or count < 1 or count > 1000 or (what ~= 'backlog' and what ~= 'oldest') then
  return redis.error_reply('ERR sluice tenant_keys: want a COUNT of 1 … 1000 and backlog or oldest')
end
local r = redis.call('ZSCAN', k_index(), cursor, 'COUNT', count)
local names = {}
for i = 1, #r[2], 2 do names[#names + 1] = r[2][i] end
local reply = {'ok', NOW, r[1]}
each_with_state(names, function(tn) -- tenants.lua
  local t = load_tenant(tn, BUILTIN)
  local key = t.live
  if what == 'oldest' then
    key = -1
    if t.qtok > 0 or t.hlen > 0 then key = oldest_queued(tn, t) end
  end
  local state = 'a'
  if t.disabled == 1 then
    state = 'd'
  elseif t.admin_paused == 1 or t.admin_until > NOW or t.paused_until > NOW then
    state = 'p'
  end
  reply[#reply + 1] = tn
  reply[#reply + 1] = key
  reply[#reply + 1] = state
end)
return reply
