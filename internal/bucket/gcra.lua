-- GCRA: the generic cell rate algorithm, a leaky bucket used as a meter.
--
-- KEYS[1]  the limiter key, a STRING: TAT, the theoretical arrival time in
--          integer microseconds since the epoch. Missing means a full bucket.
-- ARGV[1]  now: integer microseconds since the epoch; "0" reads Redis TIME.
-- ARGV[2]  cost c: tokens asked for, 1 <= c <= b (checked by the caller).
-- ARGV[3]  T: emission interval, integer microseconds per token, >= 1.
-- ARGV[4]  b: burst tolerance in tokens, >= 1; the caller keeps b*T <= 2^52.
-- Reply    {allowed (0|1), remaining, retry_after_us, reset_after_us}, all
--          integers (Lua numbers are truncated on return: never a fraction).
--
-- The earliest time c tokens conform is max(now, TAT - (b - c)*T); they are
-- admitted iff that time is <= now, and admitting sets
-- TAT <- max(TAT, now) + c*T, with a TTL of TAT - now (ms, rounded up): when
-- the key expires the bucket is full, exactly as a missing key reads.
-- A refusal writes nothing. Reads happen before writes.
-- now (µs) and cost come from prelude.lua, prepended at init.
local T = tonumber(ARGV[3])
local burst = tonumber(ARGV[4])

local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then
  tat = now
end

local allow_at = tat - (burst - cost) * T
if allow_at > now then
  local remaining = math.floor((now + burst * T - tat) / T)
  return {0, math.max(remaining, 0), allow_at - now, tat - now}
end

local new_tat = tat + cost * T
redis.call('SET', KEYS[1], string.format('%d', new_tat),
  'PX', math.ceil((new_tat - now) / 1000))
local remaining = math.floor((now + burst * T - new_tat) / T)
return {1, remaining, 0, new_tat - now}
