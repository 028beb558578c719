-- members.lua — the dispatchers sharing the shard leases, for the fair share.
--
-- KEYS[1]  <p>:dispatch:members   HASH owner token → expiry (ms, Redis time)
-- ARGV[1]  owner token            ARGV[2]  TTL, ms (integer ≥ 1)
-- ARGV[3]  op: beat (join or stay, until now + TTL) | leave
-- Reply:   the number of live members after the op (expired entries are
--          deleted on the way)
--
-- Touches only KEYS[1]; the hash itself expires 2 TTLs after the last beat.

local ttl = tonumber(ARGV[2])
if not ttl or ttl < 1 or (ARGV[3] ~= 'beat' and ARGV[3] ~= 'leave') then
  return redis.error_reply('ERR sluice members: want TTL ms ≥ 1 and op beat|leave')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[3] == 'beat' then
  redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', now + ttl))
  redis.call('PEXPIRE', KEYS[1], 2 * ttl)
else
  redis.call('HDEL', KEYS[1], ARGV[1])
end
local all, live, dead = redis.call('HGETALL', KEYS[1]), 0, {}
for i = 1, #all, 2 do
  if (tonumber(all[i + 1]) or 0) > now then live = live + 1 else dead[#dead + 1] = all[i] end
end
if #dead > 0 then redis.call('HDEL', KEYS[1], unpack(dead)) end
return live
