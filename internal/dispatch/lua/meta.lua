-- meta.lua — write the deployment's fixed parameters once, or read them.
--
-- KEYS[1]  <p>:meta   HASH prefix, shards, hash, schema, lead_us, min_lead_us
-- ARGV     field, value, field, value, … (the caller's parameters)
-- Reply:   {0, field, value, …}  the hash did not exist: written from ARGV
--          {1, field, value, …}  the stored hash (HGETALL), for the caller to compare
--
-- Reads before writes; touches only KEYS[1]; never changes an existing hash.

local stored = redis.call('HGETALL', KEYS[1])
if #stored > 0 then
  table.insert(stored, 1, 1)
  return stored
end
redis.call('HSET', KEYS[1], unpack(ARGV))
local reply = {0}
for _, v in ipairs(ARGV) do reply[#reply + 1] = v end
return reply
