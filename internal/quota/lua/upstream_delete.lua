-- upstream_delete.lua — remove one upstream from the registry (issue #15;
-- DELETE /v1/upstreams/{name}). A standalone script (clock.lua, no
-- lib.lua): every key is in the upstream's own slot {u:<name>}.
--
-- KEYS[1]  <p>:{u:<name>}:u   (HASH: the registry's and the coordinator's fields)
-- KEYS[2]  <p>:{u:<name>}:cal (HASH: the coordinator's demand registrations)
-- KEYS[3]  <p>:{u:<name>}:g   (HASH: segments granted, not yet collected)
-- KEYS[4]  <p>:{u:<name>}:run (ZSET: concurrency leases, upstream_run.lua)
-- ARGV[1]  now µs (0 = Redis TIME)
-- ARGV[2]  If-Match version: -1 = any, else the current version
-- Reply:   {'ok', version deleted} | {'not_found'}
--          | {'version_mismatch', current version}
--          | {'in_use', leases in force} (jobs naming it are running)
--
-- Deletes the four keys. The jobs waiting on the upstream in the shards'
-- lanes are in other slots: the caller checks them first
-- (Store.DeleteUpstream). Reads before writes; a refusal writes nothing.

local NOW = clock(ARGV[1]) -- clock.lua
local if_version = tonumber(ARGV[2])
if not if_version then return redis.error_reply('ERR sluice upstream_delete: want a version') end

-- Read phase.
local cur = redis.call('HMGET', KEYS[1], 'cfg', 'v')
if not cur[1] then return {'not_found'} end
local version = tonumber(cur[2]) or 0
if if_version >= 0 and if_version ~= version then return {'version_mismatch', version} end
local running = redis.call('ZCOUNT', KEYS[4], '(' .. NOW, '+inf')
if running > 0 then return {'in_use', running} end

-- Write phase.
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
return {'ok', version}
