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
local reply = signing_set(tn, p, {'ok'}) -- lib.lua
if not reply then return redis.error_reply('ERR sluice secrets_read: corrupt secret of ' .. tn) end
return reply
