-- upstream_run.lua — an upstream's concurrency leases (issue #15): at most
-- `concurrency` jobs naming the upstream run at once, across all workers.
-- A standalone script (clock.lua, no lib.lua): both keys are in the
-- upstream's own slot {u:<name>}.
--
-- KEYS[1]  <p>:{u:<name>}:u   (HASH; this script reads p only)
-- KEYS[2]  <p>:{u:<name>}:run (ZSET holder → lease expiry µs)
-- ARGV[1]  now µs (0 = Redis TIME)
-- ARGV[2]  op: 'acquire' | 'release' | 'count'
-- acquire: ARGV[3] holder (job id ':' gen), ARGV[4] lease life µs (≥ 1)
-- release: ARGV[3] holder
-- Reply:   acquire: {'ok', held (1: a lease now runs to now + life; 0: the
--          upstream has no concurrency bound, or no params: nothing to
--          hold), leases in force}
--          | {'full', leases in force, µs until the earliest expires}
--          release: {'ok', removed (0|1), leases in force}
--          count:   {'ok', leases in force}
--
-- A lease whose expiry is not after now is not in force: every op but
-- count removes such leases first. acquire by a holder already in the set
-- renews its lease (idempotent: a re-sent call holds one lease). A lower
-- concurrency (a PUT) takes effect as leases end: none is revoked. The run
-- set's TTL follows its latest lease (PEXPIRE), so a set nobody renews
-- disappears. Reads before writes; 'full' writes nothing but the pruning.

local NOW = clock(ARGV[1]) -- clock.lua
local hash, run, op = KEYS[1], KEYS[2], ARGV[2]

local function in_force() return redis.call('ZCOUNT', run, '(' .. NOW, '+inf') end

if op == 'count' then return {'ok', in_force()} end
if op ~= 'acquire' and op ~= 'release' then
  return redis.error_reply('ERR sluice upstream_run: want op acquire|release|count')
end
local holder = ARGV[3]
if not holder or holder == '' then return redis.error_reply('ERR sluice upstream_run: want a holder') end

redis.call('ZREMRANGEBYSCORE', run, '-inf', NOW)
if op == 'release' then
  local removed = redis.call('ZREM', run, holder)
  return {'ok', removed, redis.call('ZCARD', run)}
end

local life = tonumber(ARGV[4])
if not life or life < 1 then return redis.error_reply('ERR sluice upstream_run: want a lease life ≥ 1 µs') end
local raw = redis.call('HGET', hash, 'p')
local ok, p = pcall(cjson.decode, raw or '')
local limit = ok and type(p) == 'table' and tonumber(p.c) or 0
if limit < 1 then return {'ok', 0, redis.call('ZCARD', run)} end

local n = redis.call('ZCARD', run)
if not redis.call('ZSCORE', run, holder) and n >= limit then
  local first = redis.call('ZRANGE', run, 0, 0, 'WITHSCORES')
  return {'full', n, math.max(tonumber(first[2]) - NOW, 1)}
end
redis.call('ZADD', run, NOW + life, holder)
local last = redis.call('ZRANGE', run, -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', run, math.ceil((tonumber(last[2]) - NOW) / 1000) + 1)
return {'ok', 1, redis.call('ZCARD', run)}
