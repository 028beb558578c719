-- upstream_orphans.lua — dead-letter the jobs of one shard's lanes that
-- name an upstream its coordinator answered does not exist (issue #15: it
-- was deleted while they sat in the delayed set, or they were enqueued in
-- the second the API's cache still knew it). Called by the dispatcher only
-- after such an answer ('not_found' from upstream_grant.lua), never for a
-- Redis error.
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  the upstream's name N
-- ARGV[4]  cutoff µs: only jobs created at or before it die (the caller
--          passes a time before it asked the coordinator, so a job
--          enqueued after the upstream was created again is left alone)
-- ARGV[5]  limit: most jobs dead-lettered by the call (1 … 1000)
-- ARGV[6]  dead retention µs (≥ 1)   ARGV[7]  dead letters per tenant (≥ 1)
-- Reply:   {'ok', dead-lettered, more (0|1)}
--
-- The tenants are those of N's waiting set <p>:{sN}:uw:<N> (lanes.lua), at
-- most limit of them; in each lane of theirs whose set names N (a
-- multi-upstream lane too), every queued job created at or before the
-- cutoff, front first, becomes a dead letter (lifecycle.lua to_dead) with
-- record field reason = 'unknown_upstream' (replayable as any letter): no
-- attempt used or logged, its callback queued. Lane members no longer
-- queued are dropped (as LN.heads does). A tenant left with no job in a
-- lane naming N leaves the waiting set. At most limit jobs die and 4·limit
-- lane members are examined per call; more = 1 when the bounds cut the
-- work short (call again). The shard's state of N (<p>:{sN}:ul field N) and
-- the aligned reservations of sets naming it (<p>:{sN}:ua) are dropped: an
-- upstream created again under that name starts a new calendar, whose
-- time the old segments must not use. Every tenant touched is rescheduled,
-- saved and expired, its dead set trimmed; then the wake check. Reads come
-- before the first write.

local name, cutoff, limit = ARGV[3], tonum(ARGV[4]), tonum(ARGV[5])
local cfg = {dead_ret = tonum(ARGV[6]), dead_max = tonum(ARGV[7]), trim = {}}
if not (name and name ~= '' and cutoff and limit and limit >= 1 and limit <= 1000
  and cfg.dead_ret and cfg.dead_ret >= 1 and cfg.dead_max and cfg.dead_max >= 1) then
  return redis.error_reply('ERR sluice upstream_orphans: bad arguments')
end

-- names_it: lane set ups names N.
local function names_it(ups)
  for _, n in ipairs(LN.names(ups)) do
    if n == name then return true end
  end
  return false
end

-- Read phase: the tenants waiting on N, their lanes naming N, the jobs.
local scan, more = 4 * limit, 0
local doomed, stale, left = {}, {}, {} -- jobs to kill; {lane, id} to drop; tenants keeping jobs on N
local waiting = rcall('ZRANGE', LN.k_wait(name), 0, limit)
if #waiting > limit then
  waiting[#waiting] = nil
  more = 1
end
local before = shard_earliest()
local visited = {}
for _, tn in ipairs(waiting) do
  if #doomed >= limit or scan <= 0 then
    more = 1
    break
  end
  visited[#visited + 1] = tn
  tenant(tn)
  for _, ups in ipairs(rcall('SMEMBERS', LN.k_lanes(tn))) do
    if names_it(ups) then
      local key = LN.k_lane(tn, ups)
      local n = mmin(limit - #doomed, scan)
      local ids = n > 0 and rcall('ZRANGE', key, 0, n - 1) or {}
      scan = scan - #ids
      for _, id in ipairs(ids) do
        local j = load_job(id)
        if not j or j.state ~= 'queued' then
          stale[#stale + 1] = {key, id}
        elseif (tonum(rcall('HGET', k_job(id), 'created')) or 0) <= cutoff then
          doomed[#doomed + 1] = j
        else
          left[tn] = true -- enqueued after the cutoff: not ours to judge
        end
      end
      if rcall('ZCARD', key) > #ids then -- members not examined: the bounds cut it short
        left[tn], more = true, 1
      end
    end
  end
end
local sets = {}
for _, ups in ipairs(rcall('HKEYS', LN.k_aligned())) do
  if names_it(ups) then sets[#sets + 1] = ups end
end

-- Write phase.
for _, s in ipairs(stale) do rcall('ZREM', s[1], s[2]) end
for _, j in ipairs(doomed) do
  local t = tenant(j.tenant)
  LN.remove(j, t) -- lanes.lua (counts uq)
  t.qtok = t.qtok - j.cost
  j.pending = {'reason', 'unknown_upstream'}
  to_dead(j, t, NOW, cfg) -- lifecycle.lua
end
for _, tn in ipairs(visited) do
  if not left[tn] then rcall('ZREM', LN.k_wait(name), tn) end
end
rcall('HDEL', LN.k_state(), name)
if #sets > 0 then rcall('HDEL', LN.k_aligned(), unpack(sets)) end
flush_tenants(cfg)
wake(before)
return {'ok', #doomed, more}
