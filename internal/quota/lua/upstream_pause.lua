-- upstream_pause.lua — pause or resume one upstream (issue #15). A
-- standalone script (clock.lua, no lib.lua): its one key is the upstream's
-- hash, in the upstream's own slot {u:<name>}.
--
-- KEYS[1]  <p>:{u:<name>}:u (HASH; this script reads cfg and writes pu, pr)
-- ARGV[1]  now µs (0 = Redis TIME)
-- ARGV[2]  op: 'pause' | 'resume'
-- pause:   ARGV[3] until µs (> now; MANUAL = 2^52 pauses until resume)
--          ARGV[4] reason: 'manual' | 'throttled'
-- Reply:   {'ok', paused until µs (0: not paused), reason ('' when none), now}
--          | {'not_found'} (no such upstream: the hash has no cfg)
--          | {'invalid'} (pause: until is not after now)
--
-- A pause never shortens a pause in force: pu becomes max(pu, until), and
-- pr is the reason of the pause that ends last (a pause that ends earlier
-- than the one in force changes nothing). A pause whose end has passed is
-- not in force. resume sets pu to 0 and deletes pr, whatever the reason.
-- The coordinator grants nothing before pu (upstream_grant.lua). Reads
-- before writes; a refusal writes nothing.

local NOW = clock(ARGV[1]) -- clock.lua
local key, op = KEYS[1], ARGV[2]
if op ~= 'pause' and op ~= 'resume' then
  return redis.error_reply('ERR sluice upstream_pause: want op pause|resume')
end

-- Read phase.
local cur = redis.call('HMGET', key, 'cfg', 'pu', 'pr')
if not cur[1] then return {'not_found'} end
local pu, pr = tonumber(cur[2]) or 0, cur[3] or ''
if pu <= NOW then pu, pr = 0, '' end

-- Write phase.
if op == 'resume' then
  redis.call('HSET', key, 'pu', 0)
  redis.call('HDEL', key, 'pr')
  return {'ok', 0, '', NOW}
end
local until_us, reason = tonumber(ARGV[3]), ARGV[4]
if not until_us or (reason ~= 'manual' and reason ~= 'throttled') then
  return redis.error_reply('ERR sluice upstream_pause: want until µs and reason manual|throttled')
end
if until_us <= NOW then return {'invalid'} end
if until_us > pu then
  pu, pr = until_us, reason
  redis.call('HSET', key, 'pu', string.format('%d', pu), 'pr', pr)
end
return {'ok', pu, pr, NOW}
