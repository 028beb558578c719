-- upstream_quota.lua — pacing an upstream by the quota its answers report
-- in headers (issue #32): records one answer's quota and cost correction on
-- the upstream, which its coordinator (upstream_grant.lua) paces by. A
-- standalone script (clock.lua) in the upstream's slot {u:N}.
--
-- KEYS[1]  <p>:{u:N}:u    HASH  p (params JSON: iv, a, s, np), tat, rf, and
--          the quota fields below
-- ARGV[1]  now µs (0 = Redis TIME)
-- ARGV[2]  unit: 0 = no quota reported (only the correction), 1 requests,
--          2 tokens
-- ARGV[3]  remaining (≥ 0)        ARGV[4]  limit (≥ 0; 0 = unknown)
-- ARGV[5]  reset in µs (≥ 1 when unit > 0)
-- ARGV[6]  the header remaining was read from (≤ 128 bytes)
-- ARGV[7]  sent µs: the attempt's send instant (its slot)
-- ARGV[8]  delta: the attempt's actual − reserved cost (0 = none), |delta|
--          ≤ 10⁶
-- ARGV[9]  the attempt's reserved cost (≥ 1; absent: 1)
-- Reply:   {'ok', recorded (0|1), left}: whether the report replaced the
--          recorded quota, and what is left of the recorded one now (qr −
--          qf; 0 when none is in force)
--          {'not_found'}: no params; nothing written
--
-- Fields (beside the registry's): qu unit (1|2), qr remaining, ql limit, qt
-- reset µs, qh the header, qs the report's send instant, qf the units sent
-- since (in flight at the report, then every unit a grant round hands
-- out: upstream_grant.lua), qi the interval the last paced round used.
--
-- Only an upstream with pause_scope upstream (p.s = 1) and pacing headers
-- (p.np ≠ 1) is paced: for the others nothing is written ({'ok', 0, 0}).
-- A correction (delta ≠ 0) of an attempt sent after the recorded report,
-- while a tokens quota is in force, moves qf by delta (the upstream counted
-- the tokens the answer reports, not the reserved ones). A report replaces
-- the recorded quota unless it is older news: the same unit, a reset less
-- than WINDOW after the recorded one, and more left than recorded (an answer
-- overtaken by a later one). Replacing it, qf is what the calendar handed
-- out from the attempt's own units to the reset: ⌈(min(tat, reset) −
-- sent) / T⌉ − (cost − 1) units at the interval of the last round (the
-- calendar's units
-- the upstream cannot have counted yet: in flight or about to leave; an
-- estimate that errs high when segments go unused). Reads (HMGET) before
-- the writes (HSET).

local NOW = clock(ARGV[1]) -- clock.lua
local WINDOW = 1000000 -- µs: finish.lua PACE.WINDOW
local unit, rem, lim, rin = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local src, sent, delta, cost = ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9] or '1')
if not (unit and rem and lim and rin and sent and delta and cost) or (unit ~= 0 and unit ~= 1 and unit ~= 2)
  or rem < 0 or lim < 0 or (unit > 0 and rin < 1) or sent < 0 or math.abs(delta) > 1000000
  or cost < 1 or cost > 1000000 or #src > 128 then
  return redis.error_reply('ERR sluice upstream_quota: bad arguments')
end

local u = redis.call('HMGET', KEYS[1], 'p', 'tat', 'rf', 'qu', 'qr', 'qt', 'qf', 'qs', 'qi')
if not u[1] then return {'not_found'} end
local ok, p = pcall(cjson.decode, u[1])
if not ok or type(p) ~= 'table' or type(p.iv) ~= 'number' or p.iv < 1 then
  return redis.error_reply('ERR sluice upstream_quota: corrupt field p of ' .. KEYS[1])
end
if p.s ~= 1 or p.np == 1 then return {'ok', 0, 0} end
local tat, rf = tonumber(u[2]) or 0, tonumber(u[3]) or 0
local qu, qr, qt, qf = tonumber(u[4]) or 0, tonumber(u[5]) or 0, tonumber(u[6]) or 0, tonumber(u[7]) or 0
local qs, qi = tonumber(u[8]) or 0, tonumber(u[9]) or 0
local live = qu > 0 and qt > NOW

local w = {}
if delta ~= 0 and live and qu == 2 and sent > qs then
  qf = math.max(0, qf + delta)
  w[#w + 1], w[#w + 2] = 'qf', string.format('%d', qf)
end
local recorded = 0
if unit > 0 then
  local reset = NOW + rin
  if not (live and qu == unit and reset < qt + WINDOW and rem >= qr) then
    local iv = math.floor(p.iv)
    if p.a == 1 and rf > 0 and rf < 1000000 then iv = math.ceil(iv * 1000000 / rf) end
    if live and qi > iv then iv = qi end
    -- The calendar's units from the attempt's own to the reset (past it:
    -- the next window's), less the attempt's own but one (counted in the
    -- report; the one errs on the safe side).
    local fly, upto = 0, math.min(tat, reset)
    if upto > sent then fly = math.max(0, math.ceil((upto - sent) / iv) - (cost - 1)) end
    qu, qr, qt, qf, qs, live, recorded = unit, rem, reset, fly, sent, true, 1
    w[#w + 1], w[#w + 2], w[#w + 3], w[#w + 4] = 'qu', string.format('%d', unit), 'qr', string.format('%d', rem)
    w[#w + 1], w[#w + 2], w[#w + 3], w[#w + 4] = 'ql', string.format('%d', lim), 'qt', string.format('%d', reset)
    w[#w + 1], w[#w + 2], w[#w + 3], w[#w + 4] = 'qf', string.format('%d', fly), 'qs', string.format('%d', sent)
    w[#w + 1], w[#w + 2] = 'qh', src
  end
end
if #w > 0 then redis.call('HSET', KEYS[1], unpack(w)) end
local left = 0
if live then left = qr - qf end
return {'ok', recorded, left}
