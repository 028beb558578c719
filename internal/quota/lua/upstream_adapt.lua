-- upstream_adapt.lua — an adaptive upstream's rate factor (issue #15): the
-- tenant AIMD rule of finish.lua (adapt), applied to the upstream's T, fed
-- by the outcomes of jobs naming it. A standalone script (clock.lua) in the
-- upstream's slot {u:N}.
--
-- KEYS[1]  <p>:{u:N}:u    HASH  p (params JSON: iv, a, …), tat, rf, cu
-- ARGV[1]  now µs (0 = Redis TIME)
-- ARGV[2]  congested (0|1)        ARGV[3]  the attempt's slot µs
-- ARGV[4]  floor, ppm (1 … 10⁶)   ARGV[5]  recovery step, ppm (1 … 10⁶)
-- Reply:   {'ok', rate factor ppm (10⁶ = full), effective interval µs}
--          {'not_found'}: no params; nothing written
--
-- Not adaptive (p.a ≠ 1): the factor is full, nothing written. Else, for an
-- attempt slotted at or after the episode's end cu (an earlier one was sent
-- at the old rate: it says nothing about the new one): a congestion signal
-- halves the factor f (field rf, 0 = full) down to the floor and starts an
-- episode until max(now, tat) — every segment handed out so far; a success
-- adds the step, up to full. The coordinator (upstream_grant.lua) spaces
-- new segments by the effective interval ⌈T·10⁶ / f⌉; segments handed out
-- keep theirs.

local NOW = clock(ARGV[1]) -- clock.lua
local FULL = 1000000
local congested, slot = ARGV[2] == '1', tonumber(ARGV[3])
local floor, step = tonumber(ARGV[4]), tonumber(ARGV[5])
if not (slot and floor and step) or floor < 1 or floor > FULL or step < 1 or step > FULL then
  return redis.error_reply('ERR sluice upstream_adapt: want slot, floor and step')
end
local u = redis.call('HMGET', KEYS[1], 'p', 'rf', 'cu', 'tat')
if not u[1] then return {'not_found'} end
local ok, p = pcall(cjson.decode, u[1])
if not ok or type(p) ~= 'table' or type(p.iv) ~= 'number' or p.iv < 1 then
  return redis.error_reply('ERR sluice upstream_adapt: corrupt params')
end
local iv = math.floor(p.iv)
local f, cu, tat = tonumber(u[2]) or 0, tonumber(u[3]) or 0, tonumber(u[4]) or 0
if f <= 0 or f > FULL then f = FULL end
if p.a ~= 1 then return {'ok', FULL, iv} end
if slot >= cu then
  if congested then
    f = math.max(floor, math.floor(f / 2))
    cu = math.max(NOW, tat)
  else
    f = math.min(FULL, f + step)
  end
  local rf = f
  if rf >= FULL then rf = 0 end
  redis.call('HSET', KEYS[1], 'rf', string.format('%d', rf), 'cu', string.format('%d', cu))
end
local q = math.floor(iv * FULL / f)
if q * f < iv * FULL then q = q + 1 end
return {'ok', f, q}
