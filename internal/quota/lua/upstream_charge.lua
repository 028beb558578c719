-- upstream_charge.lua — a cost correction on an upstream's schedule (issue
-- #15, cost correction). A standalone script (clock.lua, no lib.lua): its
-- one key is the upstream's hash, in the upstream's own slot {u:N}.
--
-- KEYS[1]  <p>:{u:N}:u  HASH: field tat = TAT_U, the upstream's virtual
--          schedule (µs; absent = 0), field p = the scripts' integers as
--          JSON, p.iv = T, µs per cost unit (≥ 1)
-- ARGV[1]  now µs (0 = Redis TIME)
-- ARGV[2]  delta: actual − reserved cost, a non-zero integer, |delta| ≤ 10⁶
-- Reply:   {'ok', tat after µs} | {'not_found'} (no such upstream, or no
--          params yet: nothing is written)
--
-- The tenant's rule (finish.lua correct), on TAT_U with d = delta·T:
--   charge (d > 0): tat ← tat + d, at most now + MAX_AHEAD (never lowered);
--   refund (d < 0): tat ← max(tat + d, now) when tat > now; a tat already
--     past stays (the upstream is idle: nothing to give back).
-- Reads (HMGET) before the write (HSET of tat only).

local NOW = clock(ARGV[1]) -- clock.lua
local MAX_AHEAD = 3600000000000000 -- policy.MaxSpan µs: tat stays exact in doubles
local delta = tonumber(ARGV[2])
if not delta or delta == 0 or delta ~= math.floor(delta) or math.abs(delta) > 1000000 then
  return redis.error_reply('ERR sluice upstream_charge: want a non-zero integer delta, |delta| ≤ 1000000')
end

local r = redis.call('HMGET', KEYS[1], 'tat', 'p')
if not r[2] then return {'not_found'} end
local ok, params = pcall(cjson.decode, r[2])
local iv = ok and type(params) == 'table' and tonumber(params.iv)
if not iv or iv < 1 or iv ~= math.floor(iv) then
  return redis.error_reply('ERR sluice upstream_charge: corrupt field p of ' .. KEYS[1])
end
local tat = tonumber(r[1]) or 0
local d = delta * iv
local after = tat
if d > 0 then
  after = math.max(tat, math.min(tat + d, NOW + MAX_AHEAD))
elseif tat > NOW then
  after = math.max(tat + d, NOW)
end
if after ~= tat then redis.call('HSET', KEYS[1], 'tat', string.format('%d', after)) end
return {'ok', after}
