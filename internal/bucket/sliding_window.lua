-- Sliding window counter: the count of the current window plus the previous
-- window's count weighted by how much of it the sliding window still
-- overlaps; at most L tokens per window of W microseconds (an estimate that
-- assumes the previous window's tokens were spread evenly).
--
-- KEYS[1]  the limiter key, a HASH: w = start of the current window (integer
--          microseconds since the epoch, windows aligned to the epoch),
--          c = tokens admitted in it, p = tokens admitted in the window before.
-- ARGV[1]  now: integer microseconds since the epoch; "0" reads Redis TIME.
-- ARGV[2]  cost k: tokens asked for, 1 <= k <= L (checked by the caller).
-- ARGV[3]  W: window length in integer microseconds, >= 1000.
-- ARGV[4]  L: limit in tokens per window, >= 1; the caller keeps L*W <= 2^52.
-- Reply    {allowed (0|1), remaining, retry_after_us, reset_after_us}, all
--          integers. reset_after is the time until the estimate is back to 0.
--
-- With e = now - w, admitted iff p*(W - e)/W + c + k <= L, decided exactly in
-- integers as ceil(p*(W - e)/W) + c + k <= L. Admitting writes w, c and p and
-- sets the TTL to the time the estimate reaches 0 (ms, rounded up).
-- A refusal writes nothing. Reads happen before writes.
-- now (µs) and cost come from prelude.lua, prepended at init.
local W = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])

local state = redis.call('HMGET', KEYS[1], 'w', 'c', 'p')
local w = tonumber(state[1])
local cur = tonumber(state[2]) or 0
local prev = tonumber(state[3]) or 0
local ws = now - now % W
if not w or ws > w + W then
  cur, prev = 0, 0 -- fresh, or idle for a whole window
elseif ws == w + W then
  cur, prev = 0, cur -- rolled into the next window
elseif ws < w then
  ws, now = w, w -- the clock went back: hold at the stored window's start
end
local e = now - ws
local weighted = math.ceil(prev * (W - e) / W)

if weighted + cur + cost <= limit then
  cur = cur + cost
  local reset = ws + 2 * W - now
  redis.call('HSET', KEYS[1], 'w', string.format('%d', ws), 'c', cur, 'p', prev)
  redis.call('PEXPIRE', KEYS[1], math.ceil(reset / 1000))
  return {1, math.max(limit - weighted - cur, 0), 0, reset}
end

-- Refused: the earliest e' at which prev*(W - e')/W <= a, a = L - cur - cost,
-- is W - floor(a*W/prev); if a < 0, wait for the next window, where the
-- current count becomes the weighted one and nothing is counted yet.
local retry
local a = limit - cur - cost
if a >= 0 then
  retry = W - math.floor(a * W / prev) - e
else
  retry = (W - e) + W - math.floor((limit - cost) * W / cur)
end
local reset = 0
if cur > 0 then
  reset = ws + 2 * W - now
elseif prev > 0 then
  reset = ws + W - now
end
return {0, math.max(limit - weighted - cur, 0), retry, reset}
