-- dead_replay.lua — replay a tenant's dead letters in bulk, oldest death first.
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  tenant
-- ARGV[4]  limit: most jobs replayed, 1 … 1000
-- ARGV[5]  cutoff µs: only letters that died at or before it (-1 = now)
-- ARGV[6]  cursor: the death time (µs) of the last letter examined, -1 = from the start
-- ARGV[7]  cursor: the id of the last letter examined
-- ARGV[8]  reason: only letters whose reason is this ("" = any)
-- ARGV[9]  scan: most letters examined, ≥ limit
-- Reply:   {'ok', replayed, cutoff µs, next score (-1 = done), next id}
--
-- A letter's reason is its record's field `reason` when it has one, else
-- the outcome of its last attempt ("permanent", "retry" — attempts used up
-- —, "gone", "unknown_upstream", "lease_expired"…). Each replayed letter is requeued as
-- replay.lua does (tenants.lua requeue_dead). Letters are examined in the
-- dead set's order (death time, id) after the cursor, up to the cutoff; a
-- replayed letter leaves the set and one that dies again gets a death time
-- after the cutoff, so a walk with the returned cursor and cutoff replays
-- each letter at most once. Reads (the letters, the policy, the tenant)
-- come before the first write.

local tn, limit, cutoff = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local cscore, cid, reason, scan = tonumber(ARGV[6]), ARGV[7], ARGV[8], tonumber(ARGV[9])
if not (limit and limit >= 1 and limit <= 1000 and cutoff and cscore and scan and scan >= limit) then
  return redis.error_reply('ERR sluice dead_replay: bad arguments')
end
if cutoff < 0 then cutoff = NOW end

-- reason_of is a dead record's reason (see above).
local function reason_of(id)
  local r = redis.call('HMGET', k_job(id), 'reason', 'log')
  if r[1] and r[1] ~= '' then return r[1] end
  local log = r[2] or ''
  local last = string.match(log, '[^\n]*$') or ''
  return string.match(last, '"outcome":"([^"]*)"') or ''
end

-- Read phase: the letters after the cursor.
local key = k_dead(tn)
local start = dead_start(key, cscore, cid) -- tenants.lua
local page = redis.call('ZRANGE', key, start, start + scan - 1, 'WITHSCORES')
local jobs, last_score, last_id, done = {}, -1, '', true
for i = 1, #page, 2 do
  local id, score = page[i], tonumber(page[i + 1])
  if score > cutoff then break end
  if #jobs == limit then
    done = false
    break
  end
  last_score, last_id = score, id
  local j = load_job(id)
  if j and j.state == 'dead' and j.tenant == tn and (reason == '' or reason_of(id) == reason) then
    jobs[#jobs + 1] = j
  end
  if i + 1 == #page and #page == 2 * scan then done = false end
end
if done then last_score, last_id = -1, '' end
if #jobs == 0 then return {'ok', 0, cutoff, last_score, last_id} end
local p = load_policy(tn)
local t = load_tenant(tn, p)
rescale_tat(t, p, NOW)
local before = shard_earliest()

-- Write phase.
for _, j in ipairs(jobs) do requeue_dead(j, t) end
reschedule(tn, t, p, NOW)
save_tenant(tn, t)
expire_tenant(tn, t, p, NOW)
wake(before)
return {'ok', #jobs, cutoff, last_score, last_id}
