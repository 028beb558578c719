-- hold.lua — take or keep a dispatcher's shard lease.
--
-- KEYS[1]  <p>:dispatch:lease:<shard>   STRING owner token, with a TTL
-- ARGV[1]  owner token (random per Dispatcher)
-- ARGV[2]  lease TTL, ms (integer ≥ 1)
-- Reply:   1  the caller holds the lease until now + TTL (taken or renewed)
--          0  another owner holds it
--
-- Reads before writes; touches only KEYS[1].

local owner = redis.call('GET', KEYS[1])
if owner == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if owner then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
