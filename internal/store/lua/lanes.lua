-- lanes.lua — shared upstream quotas on the shard side (issue #15), assembled
-- after lib.lua (whose names it uses) and before lifecycle.lua.
--
-- A job naming upstreams (record field ups: the names, sorted, joined by
-- ',') waits in its tenant's lane for that set of upstreams, a ZSET
-- <p>:{sN}:t:<tenant>:l:<ups> (job id → sequence: enqueue's tenant field
-- useq counts up; a job given back goes in front, at hseq − 2⁵⁰), instead of
-- the backlog. The tenant's lanes holding jobs are the members of the SET
-- <p>:{sN}:t:<tenant>:lanes; its field uq counts the jobs queued in lanes
-- (qtok counts their tokens as it counts the backlog's). While uq > 0 the
-- tenant's c1 fast path is off (enqueue clears c1) and reschedule scores it
-- by the best of its plain head and each lane's head (lane_score).
--
-- Shard-local upstream state: HASH <p>:{sN}:ul, upstream name → "tat ceil iv b
-- pu nx h[ t0 ceil]…" (integers, µs): the local GCRA over the segment of the
-- upstream's calendar the shard holds, [tat, ceil), the upstream's interval
-- iv and burst b as its coordinator last reported them, its pause end pu,
-- nx the time the next grant may come (the coordinator's TAT − H; a pass
-- that asks for one sets it to now + D meanwhile), h the H it was asked with
-- (the pass's D), then the segments granted but not started, in order.
-- A job of cost c may leave at slot s under upstream U only if s ≥ tat −
-- (b − c)·iv and max(tat, s) + c·iv ≤ ceil; then tat ← max(tat, s) + c·iv.
-- Tenants waiting on upstream N in this shard are the members of the ZSET
-- <p>:{sN}:uw:<N> (score: when they were last visited for it), so a pass
-- given a new segment of N visits them whatever their ready score.
--
-- Aligned reservations (issue #15: a job naming several upstreams): HASH
-- <p>:{sN}:ua, ups (a lane's set) → "nx h tat1 ceil1 tat2 ceil2 …" (µs, one
-- pair per name of ups, in order): segments [X, ceil_i) that every
-- upstream's coordinator granted the set at one common start X (an aligned
-- request, upstream_grant.lua), reserved for the heads of the shard's lanes
-- of exactly that set (no other lane sees them), each with its local GCRA
-- tat_i as for a segment; nx: no new aligned request before it (a pass that
-- asks sets now + D, a failed request the coordinators' next round; h the
-- D it was set with). The key's TTL outlives its furthest entry.
--
-- All names live in one table, LN, to keep the library's locals few.

local LN = {}
LN.AL, LN.AL_DIRTY = {}, {} -- aligned records of the call (ups → record or false), and those to write
LN.FRONT = 1125899906842624 -- 2^50: a given-back job's lane score is hseq − FRONT
LN.SEGS_MAX = 32 -- pending segments kept per upstream (older ones: wasted, safe)

function LN.k_lane(tn, ups) return BASE .. 't:' .. tn .. ':l:' .. ups end
function LN.k_lanes(tn) return BASE .. 't:' .. tn .. ':lanes' end
function LN.k_wait(name) return BASE .. 'uw:' .. name end
function LN.k_state() return BASE .. 'ul' end
function LN.k_aligned() return BASE .. 'ua' end

-- names splits an ups field into its names.
function LN.names(ups)
  local out = {}
  for n in string.gmatch(ups or '', '[^,]+') do out[#out + 1] = n end
  return out
end

-- push queues job j ({id, cost, ups, tenant}) of tenant t in its lane: at
-- the tail (enqueue order) or, with front, ahead of every job enqueued
-- (behind those given back before it). The tenant joins each upstream's
-- waiting set. The caller writes the record's state.
function LN.push(j, t, front)
  local score
  if front then
    t.hseq = t.hseq + 1
    score = t.hseq - LN.FRONT
  else
    t.useq = t.useq + 1
    score = t.useq
  end
  rcall('ZADD', LN.k_lane(j.tenant, j.ups), istr(score), j.id)
  rcall('SADD', LN.k_lanes(j.tenant), j.ups)
  for _, n in ipairs(LN.names(j.ups)) do rcall('ZADD', LN.k_wait(n), 'NX', istr(NOW), j.tenant) end
  t.uq = t.uq + 1
  t.qtok = t.qtok + j.cost
  t.c1 = 0
end

-- remove takes job j out of its lane (cancel, release): 1 when it was there.
function LN.remove(j, t)
  local n = rcall('ZREM', LN.k_lane(j.tenant, j.ups), j.id)
  if n > 0 then t.uq = t.uq - 1 end
  return n
end

-- heads returns the queued head job of each of tenant tn's lanes: {id,
-- cost, gen, type, nb, created, ups, names, lane = true}; records no longer
-- queued are dropped from their lane, empty lanes from the lane set. t.uq is
-- kept by the scripts that move jobs; heads only resets it to 0 when no
-- lane holds a job (self-healing: a count left over costs reads, nothing
-- else).
function LN.heads(tn, t)
  local out = {}
  for _, ups in ipairs(rcall('SMEMBERS', LN.k_lanes(tn))) do
    local key = LN.k_lane(tn, ups)
    while true do
      local id = rcall('ZRANGE', key, '0', '0')[1]
      if not id then
        rcall('SREM', LN.k_lanes(tn), ups)
        break
      end
      local r = rcall('HMGET', k_job(id), 'state', 'cost', 'gen', 'type', 'nb', 'created')
      if r[1] == 'queued' then
        out[#out + 1] = {id = id, cost = tonum(r[2]) or 1, gen = tonum(r[3]) or 0, type = r[4] or '',
          nb = tonum(r[5]) or 0, created = tonum(r[6]) or 0, ups = ups, names = LN.names(ups),
          lane = true, tenant = tn}
        break
      end
      rcall('ZREM', key, id)
    end
  end
  if #out == 0 then t.uq = 0 end
  return out
end

-- Upstream states of the call (UL: name → state, false when none; UL_DIRTY:
-- names to write back by LN.save).
local UL, UL_DIRTY = {}, {}
RESETS[#RESETS + 1] = function() UL, UL_DIRTY, LN.AL, LN.AL_DIRTY = {}, {}, {}, {} end

function LN.decode(raw)
  local v = {}
  for x in string.gmatch(raw, '%-?%d+') do v[#v + 1] = tonum(x) end
  if #v < 7 then return nil end
  local u = {tat = v[1], ceil = v[2], iv = v[3], b = v[4], pu = v[5], nx = v[6], h = v[7], segs = {}}
  for i = 8, #v - 1, 2 do u.segs[#u.segs + 1] = {v[i], v[i + 1]} end
  return u
end

function LN.encode(u)
  local parts = {string.format('%d %d %d %d %d %d %d', u.tat, u.ceil, u.iv, u.b, u.pu, u.nx, u.h)}
  for _, s in ipairs(u.segs) do parts[#parts + 1] = string.format('%d %d', s[1], s[2]) end
  return table.concat(parts, ' ')
end

-- get returns upstream name's local state (nil when the shard has none).
function LN.get(name)
  local u = UL[name]
  if u == nil then
    local raw = rcall('HGET', LN.k_state(), name)
    u = (raw and LN.decode(raw)) or false
    UL[name] = u
  end
  return u or nil
end

-- ensure returns name's local state, created empty when absent, marked for
-- writing.
function LN.ensure(name)
  local u = LN.get(name)
  if not u then
    u = {tat = 0, ceil = 0, iv = 0, b = 1, pu = 0, nx = 0, h = 0, segs = {}}
    UL[name] = u
  end
  UL_DIRTY[name] = true
  return u
end

function LN.dirty(name) UL_DIRTY[name] = true end

-- save writes the states the call changed.
function LN.save()
  for name in pairs(UL_DIRTY) do rcall('HSET', LN.k_state(), name, LN.encode(UL[name])) end
  UL_DIRTY = {}
end

-- install adds segments (a list of {t0, ceil}, in calendar order) granted to
-- the shard, with the upstream's interval, burst, pause end (kept as they
-- were when iv is 0: no answer) and next grant time, and h: one contiguous with the current segment extends it, the
-- others wait behind it; segments already over are dropped.
function LN.install(name, iv, b, pu, nx, h, segs)
  local u = LN.ensure(name)
  if iv > 0 then u.iv, u.b, u.pu = iv, b, pu end -- 0: the coordinator did not answer
  u.nx, u.h = nx, h
  -- A coordinator hands a shard its segments in calendar order, so one
  -- that starts below the end of what the shard holds was installed
  -- before: the same grants again (a pass whose reply was lost is run
  -- again with them — go-redis re-sends on a read timeout, the dispatcher
  -- keeps a failed pass's grants). Only what lies past that end is new;
  -- installing the rest twice would hand the same calendar out twice.
  local hw = u.ceil
  if #u.segs > 0 then hw = mmax(hw, u.segs[#u.segs][2]) end
  for _, s in ipairs(segs) do
    local last = u.segs[#u.segs]
    local t0 = mmax(s[1], hw)
    if s[2] <= NOW or s[2] <= t0 then
      -- over before it reached the shard, or installed already: nothing new
    elseif last and t0 == last[2] then
      last[2] = s[2]
    elseif not last and u.ceil > 0 and t0 == u.ceil then
      u.ceil = s[2]
    else
      u.segs[#u.segs + 1] = {t0, s[2]}
    end
    hw = mmax(hw, s[2])
  end
  while #u.segs > LN.SEGS_MAX do table.remove(u.segs, 1) end
end

-- room makes the current segment one a job of cost c fits in at its best
-- (at s = max(now, tat − (b − c)·iv): max(tat, s) + c·iv ≤ ceil), moving on
-- to the next pending segment while it does not (the rest of the current
-- one is wasted: safe). Returns whether a job of cost c has room.
function LN.room(name, u, c, now)
  while true do
    if u.iv > 0 and mmax(u.tat, now, u.tat - (u.b - c) * u.iv) + c * u.iv <= u.ceil then return true end
    local s = table.remove(u.segs, 1)
    if not s then return false end
    UL_DIRTY[name] = true
    u.tat, u.ceil = s[1], s[2]
  end
end

-- earliest is the earliest slot of a job of cost c under upstream name:
-- max(now, tat − (b − c)·iv, pu), or nil when the shard has no room for it.
function LN.earliest(name, c, now)
  local u = LN.get(name)
  if not u or not LN.room(name, u, c, now) then return nil end
  return mmax(now, u.tat - (u.b - c) * u.iv, u.pu)
end

-- expected is when a job waiting on upstream name without room may expect
-- a usable segment: now when the shard may ask for one now (nx ≤ now), else
-- nx + h (the next grant round, plus its horizon, as a ready score).
function LN.expected(name, now)
  local u = LN.get(name)
  if not u or u.nx <= now then return now end
  return u.nx + u.h
end

-- fits: a job of cost c may leave at slot under u.
function LN.fits(u, slot, c)
  return slot >= u.tat - (u.b - c) * u.iv and mmax(u.tat, slot) + c * u.iv <= u.ceil
end

-- take charges a job of cost c at slot to u (and marks name for writing).
function LN.take(name, u, slot, c)
  u.tat = mmax(u.tat, slot) + c * u.iv
  UL_DIRTY[name] = true
end

-- al_get returns the aligned record of set ups ({nx, h, parts = {{tat,
-- ceil}, …}}), nil when none.
function LN.al_get(ups)
  local r = LN.AL[ups]
  if r == nil then
    local raw = rcall('HGET', LN.k_aligned(), ups)
    local v = {}
    for x in string.gmatch(raw or '', '%-?%d+') do v[#v + 1] = tonum(x) end
    r = false
    if #v >= 2 and #v % 2 == 0 then
      r = {nx = v[1], h = v[2], parts = {}}
      for i = 3, #v, 2 do r.parts[#r.parts + 1] = {v[i], v[i + 1]} end
    end
    LN.AL[ups] = r
  end
  return r or nil
end

-- al_put replaces set ups's record (written by LN.al_save).
function LN.al_put(ups, r)
  LN.AL[ups] = r
  LN.AL_DIRTY[ups] = true
end

-- al_slot is the earliest slot ≥ base (and now) at which head h fits every
-- part of its set's reservation (s ≥ tat_i − (b_i − c)·iv_i, max(tat_i, s)
-- + c·iv_i ≤ ceil_i, past each pause), or nil when there is none or it
-- cannot take h any more.
function LN.al_slot(h, base, now)
  local r = LN.al_get(h.ups)
  if not r or #r.parts ~= #h.names then return nil end
  local s = mmax(base, now)
  for i, n in ipairs(h.names) do
    local u = LN.get(n)
    if not u or u.iv <= 0 then return nil end
    s = mmax(s, r.parts[i][1] - (u.b - h.cost) * u.iv, u.pu)
  end
  for i, n in ipairs(h.names) do
    local p = r.parts[i]
    if mmax(p[1], s) + h.cost * LN.get(n).iv > p[2] then return nil end
  end
  return s
end

-- al_take charges head h at slot to its set's reservation.
function LN.al_take(h, slot)
  local r = LN.al_get(h.ups)
  for i, n in ipairs(h.names) do
    local p = r.parts[i]
    p[1] = mmax(p[1], slot) + h.cost * LN.get(n).iv
  end
  LN.AL_DIRTY[h.ups] = true
end

-- al_save writes the aligned records the call changed (a record whose
-- parts have all ended and that waits for nothing is deleted) and keeps
-- the key's TTL past the furthest one written.
function LN.al_save()
  local far = nil
  for ups in pairs(LN.AL_DIRTY) do
    local r = LN.AL[ups]
    local ended = true
    for _, p in ipairs(r and r.parts or {}) do ended = ended and p[2] <= NOW end
    if not r or (r.nx <= NOW and ended) then
      rcall('HDEL', LN.k_aligned(), ups)
    else
      local parts = {string.format('%d %d', r.nx, r.h)}
      far = mmax(far or NOW, r.nx + r.h)
      for _, p in ipairs(r.parts) do
        parts[#parts + 1] = string.format('%d %d', p[1], p[2])
        far = mmax(far, p[2])
      end
      rcall('HSET', LN.k_aligned(), ups, table.concat(parts, ' '))
    end
  end
  LN.AL_DIRTY = {}
  if far then
    local ttl = math.ceil((far - NOW) / 1000) + 60000 -- ms: a minute past the furthest
    if rcall('PTTL', LN.k_aligned()) < ttl then rcall('PEXPIRE', LN.k_aligned(), ttl) end
  end
end

-- slot_of is a lane head's earliest slot for tenant t (policy p): the
-- tenant's GCRA slot and pauses, and each named upstream's earliest (or,
-- without room, LN.expected); the second value is true when some upstream
-- had no room.
function LN.slot_of(h, t, p, now)
  local s = mmax(earliest(t, p, h.cost, now), gate(t), PACE.slot(t, p, h.cost), h.nb or 0)
  if #h.names > 1 then -- its set's reservation, or the aligned request on its way
    local a = LN.al_slot(h, s, now)
    if a then return a, false end
    local r = LN.al_get(h.ups)
    if r and r.nx > now then return mmax(s, r.nx + r.h), true end
  end
  local wanting = false
  for _, n in ipairs(h.names) do
    local e = LN.earliest(n, h.cost, now)
    if not e then
      e, wanting = LN.expected(n, now), true
    end
    s = mmax(s, e)
  end
  return s, wanting
end

-- score is the best ready score of tenant tn's lane heads (nil: none, or all
-- held by the release cap; held then says so).
function LN.score(tn, t, p, now)
  local best, held = nil, false
  for _, h in ipairs(LN.heads(tn, t)) do
    if t.rtok > 0 and t.rtok + h.cost > release_cap(t, p) then
      held = true
    else
      local s = LN.slot_of(h, t, p, now)
      if not best or s < best then best = s end
    end
  end
  return best, held
end
lane_score = LN.score
