-- Token bucket: capacity b tokens, refilled one token every T microseconds.
--
-- KEYS[1]  the limiter key, a HASH: tk = whole tokens held at time ts,
--          ts = integer microseconds since the epoch from which the next
--          token is counted. Missing means a full bucket.
-- ARGV[1]  now: integer microseconds since the epoch; "0" reads Redis TIME.
-- ARGV[2]  cost c: tokens asked for, 1 <= c <= b (checked by the caller).
-- ARGV[3]  T: refill interval, integer microseconds per token, >= 1.
-- ARGV[4]  b: capacity in tokens, >= 1; the caller keeps b*T <= 2^52.
-- Reply    {allowed (0|1), remaining, retry_after_us, reset_after_us}, all
--          integers (Lua numbers are truncated on return: never a fraction).
--
-- Integer state, no fractions: the bucket holds min(b, tk + floor((now-ts)/T))
-- tokens; ts advances by whole intervals so a partial interval carries over,
-- and is dropped (ts = now) once the bucket is full. Admitting c tokens sets
-- a TTL of the time until the bucket is full again (ms, rounded up): when the
-- key expires the bucket is full, exactly as a missing key reads.
-- A refusal writes nothing. Reads happen before writes.
-- now (µs) and cost come from prelude.lua, prepended at init.
local T = tonumber(ARGV[3])
local burst = tonumber(ARGV[4])

local state = redis.call('HMGET', KEYS[1], 'tk', 'ts')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
if not tokens or not ts then
  tokens, ts = burst, now
end

local gained = 0
if now > ts then
  gained = math.floor((now - ts) / T)
end
local avail = tokens + gained
local base = ts + gained * T -- when the token being filled started
if avail >= burst then
  avail, base = burst, now
end

if avail < cost then
  local retry = base + (cost - avail) * T - now
  local reset = base + (burst - avail) * T - now
  return {0, avail, retry, reset}
end

local left = avail - cost
local reset = base + (burst - left) * T - now
redis.call('HSET', KEYS[1], 'tk', left, 'ts', string.format('%d', base))
redis.call('PEXPIRE', KEYS[1], math.ceil(reset / 1000))
return {1, left, 0, reset}
