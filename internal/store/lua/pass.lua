-- pass.lua — one dispatcher pass over one shard (docs/design.md §2.2).
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  D: lead µs                ARGV[4]  L: min lead µs
-- ARGV[5]  grace µs                  ARGV[6]  P: most promotions, and most sweeps
-- ARGV[7]  K: most tenants           ARGV[8]  capacity: most jobs released (-1 = no limit)
-- ARGV[9]  jitter seed               ARGV[10] dead retention µs
-- ARGV[11] dead letters per tenant   ARGV[12] attempt log length
-- ARGV[13] claim spacing µs (0 = none)
-- ARGV[14] m, the number of upstream grants that follow (0 = none)
-- ARGV[15…] m grants of 7 values each (upstream_grant.lua's reply for this
--          shard): name, interval µs (0: no answer — only the next grant
--          time is news), burst, pause end µs, next grant µs, segments
--          ("t0 ceil t0 ceil …" µs, '' = none), the set of an aligned grant
--          (its lane's ups; '' or 0: a plain grant)
-- ARGV[15 + 7m] λ: the workers' slots per unit of weight, in thousandths,
--          while the pool is contended (0 = not contended: no fair cap; 3d)
-- ARGV[16 + 7m] ε: the pre-claim's tolerance µs (-1 = no pre-claim; 3e)
-- Reply:   {'ok', now, more (0|1), capacity reached (0|1), next wake µs (0 = none),
--           promoted, swept, tenants visited,
--           {{upstream, wanted cost, weight, unit}, …} (demand: see 3b),
--           {{ups, cost, span µs, weight, earliest µs}, …} (aligned demand: 3c),
--           {id, tenant, type, cost, gen, slot µs, timeout µs, queue, task type,
--            send at µs[, pre-claimed …]}, …}
--          pre-claimed (3e; absent for a job left to the claim): attempt, body,
--            created µs, upstreams (record field ups), then the values of the
--            signing state (none for a job that is not a webhook) as claim.lua's
--            reply gives them, in the row itself (a nested table costs Redis
--            a conversion of its own); send at is then the claim's send µs
--
-- 1. Promote delayed jobs due by now + D (at most P, by due time):
--    scheduled → the backlog's tail, retrying → the head lane (next head
--    sequence). One due later than now is promoted ahead only when its
--    tenant has no job queued (nothing would wait behind it): its due time
--    becomes the job's not-before slot (record field nb; the tenant then
--    takes the pass's reading path, c1 = 0), so it is released D ahead like
--    any job and sent at its due time, not a pass after it; else it waits
--    in the delayed set until its due time, as before.
-- 2. Sweep expired leases (at most P): released → head lane, gen + 1, no
--    attempt used; running (past claim + timeout + grace) → gen + 1, attempt
--    logged as lease_expired, retrying after the backoff or dead — but a
--    pre-claimed one (3e; field pc = its gen) goes back like a released one,
--    the pre-claim's attempt given back and field pcl set (X.lost).
-- 3. Release: the tenants with a ready score ≤ now + D (at most K by score,
--    and at most capacity + 2 of them when the capacity is limited) and
--    those touched by 1–2 are visited in order of weighted virtual time
--    (vt, lifted to the shard's vclock first), one job at a time: the tenant
--    with the smallest vt releases its head job (head lane first, tombstones
--    dropped) when it is not blocked, its pauses end by now + D, released +
--    running < concurrency, its released tokens stay within ⌈D/T⌉ + b, and
--    the job's GCRA slot ≤ now + D (T: the effective interval T_eff of an
--    adaptive tenant, lib.lua interval); slot = max(GCRA slot, pause end).
--    A slot at least L from now is moved later to the next instant at
--    least the claim spacing S away from every such slot this pass handed
--    out (and left for the next pass when that is past now + D), so claims
--    at planned instants do not herd; a slot within L is claimed as soon as
--    a worker picks the task up (claim.lua's send schedule keeps a late
--    pickup from clumping). TAT ← max(TAT, slot) + cost·T, gen + 1, lease
--    send_at + grace (send_at: the slot plus the lateness of the tenant's
--    send schedule, lib.lua send_target), vt += ⌊cost·VT_SCALE / weight⌋. A job to one of
--    its tenant's open destinations is held instead (X.hold: no slot) and
--    the tenant's next job is taken, at most P held a call. A tenant that cannot
--    release leaves the round; the pass stops when none is left or the
--    capacity is used.
-- 3b. Upstreams (lanes.lua). The grants of ARGV are installed in the
--    shard's upstream states first, and the tenants waiting on those
--    upstreams (their waiting sets, at most K each) join the visit. A tenant
--    holding lane jobs (uq > 0) releases, among its plain next job and each
--    lane's head, the oldest (head lane first, then by created time) that
--    is eligible: slot = max(GCRA slot, pauses, nb, each named upstream's
--    earliest), ≤ now + D, and every named upstream's segment has room for
--    it at that slot; the tenant's TAT and each upstream's local tat are
--    charged at that one slot. A lane head whose upstream has no room and
--    whose shard may ask (next grant ≤ now) adds to that upstream's demand
--    (wanted: the lane's jobs × the head's cost; weight: the tenant's
--    weight, once per tenant; unit: the largest head cost), and the
--    upstream's next grant becomes now + D until a grant says otherwise, so
--    waiting tenants are scored past the horizon and the loop does not spin.
-- 3c. A lane head naming several upstreams first uses its set's aligned
--    reservation (lanes.lua LN.al_slot: segments of every upstream from one
--    common start X, reserved for that set's lanes); else the shard's plain
--    segments when they give a common instant. When neither does, it
--    reports aligned demand (its set, cost, the span from its lane's first
--    job's slot to its last's at the slowest of the head's rates — at most
--    D/2 —, its tenant's weight and its earliest slot by its tenant alone), once per set until the set's nx (now + D), instead of
--    plain demand. Aligned grants of ARGV install the set's reservation when
--    every upstream of the set granted one; else the set may ask again at
--    the grants' next round.
-- 3d. Fair shares of the workers' pool (docs/design.md §2.2 "Fair shares
--    of the pool"). With λ > 0, a tenant whose running + released reached
--    max(1, ⌊weight·λ⌋) releases nothing (lib.lua blocked: 'fair') and leaves
--    ready like one at its concurrency; its next claim, finish or sweep puts
--    it back (its digest rs says 'fair', which no other script computes).
--    A pass with capacity records in field r of <p>:{sN}:fair the weight of
--    the tenants left in the round without a slot and holding none when its
--    capacity ran out (none, and no field, when it did not): the budget
--    counts them in λ's weights beside the held weight (field w, lib.lua
--    FAIR).
-- 3e. Pre-claim (docs/design.md §2.2). With ε ≥ 0, a webhook or http job
--    whose send target (lib.lua send_target: in plan) is ≤ now + ε at its
--    release is claimed by the pass itself (lifecycle.lua CLAIM.run, as
--    claim.lua would at now): released → running at once, attempt + 1, the
--    send schedule, the lease until send + timeout + grace, record field pc
--    = its gen (pre-claimed; the sweep, 2., treats such a running job whose
--    lease expired as a lost release). Not when its tenant is disabled,
--    paused (gate past now) or at its concurrency, its body is over
--    X.PC_BODY bytes, the pass's pre-claimed bodies reached X.PC_BYTES, or
--    it was pre-claimed once and lost (field pcl): those take the claim.
-- 4. Every tenant the pass changed: save, reschedule, expiry, dead-set trim
--    (a ready tenant that was read but not visited is left as it was).
-- more: P or K cut the work short (or the ready read was cut by the
-- capacity bound while capacity is left). capacity reached: the capacity ran out
-- while visited tenants were still in the round. next wake = min(first ready
-- score − D, first delayed due time past now + D, minus D, the due time of
-- a delayed job left waiting (1.), first lease deadline, 100 ms on when the
-- tenant index had more entries due than the pass checks: 5.) — or now,
-- without reading the sets, when more or capacity reached is set: work is
-- left, and the dispatcher passes again at once or at its next reading of
-- the free capacity, whatever the sets hold (3 reads a pass saved while
-- the workers are saturated).

local D, L, GRACE = tonum(ARGV[3]), tonum(ARGV[4]), tonum(ARGV[5])
local P, K, CAP = tonum(ARGV[6]), tonum(ARGV[7]), tonum(ARGV[8])
local cfg = {seed = ARGV[9], dead_ret = tonum(ARGV[10]), dead_max = tonum(ARGV[11]),
  log_n = tonum(ARGV[12]), trim = {}}
local S = tonum(ARGV[13])
local X = {M = tonum(ARGV[14])} -- the upstream parts (3b), in one table: the script's locals are few
if not (D and L and GRACE and P and K and CAP and cfg.dead_ret and cfg.dead_max and cfg.log_n and S and X.M)
  or #ARGV ~= 16 + 7 * X.M then
  return redis.error_reply('ERR sluice pass: want 12 integer arguments, 7 values per grant, λ and ε')
end
X.lv = tonum(ARGV[15 + 7 * X.M]) -- 3d
if not X.lv or X.lv < 0 then return redis.error_reply('ERR sluice pass: want λ ≥ 0') end
X.eps = tonum(ARGV[#ARGV]) -- 3e
if not X.eps then return redis.error_reply('ERR sluice pass: want an integer ε') end
X.PC_BODY, X.PC_BYTES, X.pc_bytes = 16384, 1048576, 0
if X.lv > 0 then FAIR.lv = X.lv end
X.grants = {}
for i = 1, X.M do
  local o = 14 + (i - 1) * 7
  local g = {name = ARGV[o + 1], iv = tonum(ARGV[o + 2]), b = tonum(ARGV[o + 3]), pu = tonum(ARGV[o + 4]),
    nx = tonum(ARGV[o + 5]), segs = {}, set = ARGV[o + 7]}
  if g.set == '0' then g.set = '' end
  local v = {}
  for x in string.gmatch(ARGV[o + 6], '%d+') do v[#v + 1] = tonum(x) end
  if not (g.iv and g.b and g.pu and g.nx) or g.iv < 0 or g.b < 1 or #v % 2 ~= 0 then
    return redis.error_reply('ERR sluice pass: malformed grant ' .. i)
  end
  for k = 1, #v, 2 do g.segs[#g.segs + 1] = {v[k], v[k + 1]} end
  X.grants[i] = g
end
local VT_SCALE = 1000000
local GRACE_S = istr(GRACE)
local HORIZON = NOW + D
local more = 0

-- Read phase: the due work, its records, every tenant concerned.
local function bounded(ids, n)
  if #ids > n then
    more = 1
    ids[#ids] = nil
  end
  return ids
end
local due_raw = rcall('ZRANGEBYSCORE', K_DELAYED, '-inf', istr(HORIZON), 'WITHSCORES', 'LIMIT', '0', istr(P + 1))
local due, due_at = {}, {}
for i = 1, #due_raw, 2 do
  due[#due + 1] = due_raw[i]
  due_at[due_raw[i]] = tonum(due_raw[i + 1])
end
local due_cut = #due > P -- more only when promoting made progress (below)
if due_cut then due[#due] = nil end
local expired = bounded(rcall('ZRANGEBYSCORE', K_LEASES, '-inf', istr(NOW), 'LIMIT', '0', istr(P + 1)), P)
-- With no capacity nothing can be released: the ready tenants are not even
-- read (the pass only promotes and sweeps), so full workers cost one cheap
-- pass per capacity refresh, whatever the number of tenants.
local ready = {}
local blocked_by_capacity = 0
-- Tenants read from ready: K, and no more than the capacity can serve (a
-- ready tenant can release at least one job), with room for a few that
-- cannot: reading all K when the workers take a handful per pass would cost
-- K tenant reads for those few releases.
local want = K
if CAP > 0 then want = mmin(K, CAP + 2) end
local truncated = false
if CAP ~= 0 then
  ready = rcall('ZRANGEBYSCORE', K_READY, '-inf', istr(HORIZON), 'WITHSCORES', 'LIMIT', '0', istr(want + 1))
elseif rcall('ZCOUNT', K_READY, '-inf', istr(HORIZON)) > 0 then
  blocked_by_capacity = 1
end
if #ready > 2 * want then
  truncated = true
  ready[#ready], ready[#ready - 1] = nil, nil
end

local function load_all(ids)
  local jobs = {}
  for i, id in ipairs(ids) do
    jobs[i] = load_job(id) or {id = id, state = ''}
    if jobs[i].tenant then
      tenant(jobs[i].tenant)
      TENANTS[jobs[i].tenant].touched = true
    end
  end
  return jobs
end
local due_jobs, expired_jobs = load_all(due), load_all(expired)
local scores = {}
for i = 1, #ready, 2 do
  tenant(ready[i])
  local c = TENANTS[ready[i]]
  c.touched = c.touched or false
  scores[ready[i]] = tonum(ready[i + 1])
end
cfg.ready = scores -- in ready: their new scores are updates (lib.lua ready_defer)
-- The tenants waiting on an upstream granted now (3b), at most K each.
X.waiting = {} -- tenant → {upstream name → true}
for _, g in ipairs(X.grants) do
  for _, tn in ipairs(rcall('ZRANGE', LN.k_wait(g.name), 0, K - 1)) do
    tenant(tn)
    local c = TENANTS[tn]
    if c.touched == nil then c.touched = false end
    X.waiting[tn] = X.waiting[tn] or {}
    X.waiting[tn][g.name] = true
  end
end
local vclock = tonum(rcall('GET', K_VCLOCK)) or 0
-- The grants join the shard's upstream states (lanes.lua LN.install reads
-- them; LN.save writes them at the end).
-- Aligned grants (3c) install their set's reservation, whole or not at all.
X.al_in = {} -- ups → {nx, segs = name → {X, ceil}}
for _, g in ipairs(X.grants) do
  if g.set == '' then
    LN.install(g.name, g.iv, g.b, g.pu, g.nx, D, g.segs)
  else
    local a = X.al_in[g.set] or {nx = 0, segs = {}}
    a.nx = mmax(a.nx, g.nx)
    if #g.segs == 1 then a.segs[g.name] = g.segs[1] end
    X.al_in[g.set] = a
  end
end
for ups, a in pairs(X.al_in) do
  local parts = {}
  for _, n in ipairs(LN.names(ups)) do
    if not a.segs[n] then
      parts = nil
      break
    end
    parts[#parts + 1] = {a.segs[n][1], a.segs[n][2]}
  end
  -- A reservation whose parts end no later than the set's current ones is
  -- the same grant again (a retried pass): installing it would reuse its
  -- calendar, so it is skipped (a new aligned grant starts past the
  -- coordinator's calendar end, so it ends later).
  local old = parts and LN.al_get(ups)
  if old and #old.parts == #parts then
    for i, p in ipairs(parts) do
      if p[2] <= old.parts[i][2] then parts, a = nil, nil break end
    end
  end
  if parts then LN.al_put(ups, {nx = 0, h = D, parts = parts}) elseif a then LN.al_put(ups, {nx = a.nx, h = D, parts = {}}) end
end

-- 1. Promotion.
local promoted = 0
local waiting = nil -- the earliest due time of a job left for its due time
for _, j in ipairs(due_jobs) do
  local at = due_at[j.id] or NOW
  local t = j.tenant and TENANTS[j.tenant] and TENANTS[j.tenant].t
  if at > NOW and t and (t.qtok > 0 or t.hlen > 0) then
    waiting = mmin(waiting or at, at)
    j.state = 'waiting' -- nothing to do before its due time
  else
    rcall('ZREM', K_DELAYED, j.id)
  end
  if j.state == 'scheduled' then
    local t = tenant(j.tenant)
    if j.ups ~= '' then
      LN.push(j, t, false) -- lanes.lua (counts qtok)
      t.qtok = t.qtok - j.cost
    else
      rcall('RPUSH', k_queue(j.tenant), j.id)
    end
    if at > NOW then
      rcall('HSET', k_job(j.id), 'state', 'queued', 'nb', istr(at))
      t.c1 = 0
    else
      rcall('HSET', k_job(j.id), 'state', 'queued')
    end
    t.qtok = t.qtok + j.cost
    promoted = promoted + 1
  elseif j.state == 'retrying' then
    local t = tenant(j.tenant)
    to_head(j, t, 0)
    if at > NOW then
      rcall('HSET', k_job(j.id), 'nb', istr(at))
      t.c1 = 0
    end
    promoted = promoted + 1
  end -- any other record was not due here: only the stray member goes
end
if due_cut and promoted > 0 then more = 1 end

-- X.lost takes back pre-claimed job j (record field pc = its gen, 3e)
-- whose lease expired before any finish: its batch never reached a worker,
-- the worker that dropped it unsent (too late to finish within the lease)
-- could not give it back (finish.lua, kind lapsed), or it died with it.
-- Like a lost release, it goes back to the head lane with gen + 1 and no
-- attempt used (lifecycle.lua CLAIM.lost); pcl = 1 sends its later
-- releases through the claim, so a worker crash while sending it counts an
-- attempt from then on. False for any other running job (whose tenant the
-- sweep reads next anyway).
function X.lost(j)
  return CLAIM.lost(j, tenant(j.tenant), true)
end

-- 2. Sweep.
local swept = 0
for _, j in ipairs(expired_jobs) do
  rcall('ZREM', K_LEASES, j.id)
  if j.state == 'released' then
    local t = tenant(j.tenant)
    unrelease(j, t)
    to_head(j, t, 1)
    swept = swept + 1
  elseif j.state == 'running' and X.lost(j) then
    swept = swept + 1
  elseif j.state == 'running' then
    local t, p = tenant(j.tenant)
    unrun(j, t)
    log_attempt(j, cfg.log_n, {at = NOW, outcome = 'lease_expired',
      err = 'lease expired: no finish within timeout + grace'})
    j.gen = j.gen + 1
    rcall('HSET', k_job(j.id), 'gen', j.gen)
    retry_or_dead(j, t, p, NOW, cfg)
    swept = swept + 1
  end
end

-- 3. Release, by weighted virtual time. The heap orders (vt, ready score,
-- tenant), so ties are broken by the oldest score, then by name.
local heap = {}
-- (vt, score, tn) is unique (a tenant is in the heap once), so the order is
-- strict and the pops come in one order whatever the heap's shape. The
-- comparisons are written out in the loops: a call each cost more than the
-- comparison.
local function heap_push(x)
  local i = #heap + 1
  local xv, xs, xt = x.vt, x.score, x.tn
  while i > 1 do
    local up = mfloor(i / 2)
    local u = heap[up]
    local uv = u.vt
    if xv > uv or (xv == uv and (xs > u.score or (xs == u.score and xt >= u.tn))) then break end -- x not below u
    heap[i] = u
    i = up
  end
  heap[i] = x
end
local function heap_pop()
  local top, n = heap[1], #heap
  local x = heap[n]
  heap[n] = nil
  n = n - 1
  if n == 0 then return top end
  local xv, xs, xt = x.vt, x.score, x.tn
  local i = 1
  while true do
    local l = 2 * i
    if l > n then break end
    local c = heap[l]
    if l < n then
      local d = heap[l + 1]
      local dv, cv = d.vt, c.vt
      if dv < cv or (dv == cv and (d.score < c.score or (d.score == c.score and d.tn < c.tn))) then c, l = d, l + 1 end
    end
    local cv = c.vt
    if not (cv < xv or (cv == xv and (c.score < xs or (c.score == xs and c.tn < xt)))) then break end -- c not below x
    heap[i] = c
    i = l
  end
  heap[i] = x
  return top
end

-- X.hmget reads the fields of list f (X.PEEK_F, X.POP_F) of the job
-- record at key k and, with the pre-claim on (3e), in the same HMGET the fields
-- X.preclaim needs (X.PC_FIELDS, appended to the lists once a pass): the
-- values, and the offset of the pre-claim's after them (nil when it is
-- off).
X.PC_FIELDS = {'bytes', 'attempt', 'first', 'body', 'created', 'ups', 'pcl'}
X.PEEK_F, X.POP_F = {'state', 'cost', 'gen', 'type', 'nb'}, {'state', 'cost', 'gen', 'type'}
X.PEEK_N, X.POP_N = #X.PEEK_F, #X.POP_F
if X.eps >= 0 then
  for _, f in ipairs(X.PC_FIELDS) do
    X.PEEK_F[#X.PEEK_F + 1], X.POP_F[#X.POP_F + 1] = f, f
  end
end
function X.hmget(k, f, n)
  return rcall('HMGET', k, unpack(f)), X.eps >= 0 and n or nil
end

-- peek returns the tenant's next queued job (head lane first), dropping
-- tombstones and vanished records from the lane or the backlog on the way.
local function drop(tn, c, id, from_head)
  if from_head then
    rcall('ZREM', k_head(tn), id)
    c.t.hlen = c.t.hlen - 1
  else
    rcall('LPOP', k_queue(tn))
  end
end
local function peek(tn, c)
  while true do
    local id, from_head = nil, c.t.hlen > 0
    if from_head then id = rcall('ZRANGE', k_head(tn), '0', '0')[1] end
    if not id then
      from_head = false
      id = rcall('LINDEX', k_queue(tn), '0')
    end
    if not id then return nil end
    local k = k_job(id)
    local r, pco = X.hmget(k, X.PEEK_F, X.PEEK_N)
    if r[1] == 'queued' then
      return {id = id, k = k, from_head = from_head, cost = tonum(r[2]) or 1, gen = tonum(r[3]) or 0,
        type = r[4] or '', nb = tonum(r[5]) or 0, pc = pco and r, pco = pco}
    end
    drop(tn, c, id, from_head)
  end
end

-- pop_next takes the tenant's next queued job out of its lane or backlog
-- (head lane first), dropping tombstones and vanished records on the way:
-- for a tenant whose jobs all cost 1, decided on before it is read.
local function pop_next(tn, c)
  while true do
    local id, from_head = nil, c.t.hlen > 0
    if from_head then
      id = rcall('ZPOPMIN', k_head(tn))[1]
      if id then c.t.hlen = c.t.hlen - 1 end
    end
    if not id then id = rcall('LPOP', k_queue(tn)) end
    if not id then return nil end
    local k = k_job(id)
    local r, pco = X.hmget(k, X.POP_F, X.POP_N)
    if r[1] == 'queued' and pco then -- sized for the fields X.emit and X.preclaim add (no rehash)
      return {id = id, k = k, cost = tonum(r[2]) or 1, gen = tonum(r[3]) or 0, type = r[4] or '', pc = r, pco = pco,
        tenant = nil, c = nil, r = nil, slot = nil, grace = nil, resv = nil, body = nil, bytes = nil,
        attempt = nil, first = nil, created = nil, ups = nil}
    elseif r[1] == 'queued' then
      return {id = id, k = k, cost = tonum(r[2]) or 1, gen = tonum(r[3]) or 0, type = r[4] or ''}
    end
  end
end

-- task_route reads a task job's asynq queue and task type from its body.
local function task_route(id)
  local ok, b = pcall(cjson.decode, rcall('HGET', k_job(id), 'body') or '')
  if not ok or type(b) ~= 'table' then return '', '' end
  local q, tt = b.queue, b.task_type
  return type(q) == 'string' and q or '', type(tt) == 'string' and tt or ''
end

local released = {}
-- taken holds the slots this pass handed out; spaced(x) is the earliest
-- instant ≥ x at least S away from each of them (claims must not herd).
local taken = {}
local function spaced(x)
  if S <= 0 then return x end
  local moved = true
  while moved do
    moved = false
    for _, t in ipairs(taken) do
      if x > t - S and x < t + S then
        x, moved = t + S, true
      end
    end
  end
  return x
end
-- emit releases job j of tenant tn at slot (taken out of its lane or the
-- backlog by the caller): TAT, counters, the record, its lease, the reply.
function X.emit(tn, c, j, slot, spread)
  local t, p = c.t, c.p
  if spread then taken[#taken + 1] = slot end
  -- A slot later than the plan's next one is a gap in the plan: the send
  -- schedule's lateness (claim.lua) does not carry over it.
  local iv = interval(t, p)
  if slot > t.tat - (p.burst - j.cost) * iv then t.sslot = slot - j.cost * iv end
  c.head = nil
  local tat = t.tat -- GCRA: TAT past the slot given, by c·T (max without math.max's C call)
  if slot > tat then tat = slot end
  t.tat = tat + j.cost * iv
  PACE.take(t, p, slot, j.cost)
  t.qtok = t.qtok - j.cost
  t.released = t.released + 1
  t.rtok = t.rtok + j.cost
  t.lead = D
  j.gen = j.gen + 1
  -- When the tenant's send schedule runs late (claim.lua), the worker is
  -- told to claim at the slot plus that lateness (send_at): one claim, not
  -- two. The lease runs grace past it.
  local send_at = send_target(t, slot) or slot
  local queue, task_type = '', ''
  if j.type == 'task' then queue, task_type = task_route(j.id) end
  if X.eps >= 0 and j.type ~= 'task' and send_at <= NOW + X.eps then
    -- A pre-claim candidate (3e): claimed or written after the release loop.
    -- Its row is sized for the pre-claimed part (X.preclaim; no rehash).
    released[#released + 1] = {j.id, tn, j.type, j.cost, j.gen, slot, p.timeout_us, queue, task_type, send_at,
      nil, nil, nil, nil, nil, nil}
    j.tenant, j.c, j.r = tn, c, released[#released]
    X.pre[#X.pre + 1] = j
    return j.cost
  end
  released[#released + 1] = {j.id, tn, j.type, j.cost, j.gen, slot, p.timeout_us, queue, task_type, send_at}
  X.release_write(j, slot, send_at)
  return j.cost
end
X.pre = {}

-- X.release_write writes released job j's record and lease.
function X.release_write(j, slot, send_at)
  rcall('HSET', j.k or k_job(j.id), 'state', 'released', 'gen', istr(j.gen), 'slot', istr(slot), 'grace', GRACE_S,
    'resv', '0')
  lease_add(j.id, send_at + GRACE) -- written after the release loop (lib.lua leases_flush)
end

-- X.preclaim_all settles the pre-claim candidates after the release loop,
-- in release order, as claims at now right after the pass would: each is
-- claimed (X.preclaim) or written as released.
function X.preclaim_all()
  for _, j in ipairs(X.pre) do
    local r = j.r
    local pre, send = X.preclaim(j.tenant, j.c, j, r[6])
    if pre then
      r[10] = send
    else
      X.release_write(j, r[6], r[10])
    end
  end
end

-- X.leases_reversed reverses the order of the pass's lease additions
-- (lib.lua lease_add: deadline, id pairs), roughly ascending as released,
-- so that the ZADD writes the latest first: a small sorted set is a
-- listpack, where Redis inserts each member after scanning every member
-- ranked before it, and a member ranked first is inserted at once. The
-- set written is the same.
function X.leases_reversed()
  local a, i, k = LEASE_ADD, 1, #LEASE_ADD - 1
  while i < k do
    a[i], a[i + 1], a[k], a[k + 1] = a[k], a[k + 1], a[i], a[i + 1]
    i, k = i + 2, k - 2
  end
end

-- X.preclaim claims job j of tenant tn, released at slot, when 3e allows
-- it: the record's release and claim in one HSET (lifecycle.lua
-- CLAIM.run), the reply's pre-claimed part appended to its row j.r, and
-- the send µs; nil when the job is left to the claim (its record is then
-- still to write).
function X.preclaim(tn, c, j, slot)
  local t, p = c.t, c.p
  local target = send_target(t, slot) -- lib.lua: nil for an out-of-order job, left to the claim
  if not target or target > NOW + X.eps then return nil end
  if t.disabled == 1 or t.admin_paused == 1 or gate(t) > NOW or t.running >= p.concurrency then return nil end
  local r, o = j.pc, j.pco -- X.hmget read them with the job
  if not r then r, o = rcall('HMGET', j.k or k_job(j.id), unpack(X.PC_FIELDS)), 0 end
  local body = r[o + 4] or ''
  if r[o + 7] == '1' or #body > X.PC_BODY or X.pc_bytes + #body > X.PC_BYTES then return nil end
  X.pc_bytes = X.pc_bytes + #body
  j.tenant, j.slot, j.grace, j.resv, j.body = tn, slot, GRACE, 0, body
  j.bytes, j.attempt, j.first = tonum(r[o + 1]) or 0, tonum(r[o + 2]) or 0, tonum(r[o + 3]) or 0
  j.created, j.ups = tonum(r[o + 5]) or 0, r[o + 6] or ''
  local gen = istr(j.gen)
  return CLAIM.run(j, c, CLAIM.send(j, target, true, X.eps), true, -- lifecycle.lua
    {'gen', gen, 'slot', istr(slot), 'grace', GRACE_S, 'resv', '0', 'pc', gen}, nil, j.r)
end

-- X.hold holds job j of tenant tn, taken out of its lane or backlog, when
-- its destination (record field dst, enqueue.lua) is one of the tenant's
-- open destinations (<p>:{sN}:t:<tenant>:circ, finish.lua defer) with a
-- due after now: j waits in the delayed set as retrying until that due,
-- in that destination's held set (circuit_wake.lua brings it back when the
-- circuit closes), like a deferred job but without a slot, a concurrency
-- slot or a claim (docs/design.md §4.5); record field hd = 1. A job the
-- gate deferred (hd = 0, finish.lua defer: the scout, or one held long that
-- came back) is never held here: it goes to the gate, to probe or look
-- again. Read only for a tenant whose field cu (the latest such due) is
-- after now: no cost for the others.
function X.hold(tn, c, j)
  local r = rcall('HMGET', k_job(j.id), 'dst', 'hd')
  local dst = r[1]
  if not dst or dst == '' or r[2] == '0' then return false end
  local ck = k_tenant(tn) .. ':circ'
  local due = tonum(rcall('HGET', ck, dst))
  if not due or due <= NOW then return false end
  c.t.qtok = c.t.qtok - j.cost
  rcall('ZADD', K_DELAYED, istr(due), j.id)
  rcall('HSET', k_job(j.id), 'state', 'retrying', 'due', istr(due), 'hd', '1')
  rcall('ZADD', ck .. ':' .. dst, istr(due), j.id)
  X.held = X.held + 1
  return true
end
X.held = 0

X.HEAD1 = {true, 1} -- c.head of a tenant whose jobs all cost 1 (reschedule only reads it)

-- X.try releases tenant tn's next job if every rule allows it: its cost,
-- nil when none goes, false when the job was held (X.hold).
-- c.head keeps the next job it saw but did not release, for reschedule.
function X.try(tn, c)
  local t, p = c.t, c.p
  local g, ps = gate(t), PACE.slot(t, p, 1) -- lib.lua PACE: pacing by quota headers
  if ps > g then g = ps end
  c.head = nil
  if blocked(t, p) or g > HORIZON then return nil end
  local j, e
  if t.c1 == 1 then -- all its jobs cost 1 (lib.lua head_job): decide before taking one
    if t.qtok <= 0 then return nil end
    c.head = X.HEAD1
    if t.rtok > 0 and t.rtok + 1 > release_cap(t, p, D) then return nil end
    e = earliest(t, p, 1, NOW)
  else
    j = peek(tn, c)
    if not j then
      c.head = false
      return nil
    end
    c.head = {j.id, j.cost}
    if t.rtok > 0 and t.rtok + j.cost > release_cap(t, p, D) then return nil end
    e = earliest(t, p, j.cost, NOW)
  end
  if e > HORIZON then return nil end
  -- nb: a delayed job promoted ahead of its due time (g holds PACE.slot for cost 1)
  local slot = e -- max(e, g, the pacing slot, nb), the hot path's compares written out
  if g > slot then slot = g end
  if j then
    local ps, nb = PACE.slot(t, p, j.cost), j.nb
    if ps > slot then slot = ps end
    if nb and nb > slot then slot = nb end
  end
  local spread = slot >= NOW + L
  if spread then
    slot = spaced(slot)
    if slot > HORIZON then return nil end
  end
  if j then
    drop(tn, c, j.id, j.from_head)
  else
    j = pop_next(tn, c)
    if not j then
      c.head = false
      return nil
    end
  end
  if (c.t.st_cu or 0) > NOW and X.hold(tn, c, j) then
    c.head = nil
    return false
  end
  return X.emit(tn, c, j, slot, spread)
end

-- release_one is X.try past the held jobs, at most P of them a call (then
-- more: the next pass goes on).
local function release_one(tn, c)
  for _ = 0, P do
    local cost = X.try(tn, c)
    if cost ~= false then return cost end
  end
  more = 1
  return nil
end

-- Upstream demand of the pass (3b): name → {wanted, weight, unit, tenants}.
X.demand, X.order = {}, {}
function X.want(name, tn, c, h)
  if LN.expected(name, NOW) > NOW then return end -- asked already: the grant is on its way
  local d = X.demand[name]
  if not d then
    d = {wanted = 0, weight = 0, unit = 0, tenants = {}}
    X.demand[name] = d
    X.order[#X.order + 1] = name
  end
  if d.tenants[tn] then return end
  d.tenants[tn] = true
  d.weight = d.weight + c.p.weight
  d.wanted = d.wanted + rcall('ZCARD', LN.k_lane(tn, h.ups)) * h.cost
  local u = LN.get(name) -- a job costlier than the burst needs (c − b)·T more
  d.unit = mmax(d.unit, h.cost + mmax(0, h.cost - (u and u.b or h.cost)))
end

-- Aligned demand of the pass (3c): ups → {ups, cost, span, weight, earliest}.
X.aligned, X.al_order = {}, {}
function X.align(tn, c, h, base)
  local r = LN.al_get(h.ups)
  if (r and r.nx > NOW) or X.aligned[h.ups] then return end -- asked already
  local per = h.cost * interval(c.t, c.p) -- one job's calendar time: its slowest rate
  for _, n in ipairs(h.names) do
    local u = LN.get(n)
    if u then per = mmax(per, h.cost * u.iv) end
  end
  local span = mmin((rcall('ZCARD', LN.k_lane(tn, h.ups)) - 1) * per, mfloor(D / 2)) -- first slot to last
  X.aligned[h.ups] = {h.ups, h.cost, span, c.p.weight, base}
  X.al_order[#X.al_order + 1] = h.ups
end

-- al_lane_slot is lane head h's slot under its set's reservation (3c):
-- false when it has none it can use, nil when it must wait for it, else
-- the slot and whether it was spread. A reservation h cannot use stays:
-- another head of the set may fit it, and its ends tell a retried grant
-- from a new one (LN.al_save deletes it once every part has ended).
function X.al_lane_slot(h, base)
  local a = LN.al_slot(h, base, NOW)
  if not a then return false end
  if a > HORIZON then return nil end
  local spread = a >= NOW + L
  if spread then
    local s = spaced(a)
    if s > HORIZON or LN.al_slot(h, s, NOW) ~= s then return nil end
    a = s
  end
  return a, spread
end

-- lane_slot is the slot lane head h may leave at now, whether it was
-- spread and whether it is charged to its set's reservation (3c), or nil
-- (noting what it waits for as demand).
function X.lane_slot(tn, c, h, g)
  local t, p = c.t, c.p
  local base = mmax(earliest(t, p, h.cost, NOW), g, h.nb or 0)
  local multi = #h.names > 1
  if multi then
    local a, spread = X.al_lane_slot(h, base)
    if a ~= false then
      if a then return a, spread, true end
      return nil
    end
  end
  local slot, ok = base, true
  for _, n in ipairs(h.names) do
    local e = LN.earliest(n, h.cost, NOW)
    if not e then
      ok = false
    else
      slot = mmax(slot, e)
    end
  end
  if not ok then
    if multi then
      X.align(tn, c, h, base)
    else
      X.want(h.names[1], tn, c, h)
    end
    return nil
  end
  if slot > HORIZON then return nil end
  local spread = slot >= NOW + L
  if spread then
    slot = spaced(slot)
    if slot > HORIZON then return nil end
  end
  for _, n in ipairs(h.names) do
    if not LN.fits(LN.get(n), slot, h.cost) then
      if multi then X.align(tn, c, h, base) end -- no common instant
      return nil
    end
  end
  return slot, spread, false
end

-- release_lanes is release_one for a tenant holding lane jobs (uq > 0) or
-- visited for an upstream it waited on: the oldest eligible of its plain
-- next job and its lanes' heads (3b).
function X.release_lanes(tn, c)
  local t, p = c.t, c.p
  local g = mmax(gate(t), PACE.slot(t, p, 1))
  c.head = nil
  local heads = (t.uq > 0) and LN.heads(tn, t) or {}
  local named = {}
  for _, h in ipairs(heads) do
    for _, n in ipairs(h.names) do named[n] = true end
  end
  for n in pairs(X.waiting[tn] or {}) do -- no longer waiting on it: out of its set
    if not named[n] then rcall('ZREM', LN.k_wait(n), tn) end
  end
  X.waiting[tn] = nil
  if blocked(t, p) or g > HORIZON then return nil end
  local pj = peek(tn, c)
  if pj then
    pj.created = pj.from_head and -1 or (tonum(rcall('HGET', k_job(pj.id), 'created')) or 0)
    heads[#heads + 1] = pj
  end
  table.sort(heads, function(a, b)
    if a.created ~= b.created then return a.created < b.created end
    return a.id < b.id
  end)
  for _, h in ipairs(heads) do
    if not (t.rtok > 0 and t.rtok + h.cost > release_cap(t, p, D)) then
      local slot, spread, aligned
      if h.lane then
        slot, spread, aligned = X.lane_slot(tn, c, h, mmax(g, PACE.slot(t, p, h.cost)))
      else
        slot = mmax(earliest(t, p, h.cost, NOW), g, PACE.slot(t, p, h.cost), h.nb or 0)
        spread = slot >= NOW + L
        if spread then slot = spaced(slot) end
        if slot > HORIZON then slot = nil end
      end
      if slot then
        if h.lane then
          LN.remove(h, t)
          if aligned then
            LN.al_take(h, slot)
          else
            for _, n in ipairs(h.names) do LN.take(n, LN.get(n), slot, h.cost) end
          end
        else
          drop(tn, c, h.id, h.from_head)
        end
        return X.emit(tn, c, h, slot, spread)
      end
    end
  end
  return nil
end

-- X.spent says whether tenant tn, which has just released, can release
-- nothing more this pass, so it need not be visited again: it holds no
-- lane job, and its jobs all cost 1 and its earliest slot is already past
-- now + D (TAT only grows in the pass), or it is blocked (at its
-- concurrency or fair cap). Its next visit would have returned nil and
-- left its head as reschedule finds it (lib.lua head_job).
X.nspent = 0
function X.spent(tn, c)
  local t = c.t
  if t.uq > 0 or X.waiting[tn] then return false end
  return (t.c1 == 1 and earliest(t, c.p, 1, NOW) > HORIZON) or blocked(t, c.p) ~= nil
end

local vmax = vclock
for _, tn in ipairs(TENANT_ORDER) do
  local t = TENANTS[tn].t
  if vclock > t.vt then t.vt = vclock end
  heap_push({tn = tn, vt = t.vt, score = scores[tn] or NOW})
end
local visited, left, cap_reached = #heap, CAP, blocked_by_capacity
while #heap > 0 do
  if left == 0 then
    cap_reached = 1
    break
  end
  local top = heap_pop()
  local c = TENANTS[top.tn]
  c.touched = true
  local cost
  if c.t.uq > 0 or X.waiting[top.tn] then
    cost = X.release_lanes(top.tn, c)
  else
    cost = release_one(top.tn, c)
  end
  if cost then
    if c.t.vt > vmax then vmax = c.t.vt end
    c.t.vt = c.t.vt + mfloor(cost * VT_SCALE / c.p.weight)
    top.vt = c.t.vt
    if X.spent(top.tn, c) then X.nspent = X.nspent + 1 else heap_push(top) end
    if left > 0 then left = left - 1 end
  end
end
-- A spent tenant left the round after a release, with the capacity then
-- used up or not: as if it had been visited once more.
if left == 0 and X.nspent > 0 then cap_reached = 1 end

if truncated then
  if left ~= 0 then more = 1 else cap_reached = 1 end
end

-- 3d. The weight left waiting with no slot, for the budget's λ.
if CAP ~= 0 then
  X.wait_w = 0
  if cap_reached == 1 then
    for _, h in ipairs(heap) do
      local c = TENANTS[h.tn]
      if c.t.running + c.t.released == 0 and not blocked(c.t, c.p) then X.wait_w = X.wait_w + c.p.weight end
    end
  end
  if (tonum(rcall('HGET', FAIR.key(), 'r')) or 0) ~= X.wait_w then
    if X.wait_w > 0 then rcall('HSET', FAIR.key(), 'r', istr(X.wait_w)) else rcall('HDEL', FAIR.key(), 'r') end
  end
end

-- 3b. The upstreams asked for: their next grant is expected within D.
for _, name in ipairs(X.order) do
  local u = LN.ensure(name)
  u.nx, u.h = NOW + D, D
end
for _, ups in ipairs(X.al_order) do -- 3c: likewise for the sets asked for
  local r = LN.al_get(ups) or {parts = {}}
  LN.al_put(ups, {nx = NOW + D, h = D, parts = r.parts})
end

-- 3e. The pre-claims.
X.preclaim_all()

-- 4. Save and reschedule every tenant the pass changed.
X.leases_reversed()
leases_flush()
flush_tenants(cfg)
LN.save()
LN.al_save()
if vmax > vclock then rcall('SET', K_VCLOCK, istr(vmax)) end
-- 5. Check the tenant index's entries that are due (tenants.lua), a few;
-- when as many were due, the next pass comes soon (X.trim_at) for the rest.
X.trim_at = select(2, index_trim(INDEX_TRIM_MAX))

local next_wake = NOW -- more or capacity reached: work is left, no set is read (see the header)
if more == 0 and cap_reached == 0 then
  next_wake = waiting
  if X.trim_at and (next_wake == nil or X.trim_at < next_wake) then next_wake = X.trim_at end
  next_wake = sets_wake(D, next_wake) -- lib.lua
end

X.wanted = {}
for _, name in ipairs(X.order) do
  local d = X.demand[name]
  X.wanted[#X.wanted + 1] = {name, d.wanted, d.weight, d.unit}
end
X.al_out = {}
for _, ups in ipairs(X.al_order) do X.al_out[#X.al_out + 1] = X.aligned[ups] end
local reply = {'ok', NOW, more, cap_reached, next_wake or 0, promoted, swept, visited, X.wanted, X.al_out}
for _, r in ipairs(released) do reply[#reply + 1] = r end
return reply
