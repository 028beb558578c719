-- finish.lua — record one attempt's outcome (docs/design.md §2.3 step 4, §4.2).
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  succeeded retention µs    ARGV[4]  dead retention µs
-- ARGV[5]  dead letters per tenant   ARGV[6]  attempt log length
-- ARGV[7]  default pause µs          ARGV[8]  max pause µs
-- ARGV[9]  jitter seed               ARGV[10] adaptive floor, ppm
-- ARGV[11] adaptive recovery step, ppm
-- ARGV[12] idempotency retention µs (0 = the record's)
-- ARGV[13] upstream scope (0|1): 1 = the throttles of this call are their
--          jobs' upstreams' (pause_scope upstream): the tenant is neither
--          paused nor cut, the job goes back to the front of its lane
-- ARGV[14] results' mark: parts per million of maxmemory, 1 … 10⁶ (see
--          Results below)
-- ARGV[15…] the attempts (at least one), each: job id, gen of the claim,
--          kind (success | retry | throttled | permanent | gone |
--          deferred | lapsed), HTTP status (0 = none), latency µs, then the count k
--          (0 … 14) of the attempt's values below that follow and those k;
--          the ones left out (the last 14 − k) are '' or 0 as marked —
--          error text (''), pause µs asked by the upstream (0 = default),
--          congestion signal (0|1; 0), excerpt field ('' | 'body' |
--          'body_base64'; ''), excerpt text (the log entry's, ≤ 4 KiB of
--          the response body; ''), result JSON without the body ('' = none;
--          an http job's, replaces field result), the same JSON for a body
--          cut or dropped for room (truncated, storage_full; ''), the
--          result's body (raw bytes; ''), actual cost (0 = unknown, else
--          1 … 10⁶; see correct below), the quota the response reported
--          (see PACE.observe below): unit (0 = none, 1 = requests, 2 =
--          tokens), remaining (0), limit (0 = unknown), reset in µs (0),
--          source header ('')
-- Reply:   {'ok', state 1, stale 1, state 2, stale 2, …}: two values per
--          attempt in request order, flat (a nested table costs Redis a
--          conversion of its own) — the state after and stale (0|1), or
--          'not_found' and 0
-- Writes besides the jobs' and tenants' keys: the shard's finished-jobs
-- counter <p>:{sN}:finished (the jobs this call ended, at the end).
--
-- The attempts are recorded one after the other, in request order, at one
-- now, each on the state the ones before it left; one attempt's refusal
-- (stale, not found) leaves the others as they are. Each tenant's policy
-- and state are read once and saved, rescheduled, expired and trimmed
-- once, after the last attempt.
--
-- Requires running(gen); otherwise (stale) the attempt is only appended to
-- the log, marked stale, and the reply carries the job's current state.
-- Else: the lease is removed and the concurrency slot freed, the attempt is
-- logged, then by kind:
--   success   → succeeded: body dropped, record and idempotency key expire
--               after the succeeded retention;
--   retry     → retrying at now + backoff(attempt) ± 10 %, or dead when
--               attempt ≥ max_attempts or max_retry_duration has run out;
--   throttled → paused_until = max(paused_until, now + min(pause or default,
--               max pause)); the attempt is not counted; head lane, gen + 1 —
--               or dead when max_retry_duration has run out;
--   deferred  → not sent (its destination's circuit is open, docs/design.md
--               §4.5): retrying at now + pause (> 0), the claim's attempt
--               taken back, nothing logged, never dead, the slot refunded
--               (defer below); the error text is the destination;
--               (any other kind with pause > 0 pauses the tenant the same
--               way: the upstream's quota is used up, docs/design.md §4.2)
--   lapsed    → a pre-claimed job its worker dropped unsent, too late to
--               finish well inside its lease (internal/worker lapsed):
--               back to the head lane with gen + 1 at once, the pre-claim's
--               attempt given back, nothing logged (lifecycle.lua
--               CLAIM.lost) — what the sweep would do at the lease's end.
--               Not running at gen, or not pre-claimed at it: stale,
--               nothing logged or changed;
--   permanent → dead;
--   gone      → dead at once, record field reason = 'gone'; a webhook job's
--               tenant is disabled (its backlog kept, until resume), an http
--               or task job's only when the policy says disable_on_gone.
-- Cost correction (see correct below): an attempt that reports its actual
-- cost charges (actual > reserved) or refunds (actual < reserved) the
-- difference on the tenant's schedule, and the record keeps it (field
-- acost), before the outcome's transition.
-- Adaptive rate (policy adaptive = 1, docs/design.md §4.2; see adapt below): a
-- congestion signal (throttled, or a retry after a 5xx or a timeout: the
-- caller says which, ARGV[17]) halves the tenant's rate factor once per
-- episode, down to the floor; a success adds the step, up to full; then TAT
-- is rescaled to the new effective interval (lib.lua refactor).
-- Results (store/result.go): a result's body is stored raw, never escaped,
-- in record fields rb1 … rbN of at most RES.chunk bytes (rbn = N; a chunk
-- is one 64 KiB allocation), the old result's extra chunks deleted. It is
-- kept only while Redis has room for it below the mark (ARGV[14] of
-- maxmemory; INFO memory read once per call, when the call's results carry
-- more than RES.check bytes — smaller ones are written unchecked, like the
-- log's excerpts): past it the body is cut to the room left (back to the
-- start of a UTF-8 character) or dropped, and field result takes the
-- attempt's storage_full form. The attempt's outcome is recorded all the
-- same. A master without maxmemory keeps every body. used_memory read
-- while the call runs counts its own arguments (the body among them, about
-- 2.5 × its size with the query buffer), freed when it returns: the check
-- errs on the safe side, by more than the last chunk's allocator rounding.
-- Dead: see lib.lua to_dead. Each finish trims the tenant's dead set by age
-- and count (lib.lua trim_dead), then reschedule(tenant) unless what the
-- tenant's ready score depends on is as its last reschedule left it
-- (lib.lua sched_sig, field rs: a success of a tenant below its
-- concurrency cap changes none of it); when the call
-- moved the shard's earliest time earlier (a tenant back from its
-- concurrency cap or on a faster rate, a retry due soon), a wake-up is
-- published (lib.lua wake_if_earlier).

local cfg = {succ_ret = tonum(ARGV[3]), dead_ret = tonum(ARGV[4]), dead_max = tonum(ARGV[5]),
  log_n = tonum(ARGV[6]), def_pause = tonum(ARGV[7]), max_pause = tonum(ARGV[8]),
  seed = ARGV[9], idem_ret = tonum(ARGV[12]), trim = {}, succ_ms = nil, succ_idem_ms = nil, dead_ms = nil} -- *_ms: lifecycle.lua's
local floor, step = tonum(ARGV[10]), tonum(ARGV[11])
local KINDS = {success = true, retry = true, throttled = true, permanent = true, gone = true, deferred = true,
  lapsed = true}
local MAX_ACTUAL = 1000000 -- wire.MaxActualCost
-- MAX_AHEAD (µs) caps how far past now a charge may move TAT: policy.MaxSpan,
-- so TAT stays an exact integer in doubles whatever the report.
local MAX_AHEAD = 3600000000000000
local UP_SCOPE = ARGV[13] == '1'
local RES = {mark = tonum(ARGV[14]), chunk = 65530, check = 4096, bytes = 0}
if not (cfg.succ_ret and cfg.dead_ret and cfg.dead_max and cfg.log_n and cfg.def_pause and cfg.max_pause
    and floor and floor >= 1 and floor <= RF_FULL and step and step >= 1 and #ARGV >= 20
    and RES.mark and RES.mark >= 1 and RES.mark <= 1000000) then
  return redis.error_reply('ERR sluice finish: bad arguments')
end
-- num is tonumber with the arguments' usual '0' (no pause, no actual cost,
-- no quota) taken without the C call (tonumber converts a string twice).
local function num(s)
  if s == '0' then return 0 end
  return tonum(s)
end
-- XDEF are the values an attempt leaves out, as sent (its k-th value
-- after the count is ARGV's when k is at most the count, else XDEF[k]).
local XDEF = {'', '0', '0', '', '', '', '', '', '0', '0', '0', '0', '0', ''}
local reqs, n, o, nargs = {}, 0, 14, #ARGV
while o < nargs do
  n = n + 1
  local k = CLAIM.num(ARGV[o + 6]) -- lifecycle.lua
  if not (k and k >= 0 and k <= 14 and k == mfloor(k) and o + 6 + k <= nargs) then
    return redis.error_reply('ERR sluice finish: bad arguments of attempt ' .. n)
  end
  local r
  if k == 0 then -- a plain attempt: every value after the count left out (and the
    -- fields read only beside a value that is not: xtext, rfull, q_rem … q_src)
    r = {id = ARGV[o + 1], gen = CLAIM.num(ARGV[o + 2]), kind = ARGV[o + 3], status = CLAIM.num(ARGV[o + 4]),
      latency = num(ARGV[o + 5]), latency_s = ARGV[o + 5], err = '', pause = 0, congested = false, xfield = '', result = '', rbody = '',
      actual = 0, q_unit = 0}
  else
    local x = {}
    for m = 1, 14 do
      if m <= k then x[m] = ARGV[o + 6 + m] else x[m] = XDEF[m] end
    end
    r = {id = ARGV[o + 1], gen = CLAIM.num(ARGV[o + 2]), kind = ARGV[o + 3], status = CLAIM.num(ARGV[o + 4]),
      latency = num(ARGV[o + 5]), latency_s = ARGV[o + 5], err = x[1], pause = num(x[2]), congested = x[3] == '1',
      xfield = x[4], xtext = x[5], result = x[6], rfull = x[7], rbody = x[8],
      actual = num(x[9]), q_unit = num(x[10]), q_rem = 0, q_lim = 0, q_in = 0, q_src = x[14]}
    if r.q_unit ~= 0 then -- a quota report (unused, and not checked, without one)
      r.q_rem, r.q_lim, r.q_in = tonum(x[11]), tonum(x[12]), tonum(x[13])
    end
  end
  if not (r.gen and KINDS[r.kind] and r.status and r.latency and (k == 0 or (r.pause
      and r.actual and r.actual >= 0 and r.actual <= MAX_ACTUAL and r.actual == mfloor(r.actual)
      and (r.q_unit == 0 or ((r.q_unit == 1 or r.q_unit == 2) and r.q_rem and r.q_rem >= 0
        and r.q_lim and r.q_lim >= 0 and r.q_in and r.q_in > 0))
      and (r.xfield == '' or r.xfield == 'body' or r.xfield == 'body_base64')
      and (r.result ~= '' or r.rbody == '')))) then
    return redis.error_reply('ERR sluice finish: bad arguments of attempt ' .. n)
  end
  RES.bytes = RES.bytes + #r.result + #r.rbody
  reqs[n] = r
  o = o + 6 + k
end

-- RES.room is the bytes Redis may still take below the mark: INFO memory's
-- maxmemory × mark − used_memory, read once, less what this call kept;
-- math.huge without maxmemory, or when the call's results are small.
function RES.room_left()
  if RES.room then return RES.room end
  RES.room = math.huge
  if RES.bytes <= RES.check then return RES.room end
  local info = rcall('INFO', 'memory')
  local function field(name)
    local a = string.find(info, '\n' .. name .. ':', 1, true)
    local b = a and string.find(info, '\r', a, true)
    return b and tonum(string.sub(info, a + #name + 2, b - 1)) or 0
  end
  local max = field('maxmemory')
  if max > 0 then RES.room = mfloor(max / 1000000 * RES.mark) - field('used_memory') end
  return RES.room
end

-- RES.put writes r's result into j's pending fields (see Results above).
function RES.put(j, r)
  local meta, body = r.result, r.rbody
  local room = RES.room_left()
  if #body > 0 and #meta + #body > room then
    meta = r.rfull
    local keep = mmax(0, room - #meta)
    for _ = 1, 3 do -- back to the start of a UTF-8 character
      local c = string.byte(body, keep + 1)
      if keep == 0 or c < 0x80 or c >= 0xC0 then break end
      keep = keep - 1
    end
    body = string.sub(body, 1, keep)
  end
  RES.room = room - #meta - #body
  local p, size, k = j.pending, RES.chunk, math.ceil(#body / RES.chunk)
  p[#p + 1], p[#p + 2] = 'result', meta
  for i = 1, k do
    p[#p + 1], p[#p + 2] = 'rb' .. i, string.sub(body, (i - 1) * size + 1, i * size)
  end
  if k > 0 then p[#p + 1], p[#p + 2] = 'rbn', istr(k) end
  local old = tonum(rcall('HGET', k_job(j.id), 'rbn')) or 0 -- read here: only an http job pays it
  if old > k then
    local gone = {}
    for i = k + 1, old do gone[#gone + 1] = 'rb' .. i end
    if k == 0 then gone[#gone + 1] = 'rbn' end
    rcall('HDEL', k_job(j.id), unpack(gone))
  end
end

-- adapt applies the adaptive rate rule to an adaptive tenant. An episode
-- begins with a cut: f ← max(floor, ⌊f / 2⌋) and cut_until ← max(now, end
-- of the upstream pause, TAT), TAT taken before the cut: the episode covers
-- every attempt already sent or released at the old rate. So a congestion
-- signal cuts only when its attempt's slot is ≥ cut_until (it was sent after
-- the episode began: the lower rate did not help); the others — requests in
-- flight or released when the cut came — are the same episode, answered
-- already. A success recovers additively, f ← min(full, f + step), also only
-- for an attempt slotted ≥ cut_until (a reply to a request sent before the
-- cut says nothing about the new rate). f = full is stored as 0 (absent).
-- An attempt without a congestion signal on a tenant at its full rate (rf =
-- 0) changes nothing: f stays full, and refactor finds the interval as the
-- load's rescale left it.
local function adapt(r, j, t, p)
  if p.adaptive ~= 1 or j.slot < t.cut_until or (t.rf == 0 and not r.congested) then return end
  local f = factor(t, p)
  if r.congested then
    t.cut_until = mmax(NOW, t.paused_until, t.tat)
    f = mmax(floor, mfloor(f / 2))
  elseif r.kind == 'success' then
    f = mmin(RF_FULL, f + step)
  end
  if f >= RF_FULL then f = 0 end
  t.rf = f
  refactor(t, p, NOW)
end

-- correct applies an attempt's actual cost a (r.actual; 0 = unknown: the
-- reservation stands) to its tenant, whose job reserved c = j.cost at its
-- release: δ = (a − c)·T_eff (lib.lua interval, the tenant's interval now).
--   charge (a > c): TAT ← TAT + δ — the later jobs of the tenant leave δ
--     later; capped at now + MAX_AHEAD;
--   refund (a < c): TAT ← max(TAT + δ, now) when TAT > now; a TAT already
--     past stays (the tenant is idle: its burst is full anyway). A refund
--     never moves TAT below now, so it never hands out more than a full
--     burst at once.
-- The record keeps a in field acost (GET shows actual_cost). The window
-- bound with corrections, and its excess E: package store's doc.go, "Cost
-- correction".
local function correct(r, j, t, p)
  if r.actual == 0 then return end
  j.pending[#j.pending + 1] = 'acost'
  j.pending[#j.pending + 1] = istr(r.actual)
  if r.actual == j.cost then return end
  local d = (r.actual - j.cost) * interval(t, p)
  if d > 0 then
    t.tat = mmax(t.tat, mmin(t.tat + d, NOW + MAX_AHEAD))
  elseif t.tat > NOW then
    t.tat = mmax(t.tat + d, NOW)
  end
end

-- PACE.observe records the quota an attempt's response reported (r.q_unit > 0)
-- on its tenant t when the tenant paces by headers (policy pacing = 1; not
-- for the upstreams' throttles of an upstream-scope call): q_unit, q_rem,
-- q_lim, q_reset = now + reset in, qh = the header, and q_fly = what the
-- tenant has in flight now (released and running jobs, or their tokens —
-- the running ones counted at this job's cost), which the upstream may have
-- counted after this response and Sluice has not heard of yet. A report of
-- the same quota window (a reset less than PACE_WINDOW after the recorded
-- one) that leaves more than the recorded remaining is older news (an
-- answer overtaken by a later one) and is ignored. lib.lua PACE.slot reads it.
-- An attempt's cost correction (r.actual, cost_header) moves q_fly of a
-- tokens quota in force by actual − reserved: the upstream counted the
-- tokens the answer reports (for an attempt the report had counted already,
-- this errs on the safe side until the next report).
-- In lib.lua's table PACE: the scripts have few locals to spare.
PACE.WINDOW = 1000000
function PACE.observe(r, j, t, p)
  if p.pacing ~= 1 or UP_SCOPE then return end
  if r.actual > 0 and t.q_unit == 2 and t.q_reset > NOW then
    t.q_fly = mmax(0, t.q_fly + r.actual - j.cost)
  end
  if r.q_unit == 0 then return end
  local reset = NOW + r.q_in
  if t.q_unit == r.q_unit and t.q_reset > NOW and reset < t.q_reset + PACE.WINDOW and r.q_rem >= t.q_rem then
    return
  end
  t.q_unit, t.q_rem, t.q_lim, t.q_reset, t.qh = r.q_unit, r.q_rem, r.q_lim, reset, r.q_src
  if r.q_unit == 2 then
    t.q_fly = t.rtok + t.running * j.cost
  else
    t.q_fly = t.released + t.running
  end
end

-- defer takes a deferred job (its destination's circuit is open) out of
-- running without an attempt: the claim's count is taken back, the attempt
-- log and the recent attempts are left alone, the tenant is not paused; the
-- job waits in the delayed set as retrying until now + r.pause (promotion
-- puts it at the head of its lane then, like a retry). Its slot is refunded
-- (TAT ← max(TAT − cost·T_eff, now) while TAT > now, as correct's refund),
-- so a tenant's jobs to its other destinations keep its rate. The record
-- keeps the destination (field dst) and hd = 0 (the gate decides its
-- return, not pass.lua X.hold). The tenant's
-- open destinations <p>:{sN}:t:<tenant>:circ (HASH destination → due µs,
-- r.err) get the due time when it is later than theirs, and so does the
-- tenant's field cu (the latest due of them, beside field s: pass.lua
-- X.hold holds the tenant's jobs to such a destination until its due
-- without a slot; docs/design.md §4.5), and its deferred jobs of the destination
-- <p>:{sN}:t:<tenant>:circ:<destination> (ZSET job id → due µs: what
-- circuit_wake.lua brings back when the circuit closes); the keys live until
-- the latest due + 1 h. A deferral whose tenant was woken for the
-- destination at or after the job's claim (<p>:{sN}:t:<tenant>:circ:woken,
-- circuit_wake.lua: the gate answered before the circuit closed) is due
-- now instead and records nothing: a lost wake-up holds nothing.
local function defer(r, j, t, p)
  lease_del(r.id)
  unrun(j, t)
  if t.tat > NOW then t.tat = mmax(t.tat - j.cost * interval(t, p), NOW) end
  local ck = k_tenant(j.tenant) .. ':circ'
  -- Woken for the destination since the job's claim: the circuit closed
  -- after the gate's answer; the job is due now and nothing is recorded.
  local woken = tonum(rcall('HGET', ck .. ':woken', r.err))
  local late = woken and woken >= (tonum(rcall('HGET', k_job(j.id), 'claimed')) or 0)
  local due = late and NOW or NOW + r.pause
  j.attempt = j.attempt - 1
  note_earliest()
  rcall('ZADD', K_DELAYED, istr(due), j.id)
  hset_job(j, 'state', 'retrying', 'due', istr(due), 'attempt', istr(j.attempt), 'dst', r.err, 'hd', '0')
  lowered(due)
  if late then return 'retrying', 0 end
  local ttl = mfloor(r.pause / 1000) + 3600000
  local was = tonum(rcall('HGET', ck, r.err)) or 0
  if due > was then rcall('HSET', ck, r.err, istr(due)) end
  if due > (t.st_cu or 0) then
    t.st_cu = due
    rcall('HSET', k_tenant(j.tenant), 'cu', istr(due))
  end
  rcall('ZADD', ck .. ':' .. r.err, istr(due), j.id)
  for _, key in ipairs({ck, ck .. ':' .. r.err}) do
    if rcall('PTTL', key) < ttl then rcall('PEXPIRE', key, ttl) end
  end
  return 'retrying', 0
end

-- finish_one records one attempt (read phase: the record, then its tenant
-- from the call's cache; write phase: the transition) and returns its reply:
-- the state after and stale (0|1), or 'not_found' and 0.
-- ENTRY is the attempt log entry of the attempt at hand (lifecycle.lua
-- log_attempt), one table for the call's attempts.
-- An entry's latency_s is the latency's text as sent when it is what istr
-- would print (a canonical integer below 10^15: the store's), saving the
-- format.
-- FAST_T takes a fast finish's live and bytes changes (to_succeeded): they
-- leave the tenant's as they were (finish_one).
local FAST_T = {live = 0, bytes = 0}
-- FAST_READY: the tenants fast finishes put back in ready (in order) and
-- their scores (by name), added with the call's other ready writes unless
-- a later attempt of the call loaded the tenant and rescheduled it.
local FAST_READY = {}
local ENTRY = {at = 0, outcome = '', status = 0, latency = 0, latency_s = nil, err = '', extra = nil, stale = nil,
  gen = nil}
local function finish_one(r)
  local entry = ENTRY
  entry.at, entry.outcome, entry.status, entry.latency, entry.err = NOW, r.kind, r.status, r.latency, r.err
  entry.extra, entry.stale, entry.gen = nil, nil, nil
  local ls = r.latency_s
  if #ls > 15 or not (ls == '0' or string.find(ls, '^[1-9]%d*$')) then ls = nil end
  entry.latency_s = ls
  if r.xfield ~= '' then entry.extra = ',"' .. r.xfield .. '":' .. cjson.encode(r.xtext) end
  local j = load_finished(r.id)
  if not j then return 'not_found', 0 end
  if j.state ~= 'running' or j.gen ~= r.gen then
    if r.kind == 'lapsed' then return j.state, 1 end -- never sent: nothing to log
    entry.stale, entry.gen = true, r.gen
    log_attempt(j, cfg.log_n, entry)
    return j.state, 1
  end
  if r.kind == 'gone' then j.type = rcall('HGET', j.k, 'type') end -- read before this attempt's writes
  -- A plain success of a tenant the call has not loaded takes a fast
  -- finish's token (lib.lua T_FIELDS.fold): its running − 1 is counted
  -- there and in the aggregates now; with a token, nothing else of the
  -- tenant changes (the last token drops its held weight).
  local folded = false
  if r.kind == 'success' and r.result == '' and r.actual == 0 and r.q_unit == 0 and not r.congested
      and r.pause == 0 and not TENANTS[j.tenant] then
    local key = k_tenant(j.tenant)
    local v = rcall('HINCRBY', key, 'ff', '-1')
    if AGG.counted(j.tenant) then AGG.open, AGG.run = AGG.open - 1, AGG.run - 1 end -- as AGG.note would
    if v >= 0 then
      local left, d, back = T_FIELDS.ff_split(v)
      if left == 0 and d > 0 then FAIR.d = FAIR.d - d end
      if back > 0 then -- held for its fair share: back in ready (lib.lua T_FIELDS.mint)
        local score = mmax(tonum(rcall('HGET', key, 'fx')) or 0, NOW)
        note_earliest()
        FAST_READY[#FAST_READY + 1], FAST_READY[j.tenant] = j.tenant, score
        lowered(score)
      end
      lease_del(r.id)
      log_attempt(j, cfg.log_n, entry, true)
      recent_add(j.tenant, r, NOW, cfg.succ_ret)
      to_succeeded(j, FAST_T, NOW, cfg)
      return 'succeeded', 0
    end
    folded = true -- no token: the load folds this finish's running − 1
  end
  local t, p = tenant(j.tenant)
  if folded then t.st_busy = true end -- as loaded before this finish (it was running): expire_tenant
  -- The fields load_finished leaves out (lifecycle.lua): a plain success
  -- needs none of them — at the tenant's full rate factor (rf = 0: adapt
  -- changes nothing then, whatever the slot), without an actual cost
  -- (correct) or a quota report (PACE.observe: the cost).
  if r.kind ~= 'success' or r.congested or r.actual > 0 or r.q_unit ~= 0 or (p.adaptive == 1 and t.rf ~= 0) then
    local x = rcall('HMGET', j.k, 'cost', 'bytes', 'first', 'slot', 'ups')
    j.cost, j.bytes, j.first, j.slot, j.ups = tonum(x[1]) or 1, tonum(x[2]) or 0, tonum(x[3]) or 0, tonum(x[4]) or 0,
      x[5] or ''
  end
  if r.kind == 'deferred' then return defer(r, j, t, p) end
  if r.kind == 'lapsed' then
    if not CLAIM.lost(j, t, false) then return j.state, 1 end
    lease_del(r.id)
    return 'queued', 0
  end

  lease_del(r.id) -- removed after the last attempt (lib.lua leases_flush)
  if folded then -- unrun but the running − 1 counted already
    t.live, t.bytes = t.live + 1, t.bytes + j.bytes
  else
    unrun(j, t)
  end
  log_attempt(j, cfg.log_n, entry, true) -- written with the state below
  if r.result ~= '' then RES.put(j, r) end -- an http job's result: the last attempt's response
  recent_add(j.tenant, r, NOW, cfg.succ_ret) -- the tenant's ring key (recent.lua)
  correct(r, j, t, p)
  PACE.observe(r, j, t, p)

  if UP_SCOPE then
    -- the upstreams' throttle: the caller pauses them, not the tenant
  elseif r.pause > 0 or r.kind == 'throttled' then -- throttled, or a pre-emptive pause (quota used up)
    local d = r.pause > 0 and r.pause or cfg.def_pause
    t.paused_until = mmax(t.paused_until, NOW + mmin(d, cfg.max_pause))
  end
  if not UP_SCOPE then adapt(r, j, t, p) end

  local kind = r.kind
  if kind == 'success' then
    to_succeeded(j, t, NOW, cfg)
    return 'succeeded', 0
  elseif kind == 'retry' then
    note_earliest()
    local state, due = retry_or_dead(j, t, p, NOW, cfg)
    lowered(due)
    return state, 0
  elseif kind == 'permanent' then
    to_dead(j, t, NOW, cfg)
    return 'dead', 0
  elseif kind == 'gone' then
    if j.type == 'webhook' or p.disable_on_gone == 1 then t.disabled = 1 end
    j.pending = j.pending or {}
    j.pending[#j.pending + 1] = 'reason'
    j.pending[#j.pending + 1] = 'gone'
    to_dead(j, t, NOW, cfg)
    return 'dead', 0
  end
  -- Throttled: the attempt is not counted (written with the state).
  j.attempt = j.attempt - 1
  j.pending[#j.pending + 1] = 'attempt'
  j.pending[#j.pending + 1] = istr(j.attempt)
  if kind == 'throttled' and retry_expired(j, p, NOW) then
    to_dead(j, t, NOW, cfg)
    return 'dead', 0
  end
  to_head(j, t, 1)
  return 'queued', 0
end

local reply = {'ok'}
FAIR.defer() -- lib.lua: the tenants' held weight moves once (fast finishes included)
for i = 1, n do reply[2 * i], reply[2 * i + 1] = finish_one(reqs[i]) end
leases_flush()

-- Every tenant an attempt changed: rescheduled when what its ready score
-- depends on changed (lib.lua sched_sig: a success of a tenant below its
-- concurrency cap changes none of it), its dead set trimmed (each finish
-- trims it, docs/design.md §7; lifecycle.lua trim_dead), saved, expired; then the wake
-- check. The aggregates are written once after them (lib.lua AGG).
AGG.hold()
ready_defer() -- lib.lua: the ready set written once, after the last tenant
for i = 1, #TENANT_ORDER do
  local tn = TENANT_ORDER[i]
  local c = TENANTS[tn]
  if c.t.rs ~= sched_sig(c.t, c.p) then
    FAST_READY[tn] = nil -- its reschedule decides
    note_earliest()
    lowered(reschedule(tn, c.t, c.p, NOW))
  end
  c.t.st_rsnow = 1 -- rs as a finish computes it, for save_tenant's mint (lib.lua)
  trim_dead(tn, c.t, NOW, cfg)
  save_tenant(tn, c.t)
  expire_tenant(tn, c.t, c.p, NOW, cfg.succ_ret) -- listed while its jobs' records are kept
end
for i = 1, #FAST_READY do
  local tn = FAST_READY[i]
  local score = FAST_READY[tn]
  if score then ready_add(tn, score) end
end
ready_flush()
FAIR.flush()
AGG.flush()
wake_if_earlier()

-- The shard's finished-jobs counter <p>:{sN}:finished (HASH Unix second →
-- jobs that ended by an attempt in it; finished.lua reads it): the attempts
-- of this call that ended their job (succeeded, or dead) are added to now's
-- second, one HINCRBY. The second's first call (the field is new) also
-- drops the seconds older than keep and sets the key's TTL to it: the hash
-- holds at most keep + 1 fields and goes keep seconds after the last second
-- written. keep is MaxFinishedWindow (finished.go; TestFinished checks
-- both). In a block: the prologue's locals leave the scripts few to spare.
do
  local ended, keep = 0, 11
  for i = 2, #reply, 2 do
    local state = reply[i]
    if reply[i + 1] == 0 and (state == 'succeeded' or state == 'dead') then ended = ended + 1 end
  end
  local key, sec = K_FINISHED, mfloor(NOW / 1000000)
  if ended > 0 and rcall('HINCRBY', key, istr(sec), istr(ended)) == ended then
    local old = {}
    for _, f in ipairs(rcall('HKEYS', key)) do
      if tonum(f) < sec - keep then old[#old + 1] = f end
    end
    if #old > 0 then rcall('HDEL', key, unpack(old)) end
    rcall('PEXPIRE', key, keep * 1000)
  end
end
return reply
