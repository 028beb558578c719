-- tenant_names.lua — one page of the shard's tenant names, in name order.
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  after: the names returned are > it ("" = from the first)
-- ARGV[4]  n: most names returned, 1 … 1001
-- Reply:   {'ok', now, name, …} — up to n names of the name set
--          (tenants.lua) after ARGV[3], in byte order
--
-- One ZRANGE BYLEX: O(log N + n). No writes. A name whose tenant has no
-- state left is still listed until index_trim or tenant_views removes it.

local after, n = ARGV[3], tonumber(ARGV[4])
if not n or n < 1 or n > 1001 then
  return redis.error_reply('ERR sluice tenant_names: want n of 1 … 1001')
end
local from = '-'
if after ~= '' then from = '(' .. after end
local reply = {'ok', NOW}
for _, tn in ipairs(redis.call('ZRANGE', k_names(), from, '+', 'BYLEX', 'LIMIT', 0, n)) do
  reply[#reply + 1] = tn
end
return reply
