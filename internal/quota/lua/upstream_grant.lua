-- upstream_grant.lua — an upstream's coordinator (issue #15): registers one
-- shard's demand and hands out segments of the upstream's calendar, in the
-- upstream's own slot {u:<name>}. A standalone script (clock.lua, no
-- lib.lua): no shard key.
--
-- KEYS[1]  <p>:{u:N}:u    HASH  the upstream: p (params JSON: iv, b, a, s, np, …), pu, tat,
--                                rf, the reported quota qu, qr, qt, qf (upstream_quota.lua), qi
-- KEYS[2]  <p>:{u:N}:cal  HASH  shard → "wanted weight unit expires vf debt": registered demand
-- KEYS[3]  <p>:{u:N}:g    HASH  shard → "t0 ceil t0 ceil …": segments granted, not picked up
-- ARGV[1]  now µs (0 = Redis TIME)
-- ARGV[2]  shard (≥ 0)            ARGV[3]  wanted cost units (≥ 0; 0 = none)
-- ARGV[4]  weight (≥ 1)           ARGV[5]  unit: the largest head cost (≥ 1)
-- ARGV[6]  H: horizon µs (≥ 1)    ARGV[7]  registration lifetime µs (≥ 1)
-- ARGV[8]  aligned mode (optional): 0 none, 1 probe (only asks whether it
--          is the caller's turn), 2 request (see below)
-- ARGV[9]  X, the common start µs of the segment asked for a set of
--          upstreams at once (a request's; 0 otherwise)
-- ARGV[10] its span µs (≥ 0): from the first job's slot to the last's
-- ARGV[11] its job cost c (≥ 1)   ARGV[12] its reach µs (≥ 1): X may lie at
--          most this far past now
-- Reply:   {'ok', now, iv, burst, pu, nx, segments, tat, aligned, turn}: the upstream's
--          interval T (µs per cost unit; an adaptive upstream's effective
--          ⌈T·10⁶ / rf⌉, upstream_adapt.lua; a paced one's pace when slower,
--          see Pacing below) and burst B, its pause end (0 =
--          none), nx the earliest time the next grant round may give
--          anything worth a call (TAT − H/2, pu − H, at least now), the caller's segments
--          ("t0 ceil t0 ceil …", µs, '' = none: its pending ones and this
--          round's, in calendar order), the new TAT and the aligned
--          request's answer: "X ceil" (granted), 'late' (TAT or the pause
--          was past X, or X out of reach), 'turn' (the caller owes more
--          than this segment), '' (none asked); turn 1 when the caller
--          owes nothing (before this call), else 0
--          {'not_found'}: the upstream has no params (field p); nothing written
--          {'invalid'}: a malformed argument or p; nothing written
--
-- The calendar: TAT (field tat, µs) is the end of the last segment handed
-- out. A round runs when start = max(TAT, now, pu) < now + H: the live
-- registrations with wanted > 0 or a debt (the caller's updated first) are
-- served once each in order of virtual finish vf (fewest units per weight
-- served first; ties by shard), each its share q = max(unit, min(wanted,
-- ⌈A·w/W⌉)) (only owing: min(⌈A·w/W⌉, debt); A: the units of the round, W
-- the weights' sum), of which it first repays its debt; the rest is a
-- contiguous segment [start, start + q·T), until start reaches now + H;
-- TAT ← start; vf += ⌊q·10⁶/w⌋ for the segment.
-- A registration joining (or returning: expired, or wanting nothing before)
-- starts at the least vf of the live ones, so absence banks no credit. Segments of other shards wait in KEYS[3]
-- for their next call (one over before it is picked up is wasted: safe).
-- Segments are consecutive in the calendar, so the shards' releases, each
-- within its segments (lanes.lua), form one GCRA chain: over any window Δ
-- the cost units released are ≤ B + Δ/T (+1 for the send).
--
-- Aligned request (a shard whose jobs name several upstreams asks each of
-- them, one call per upstream, for a segment starting at one common X): it
-- is served first, before the round, when the caller owes at most one such
-- segment and max(TAT, now, pu) ≤ X ≤ now + reach: the caller gets
-- [X, X + q·T), q = c + max(c − B, ⌈span/T⌉, 0), TAT ← X + q·T (the
-- gap [old TAT, X) is never handed out: a gap only lowers the rate), vf
-- grows by q as for a round's segment, and q is the caller's debt: an
-- advance on its share, repaid from its next rounds' shares (so an aligned
-- segment comes out of its shard's weighted share, not out of the
-- others'). The caller probes the set's upstreams first and asks only when
-- each says it owes nothing, so a set is rarely granted by some of its
-- upstreams and refused by others (the one segment of slack covers a race
-- between the probe and the request). Otherwise nothing aligned is granted
-- (the reply's TAT feeds the next try).
-- A call with an aligned request or probe and wanted 0 leaves the
-- caller's registration as it was (a new one wants nothing).
--
-- Pacing by quota headers (issue #32; docs/dispatch.md): while a quota
-- its answers reported is in force (pause_scope upstream, pacing headers:
-- p.s = 1, p.np ≠ 1; qu > 0, now < qt = its reset) and the calendar's start
-- s = max(TAT, now, pu) is before the reset, what is left is L = qr − qf
-- (reported remaining less the units handed out since, in flight at the
-- report included: upstream_quota.lua). L ≤ 0 grants nothing before the
-- reset; else this call's segments are spaced by T' = max(T, ⌈(qt − s) /
-- (L·(1 − MARGIN))⌉) — what is left spread over the time to the reset, a
-- little early — and hand out at most L units (a registration whose unit
-- no longer fits gets nothing before the reset). Every unit handed out
-- before the reset (aligned segments': all) adds to qf; qi records T'.
-- After the reset the configured interval again. The bound above holds
-- with T' ≥ T.

local NOW = clock(ARGV[1]) -- clock.lua
local K_U, K_CAL, K_G = KEYS[1], KEYS[2], KEYS[3]
local base = string.sub(K_U, 1, -2)
if string.sub(K_U, -2) ~= ':u' or K_CAL ~= base .. 'cal' or K_G ~= base .. 'g' then
  return redis.error_reply('ERR sluice upstream_grant: want the keys <p>:{u:N}:u, :cal, :g')
end
local shard, wanted, weight, unit = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local H, TTL = tonumber(ARGV[6]), tonumber(ARGV[7])
local AMODE, AX, ASPAN = tonumber(ARGV[8] or '0'), tonumber(ARGV[9] or '0'), tonumber(ARGV[10] or '0')
local AC, AREACH = tonumber(ARGV[11] or '1'), tonumber(ARGV[12] or '1')
if not (shard and wanted and weight and unit and H and TTL and AMODE and AX and ASPAN and AC and AREACH)
  or shard < 0 or wanted < 0 or weight < 1 or unit < 1 or H < 1 or TTL < 1 or AMODE < 0 or AMODE > 2
  or (AMODE == 2 and AX < 1) or ASPAN < 0 or AC < 1 or AREACH < 1 then
  return {'invalid'}
end
local me = string.format('%d', shard)

-- Read phase.
local u = redis.call('HMGET', K_U, 'p', 'pu', 'tat', 'rf', 'qu', 'qr', 'qt', 'qf')
if not u[1] then return {'not_found'} end
local ok, p = pcall(cjson.decode, u[1])
if not ok or type(p) ~= 'table' or type(p.iv) ~= 'number' or p.iv < 1 then return {'invalid'} end
local iv, burst = math.floor(p.iv), math.max(1, math.floor(tonumber(p.b) or 1))
local pu, tat = tonumber(u[2]) or 0, tonumber(u[3]) or 0
local rf = tonumber(u[4]) or 0
if p.a == 1 and rf > 0 and rf < 1000000 then -- adaptive, cut: the effective interval
  local q = math.floor(iv * 1000000 / rf)
  if q * rf < iv * 1000000 then q = q + 1 end
  iv = q
end
-- Pacing (see the header): PACE.left is what the quota has left (nil: not
-- paced), PACE.hold the end of a hold (0: none), PACE.used the units handed
-- out, PACE.qt the reset, PACE.short whether a registration's unit did not fit.
local PACE = {MARGIN = 0.05, left = nil, hold = 0, used = 0, qt = 0, short = false} -- store.PaceMargin
if p.s == 1 and p.np ~= 1 and (tonumber(u[5]) or 0) > 0 and (tonumber(u[7]) or 0) > NOW then
  local qt = tonumber(u[7])
  local s0 = math.max(tat, NOW, pu)
  if s0 < qt then
    PACE.left, PACE.qt = (tonumber(u[6]) or 0) - (tonumber(u[8]) or 0), qt
    if PACE.left <= 0 then
      PACE.hold = qt
    else
      iv = math.max(iv, math.ceil((qt - s0) / (PACE.left * (1 - PACE.MARGIN))))
    end
  end
end
local cal, order = {}, {}
local raw = redis.call('HGETALL', K_CAL)
for i = 1, #raw, 2 do
  local v = {}
  for x in string.gmatch(raw[i + 1], '%d+') do v[#v + 1] = tonumber(x) end
  if #v == 5 or #v == 6 then
    cal[raw[i]] = {shard = raw[i], wanted = v[1], weight = math.max(1, v[2]), unit = math.max(1, v[3]),
      exp = v[4], vf = v[5], debt = v[6] or 0}
    order[#order + 1] = raw[i]
  end
end
local pending = redis.call('HGET', K_G, me) or ''
local others = {} -- shard → pending text, read when a round grants them something

-- Registrations: drop the expired; the caller's updated (or joined at the
-- least live vf).
local least, gone = nil, {}
for _, s in ipairs(order) do
  local e = cal[s]
  if e.exp <= NOW then
    gone[#gone + 1] = s
    cal[s] = nil
  elseif s ~= me and (least == nil or e.vf < least) then
    least = e.vf
  end
end
local mine = cal[me]
if not mine then
  mine = {shard = me, vf = least or 0, debt = 0}
  local listed = false -- an expired registration stays in order
  for _, s in ipairs(order) do listed = listed or s == me end
  if not listed then order[#order + 1] = me end
  cal[me] = mine
elseif mine.wanted == 0 and least and mine.vf < least then
  mine.vf = least -- it wanted nothing: it returns level with the others
end
if AMODE == 0 or wanted > 0 or not mine.wanted then
  mine.wanted, mine.weight, mine.unit, mine.exp = wanted, weight, unit, NOW + TTL
end

-- The aligned request, served first when it is the caller's turn.
local aligned = ''
local aq = AC + math.max(math.max(0, AC - burst), math.ceil(ASPAN / iv)) -- the aligned segment's units
local turn = (mine.debt == 0) and 1 or 0
if AMODE == 2 and mine.debt > aq then
  aligned = 'turn'
elseif AMODE == 2 and not (math.max(tat, NOW, pu, PACE.hold) <= AX and AX <= NOW + AREACH) then
  aligned = 'late'
elseif AMODE == 2 and PACE.left and aq > PACE.left then
  aligned = 'late' -- the quota has not that much left before its reset
elseif AMODE == 2 then
  local q = aq
  if PACE.left then PACE.left, PACE.used = PACE.left - q, PACE.used + q end
  aligned = string.format('%d %d', AX, AX + q * iv)
  tat = AX + q * iv
  mine.vf = mine.vf + math.floor(q * 1000000 / mine.weight)
  mine.debt = mine.debt + q
end

-- The round.
local granted = {} -- shard → {t0, ceil, …}
local start = math.max(tat, NOW, pu, PACE.hold)
local limit = NOW + H
if start < limit then
  local live, W = {}, 0
  for _, s in ipairs(order) do
    local e = cal[s]
    if e and (e.wanted > 0 or e.debt > 0) then
      live[#live + 1] = e
      W = W + e.weight
    end
  end
  table.sort(live, function(a, b)
    if a.vf ~= b.vf then return a.vf < b.vf end
    return tonumber(a.shard) < tonumber(b.shard)
  end)
  local A = math.ceil((limit - start) / iv)
  for _, e in ipairs(live) do
    if start >= limit then break end
    local share = math.ceil(A * e.weight / W)
    local q = math.min(share, e.debt) -- a registration that only owes: repays its share
    if e.wanted > 0 then q = math.max(e.unit, math.min(e.wanted, share)) end
    local pay = math.min(q, e.debt) -- aligned segments had it in advance (vf counted then)
    e.debt, q = e.debt - pay, q - pay
    if PACE.left and start < PACE.qt then -- never more than the quota has left, nor less than a unit
      q = math.min(q, math.max(PACE.left, 0))
      if q < e.unit and e.wanted > 0 then q, PACE.short = 0, true end
      local before = math.min(q, math.ceil((PACE.qt - start) / iv)) -- the units past the reset are the next window's
      PACE.left, PACE.used = PACE.left - before, PACE.used + before
    end
    if q > 0 then
      granted[e.shard] = granted[e.shard] or {}
      local g = granted[e.shard]
      g[#g + 1], g[#g + 2] = start, start + q * iv
      start = start + q * iv
      e.wanted = math.max(0, e.wanted - q)
      e.vf = e.vf + math.floor(q * 1000000 / e.weight)
    end
  end
  tat = math.max(tat, start)
  for s in pairs(granted) do
    if s ~= me then others[s] = redis.call('HGET', K_G, s) or '' end
  end
end

-- Write phase.
local function fmt(list) -- "t0 ceil …" of the segments not over yet
  local parts = {}
  for i = 1, #list, 2 do
    if list[i + 1] > NOW then parts[#parts + 1] = string.format('%d %d', list[i], list[i + 1]) end
  end
  return table.concat(parts, ' ')
end
local function nums(text)
  local v = {}
  for x in string.gmatch(text, '%d+') do v[#v + 1] = tonumber(x) end
  return v
end
if #gone > 0 then redis.call('HDEL', K_CAL, unpack(gone)) end
for _, s in ipairs(order) do
  local e = cal[s]
  if e then
    redis.call('HSET', K_CAL, s, string.format('%d %d %d %d %d %d', e.wanted, e.weight, e.unit, e.exp, e.vf, e.debt))
  end
end
for s, text in pairs(others) do
  local v = nums(text)
  for _, x in ipairs(granted[s]) do v[#v + 1] = x end
  local out = fmt(v)
  if out == '' then redis.call('HDEL', K_G, s) else redis.call('HSET', K_G, s, out) end
end
if pending ~= '' then redis.call('HDEL', K_G, me) end
redis.call('HSET', K_U, 'tat', string.format('%d', tat))
if PACE.left then
  redis.call('HSET', K_U, 'qi', string.format('%d', iv))
  if PACE.used > 0 then redis.call('HINCRBY', K_U, 'qf', PACE.used) end
end
for _, k in ipairs({K_CAL, K_G}) do redis.call('PEXPIRE', k, math.ceil((TTL + H) / 1000) + 1000) end

local v = nums(pending)
for _, x in ipairs(granted[me] or {}) do v[#v + 1] = x end
-- The next round worth asking for: when half the horizon is free again
-- (asking whenever one unit is free would cost a call per unit).
-- A pause ending past a second from now (a manual one: 2^52) is asked about
-- again within the second, so a resume is learnt without a call per D.
-- A quota too short for a unit is asked about again at its reset (or at the
-- next report's news, within the second).
if PACE.short and PACE.used == 0 then PACE.hold = PACE.qt end
local nx = math.max(NOW, tat - math.floor(H / 2), math.min(math.max(pu, PACE.hold) - H, NOW + 1000000))
return {'ok', NOW, iv, burst, pu, nx, fmt(v), tat, aligned, turn}
