-- meta.lua — write a deployment's parameters, or compare them and update
-- the adjustable settings (wire.Meta; store/meta.go).
--
-- KEYS[1]  <p>:meta   HASH prefix, shards, hash, schema, lead_us, min_lead_us
--                     (fixed) and the settings (tolerance_us, grace_us, …)
-- ARGV[1]  "ensure": never change an existing hash; "write": also write the
--          settings of ARGV over the stored ones when the fixed fields match
-- ARGV[2]  n: how many of the entries from ARGV[3] on are the fixed fields
-- ARGV[3…] field, value, …: the n fixed entries, then the settings
-- Reply:   {0}                   the hash did not exist: written from ARGV
--          {1, field, value, …}  the hash as stored before this call (HGETALL);
--                                with "write", the settings were written
--          {2, field, value, …}  a fixed field differs (or is missing) in the
--                                stored hash: nothing written
--
-- Reads before writes; touches only KEYS[1].

local stored = redis.call('HGETALL', KEYS[1])
if #stored == 0 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 3))
  return {0}
end
local have = {}
for i = 1, #stored, 2 do have[stored[i]] = stored[i + 1] end
local nfixed = tonumber(ARGV[2])
local status = 1
for i = 3, 2 + nfixed, 2 do
  if have[ARGV[i]] ~= ARGV[i + 1] then status = 2 end
end
if status == 1 and ARGV[1] == 'write' and #ARGV > 2 + nfixed then
  redis.call('HSET', KEYS[1], unpack(ARGV, 3 + nfixed))
end
table.insert(stored, 1, status)
return stored
