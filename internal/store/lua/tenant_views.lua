-- tenant_views.lua — the views of some tenants of the shard.
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3…] tenants of this shard, at most 1000
-- Reply:   {'ok', now, {tenant, tenant_state.lua's reply}, …} — one item per
--          tenant with state (a hash, dead letters or policy overrides), in
--          the order given
--
-- A tenant without state is left out and removed from the index and its
-- name set (tenants.lua index_remove): the only writes.

if #ARGV - 2 > 1000 then
  return redis.error_reply('ERR sluice tenant_views: want at most 1000 tenants')
end
local reply = {'ok', NOW}
each_with_state({unpack(ARGV, 3)}, function(tn) -- tenants.lua
  reply[#reply + 1] = {tn, tenant_view(tn)}
end)
return reply
