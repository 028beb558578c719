-- secrets_read.lua — a tenant's live webhook secrets by API and whether its
-- policy lets webhook jobs go unsigned (no writes).
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  tenant
-- Reply:   {'ok', now, unsigned (0|1), id, created µs, expires µs (0 = never),
--          sealed, …} — the live secrets (expires = 0 or > now), in no order.

local tn = ARGV[3]
local p = load_policy(tn)
local all = rcall('HGETALL', k_secrets(tn))
local reply = {'ok', NOW, p.unsigned == 1 and 1 or 0}
for i = 1, #all, 2 do
  if string.sub(all[i], 1, 1) ~= '~' then
    local created, expires, sealed = string.match(all[i + 1], '^(%d+) (%d+) (%S+)$')
    if not created then return redis.error_reply('ERR sluice secrets_read: corrupt secret of ' .. tn) end
    local e = tonum(expires)
    if e == 0 or e > NOW then
      reply[#reply + 1] = all[i]
      reply[#reply + 1] = tonum(created)
      reply[#reply + 1] = e
      reply[#reply + 1] = sealed
    end
  end
end
return reply
