-- Fixed window counter: at most L tokens per window of W microseconds,
-- windows aligned to the epoch. Up to 2L can pass across a window boundary.
--
-- KEYS[1]  the limiter key, a HASH: w = start of the counted window (integer
--          microseconds since the epoch), n = tokens admitted in it.
-- ARGV[1]  now: integer microseconds since the epoch; "0" reads Redis TIME.
-- ARGV[2]  cost c: tokens asked for, 1 <= c <= L (checked by the caller).
-- ARGV[3]  W: window length in integer microseconds, >= 1000.
-- ARGV[4]  L: limit in tokens per window, >= 1.
-- Reply    {allowed (0|1), remaining, retry_after_us, reset_after_us}, all
--          integers; reset_after is the time until the window ends, and a
--          refusal's retry_after is the same (c <= L fits a fresh window).
--
-- Admitting increments n and sets the TTL to W in the same script, so the
-- key never lives without a TTL: it outlives its window (which ends at most
-- W after now) by less than W, and a stale w reads as an empty window. W
-- rather than the window's end keeps the state while a fake clock (tests
-- passing now) runs apart from Redis' expiry clock.
-- A refusal writes nothing. Reads happen before writes.
-- now (µs) and cost come from prelude.lua, prepended at init.
local W = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])

local state = redis.call('HMGET', KEYS[1], 'w', 'n')
local w = tonumber(state[1])
local n = tonumber(state[2]) or 0
local ws = now - now % W
if not w or ws > w then
  n = 0 -- a new window
elseif ws < w then
  ws, now = w, w -- the clock went back: hold at the stored window's start
end
local reset = ws + W - now

if n + cost > limit then
  return {0, math.max(limit - n, 0), reset, reset}
end

redis.call('HSET', KEYS[1], 'w', string.format('%d', ws), 'n', n + cost)
redis.call('PEXPIRE', KEYS[1], math.ceil(W / 1000))
return {1, limit - n - cost, 0, reset}
