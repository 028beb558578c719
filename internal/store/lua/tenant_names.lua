-- tenant_names.lua — one page of the shard's tenant names, in name order.
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  after: the names returned are > it ("" = from the first)
-- ARGV[4]  n: most names returned, 1 … 1001
-- ARGV[5]  prefix: only names that begin with it ("" = every name); the
--          caller checks it holds only tenant id bytes ([A-Za-z0-9._@-])
--          and passes an after of "" or one not below it in byte order
-- Reply:   {'ok', now, name, …} — up to n names of the name set
--          (tenants.lua) after ARGV[3] beginning with ARGV[5], in byte order
--
-- One ZRANGE BYLEX: O(log N + n). A prefix is a range too: the names that
-- begin with it are those from prefix (inclusive) to prefix .. '\255'
-- (exclusive; no tenant id holds that byte). No writes. A name whose tenant
-- has no state left is still listed until index_trim or tenant_views
-- removes it.

local after, n = ARGV[3], tonumber(ARGV[4])
if not n or n < 1 or n > 1001 then
  return redis.error_reply('ERR sluice tenant_names: want n of 1 … 1001')
end
local prefix = ARGV[5] or ''
local from, to = '-', '+'
if after ~= '' then
  from = '(' .. after
elseif prefix ~= '' then
  from = '[' .. prefix
end
if prefix ~= '' then to = '(' .. prefix .. '\255' end
local reply = {'ok', NOW}
for _, tn in ipairs(redis.call('ZRANGE', k_names(), from, to, 'BYLEX', 'LIMIT', 0, n)) do
  reply[#reply + 1] = tn
end
return reply
