-- tenant_jobs.lua — one page of a tenant's jobs in one state (no writes).
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  tenant                    ARGV[4]  state: queued | delayed | running | dead
-- ARGV[5]  order: oldest | newest    ARGV[6]  limit (≥ 1)
-- ARGV[7]  the most members examined (≥ limit)
-- ARGV[8]  cursor: the part ('' = from the start): head | list | lane:<ups> | set
-- ARGV[9]  cursor: a number — a score, or the list's offset from the walk's side
-- ARGV[10] cursor: the id of the last member passed
-- Reply:   {'ok', next part ('' = no more), next number, next id,
--           {id, {field, value, …}, part, number}, …}: each job with the
--           cursor that goes on right after it
--
-- Where each state lives (keys.go):
--   dead     the tenant's dead set (score: death time)
--   delayed  the shard's delayed set, shared by its tenants (score: due time)
--   running  the shard's lease set, shared (score: lease deadline): jobs
--            released to a worker or running
--   queued   the tenant's head lane (jobs given back, by sequence), its
--            backlog (a list, FIFO) and its upstream lanes (by sequence, in
--            name order): oldest walks them in that order, newest the reverse.
-- A sorted set pages by (score, id), so members added or removed in between
-- shift nothing. The backlog pages by offset from the walk's side and the id
-- last passed: found near its old offset (it moved by at most limit), the page
-- goes on after it; else (it left, or more than limit jobs did) oldest starts
-- again from the head — a job may show twice, none is skipped — and newest
-- goes on at the old offset (jobs pushed since then may show, again none is
-- skipped). A shared set's members of other tenants are examined and passed:
-- a page examines at most ARGV[7] members, so it may hold fewer than limit
-- jobs with a cursor to go on. A member whose record is gone, or whose state
-- or tenant is not the one asked for, is passed too.

local tn, state, order = ARGV[3], ARGV[4], ARGV[5]
local limit, examine = tonumber(ARGV[6]), tonumber(ARGV[7])
local part, cnum, cid = ARGV[8] or '', tonumber(ARGV[9]), ARGV[10] or ''
local WANT = {queued = {queued = true}, delayed = {scheduled = true, retrying = true},
  running = {released = true, running = true}, dead = {dead = true}}
if not WANT[state] or (order ~= 'oldest' and order ~= 'newest') or not limit or limit < 1
  or not examine or examine < limit or (part ~= '' and not cnum) then
  return redis.error_reply('ERR sluice tenant_jobs: bad arguments')
end
local rev = order == 'newest'
local reply, examined, walking = {'ok', '', 0, ''}, 0, ''

-- take examines job id, at num in the part walked: adds its record to the
-- reply when it is the tenant's, in the state asked for. Returns true when
-- the page is full.
local function take(id, num)
  examined = examined + 1
  local jk = k_job(id)
  local h = rcall('HMGET', jk, 'state', 'tenant')
  if WANT[state][h[1]] and h[2] == tn then reply[#reply + 1] = {id, rcall('HGETALL', jk), walking, num} end
  return #reply - 4 >= limit
end

-- zstart is the rank, in the walk's order, at which a walk of sorted set
-- key after (score, id) resumes: exact while id is still there at score.
local function zstart(key, score, id)
  if tonum(rcall('ZSCORE', key, id)) == score then
    return rcall(rev and 'ZREVRANK' or 'ZRANK', key, id) + 1
  end
  local n, ties
  if rev then
    n = rcall('ZCOUNT', key, '(' .. istr(score), '+inf')
  else
    n = rcall('ZCOUNT', key, '-inf', '(' .. istr(score))
  end
  ties = rcall('ZRANGEBYSCORE', key, istr(score), istr(score))
  for _, m in ipairs(ties) do
    if (rev and m >= id) or (not rev and m <= id) then n = n + 1 end
  end
  return n
end

-- zwalk walks sorted set key from the cursor (score, id; id '': the
-- start). Returns nil when the set ended, else the cursor to go on from.
local function zwalk(key, score, id)
  local start = 0
  if id ~= '' then start = zstart(key, score, id) end
  while true do
    local n = mmin(limit, examine - examined)
    if n <= 0 then return score, id end
    local page
    if rev then
      page = rcall('ZRANGE', key, start, start + n - 1, 'REV', 'WITHSCORES')
    else
      page = rcall('ZRANGE', key, start, start + n - 1, 'WITHSCORES')
    end
    for i = 1, #page, 2 do
      score, id = tonum(page[i + 1]), page[i]
      if take(id, score) then return score, id end
    end
    if #page < 2 * n then return nil end
    start = start + n
  end
end

-- lrange_side is the list's items at offsets a … b from the walk's side,
-- in walk order.
local function lrange_side(key, a, b)
  if not rev then return rcall('LRANGE', key, a, b) end
  local r, out = rcall('LRANGE', key, -(b + 1), -(a + 1)), {}
  for i = #r, 1, -1 do out[#out + 1] = r[i] end
  return out
end

-- lresume is the offset at which a walk of list key that passed id at
-- offset off − 1 goes on (see the header).
local function lresume(key, off, id)
  if off <= 0 then return 0 end
  local from = mmax(0, off - 1 - limit)
  local win = lrange_side(key, from, off - 1)
  for i = #win, 1, -1 do
    if win[i] == id then return from + i end
  end
  if rev then return off end
  return 0
end

-- lwalk walks list key from offset off (after id). Returns nil when the
-- list ended, else the offset and id to go on from.
local function lwalk(key, off, id)
  if id ~= '' then off = lresume(key, off, id) end
  while true do
    local n = mmin(limit, examine - examined)
    if n <= 0 then return off, id end
    local items = lrange_side(key, off, off + n - 1)
    for _, m in ipairs(items) do
      off, id = off + 1, m
      if take(m, off) then return off, id end
    end
    if #items < n then return nil end
  end
end

-- The parts of the walk, in its order.
local parts = {}
if state == 'dead' then
  parts = {{'set', k_dead(tn)}}
elseif state == 'delayed' then
  parts = {{'set', K_DELAYED}}
elseif state == 'running' then
  parts = {{'set', K_LEASES}}
else
  local lanes = rcall('SMEMBERS', LN.k_lanes(tn))
  table.sort(lanes)
  parts = {{'head', k_head(tn)}, {'list', k_queue(tn)}}
  for _, ups in ipairs(lanes) do parts[#parts + 1] = {'lane:' .. ups, LN.k_lane(tn, ups)} end
  if rev then
    local r = {}
    for i = #parts, 1, -1 do r[#r + 1] = parts[i] end
    parts = r
  end
end

-- Where the cursor's part is in this walk: a lane emptied since is gone,
-- and the walk goes on with the part that follows it by name.
local i = 1
if part ~= '' then
  i = nil
  for k, p in ipairs(parts) do
    if p[1] == part then i = k end
  end
  if not i then
    local lanes_end = #parts + 1 -- oldest: the lanes come last
    if rev then lanes_end = #parts - 1 end -- newest: the list, then the head
    i = lanes_end
    for k, p in ipairs(parts) do
      if string.sub(p[1], 1, 5) == 'lane:' and ((not rev and p[1] > part) or (rev and p[1] < part)) then i = k break end
    end
    part, cnum, cid = '', 0, ''
  end
end
for k = i, #parts do
  local name, key = parts[k][1], parts[k][2]
  local from_num, from_id = 0, ''
  if name == part then from_num, from_id = cnum, cid end
  if examined >= examine then -- the budget is spent: go on at this part's start
    reply[2], reply[3], reply[4] = name, from_num, from_id
    return reply
  end
  local a, b
  walking = name
  if name == 'list' then
    a, b = lwalk(key, from_num, from_id)
  else
    a, b = zwalk(key, from_num, from_id)
  end
  if a then
    reply[2], reply[3], reply[4] = name, a, b
    return reply
  end
end
return reply
