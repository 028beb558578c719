-- release.lua — give up a dispatcher's shard lease, if still held.
--
-- KEYS[1]  <p>:dispatch:lease:<shard>   STRING owner token, with a TTL
-- ARGV[1]  owner token
-- Reply:   1  released;  0  not held by this owner (expired or taken over)

if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
