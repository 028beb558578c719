-- Sliding window log: exact; at most L tokens admitted in any window
-- (now - W, now] of W microseconds.
--
-- KEYS[1]  the limiter key, a ZSET with one member per admitted token, scored
--          by its admission time (integer microseconds since the epoch);
--          member "<time>:<index>", unique per key.
-- ARGV[1]  now: integer microseconds since the epoch; "0" reads Redis TIME.
-- ARGV[2]  cost c: tokens asked for, 1 <= c <= L (checked by the caller).
-- ARGV[3]  W: window length in integer microseconds, >= 1000.
-- ARGV[4]  L: limit in tokens per window, >= 1.
-- Reply    {allowed (0|1), remaining, retry_after_us, reset_after_us}, all
--          integers. reset_after is the time until the newest token leaves
--          the window (the log is empty, the limiter full again).
--
-- The refusal happens before anything is stored, so a key holds at most L
-- members. Admitting trims members that left the window, adds c members and
-- sets the TTL to W (ms, rounded up). A refusal writes nothing. Reads happen
-- before writes. The key's clock never goes back: now is raised to the newest
-- score, which keeps members unique.
-- now (µs) and cost come from prelude.lua, prepended at init.
local W = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])

-- Lua's tostring would print 1.8e15 as "1.795e+15": format integers explicitly.
local function int(x)
  return string.format('%d', x)
end

local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local last = tonumber(newest[2])
if last and last > now then
  now = last
end
local from = '(' .. int(now - W) -- members scored after now - W are in the window
local n = redis.call('ZCOUNT', KEYS[1], from, '+inf')

if n + cost > limit then
  -- The (n + cost - L)-th oldest token in the window must leave first.
  local k = n + cost - limit
  local oldest = redis.call('ZRANGEBYSCORE', KEYS[1], from, '+inf',
    'WITHSCORES', 'LIMIT', k - 1, 1)
  local retry = tonumber(oldest[2]) + W - now
  return {0, math.max(limit - n, 0), retry, last + W - now}
end

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', int(now - W))
local stamp = int(now)
local args = {}
for i = 0, cost - 1 do
  args[#args + 1] = stamp
  args[#args + 1] = stamp .. ':' .. int(n + i)
  if #args >= 1000 or i == cost - 1 then
    redis.call('ZADD', KEYS[1], unpack(args))
    args = {}
  end
end
redis.call('PEXPIRE', KEYS[1], math.ceil(W / 1000))
return {1, limit - n - cost, 0, W}
