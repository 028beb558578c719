-- tenants.lua — the shard's tenant index, a tenant's view, the dead set's cursor and the
-- dead-letter requeue, shared by tenant_state, tenant_list, pass, replay,
-- dead_replay and dead_letters (assembled after lifecycle.lua, whose names it uses).
--
-- The tenant index <p>:{sN}:tenants is a ZSET: tenant → the time (µs) its
-- entry is next checked, until which the tenant is listed whatever else it
-- holds. A tenant enters it when its hash is created (lib.lua save_tenant,
-- one ZADD), its policy overrides are written (policy_put.lua) or a webhook
-- secret is added (secrets_write.lua). When it goes idle (lib.lua
-- expire_tenant) its entry moves to the later of its hash's expiry + 1 s
-- and the retention of the jobs that just ended (succeeded: finish.lua;
-- canceled: cancel.lua) — the same ZADD, no command added per job — so a
-- drained tenant stays listed while its finished jobs are kept. (A dead
-- letter keeps it listed through its dead set.) index_check says whether a
-- tenant still has state — its hash, its dead set, policy overrides or
-- secrets by API — and when to look again: after the longer of the two
-- expiring keys' TTLs (+1 s) when both expire, else INDEX_RECHECK.
-- index_trim (every pass) checks at most INDEX_TRIM_MAX due entries and
-- removes those with no state left, and a pass that found that many due
-- asks for the next one 100 ms on, so an entry outlives its tenant's state
-- by at most INDEX_RECHECK plus the time the passes need to reach it (a
-- mass expiry: its count ÷ (INDEX_TRIM_MAX × 10/s × shards)); tenant_list
-- removes the ones it finds empty. tenant_list walks the index with ZSCAN,
-- which returns every entry present throughout the walk at least once.
--
-- The name set <p>:{sN}:tenant_names is a ZSET of the same members, each at
-- score 0, so that ZRANGE BYLEX pages it in name order (tenant_names.lua):
-- every write that adds an index entry for a tenant new to it (save_tenant's
-- creation, policy_put, tenant_backfill) adds the name too, and every
-- removal (index_remove) removes both. (expire_tenant's ZADD only moves an
-- existing entry's check time — except for a tenant whose state predates the
-- index, which tenant_backfill adds to both.)

local INDEX_TRIM_MAX = 64

-- AGG.dead_gone takes tenants whose dead set is gone out of the dead
-- aggregates (lib.lua AGG: dead:n, dead:x, the dead count) and out of the
-- other aggregates' zsets named in also. (A field of AGG, not a local:
-- pass.lua's EVAL build, this file included, is at Lua's 200-locals limit.)
function AGG.dead_gone(ts, also)
  local n = 0
  for _, v in ipairs(rcall('HMGET', AGG.key('dead:n'), unpack(ts))) do n = n + (tonum(v) or 0) end
  if n ~= 0 then rcall('HINCRBY', AGG.key('agg'), 'dead', istr(-n)) end
  rcall('HDEL', AGG.key('dead:n'), unpack(ts))
  rcall('ZREM', AGG.key('dead:x'), unpack(ts))
  for _, key in ipairs(also) do rcall('ZREM', AGG.key(key), unpack(ts)) end
end

-- index_remove takes tenants out of the index and its name set, and out
-- of the aggregates (lib.lua AGG): a gate whose end passed and the letters
-- of a dead set its TTL removed (taken off the dead count) leave with them.
local function index_remove(gone)
  if #gone == 0 then return end
  rcall('ZREM', k_index(), unpack(gone))
  rcall('ZREM', k_names(), unpack(gone))
  AGG.dead_gone(gone, {'top', 'gate:a', 'gate:u', 'gate:d', 'gate:p'})
end

-- keys_left says whether any of tn's own keys is left: its hash, its dead
-- set or its secrets by API (one EXISTS).
local function keys_left(tn)
  return rcall('EXISTS', k_tenant(tn), k_dead(tn), k_secrets(tn)) > 0
end

-- index_check returns when to check tn's entry again (µs), or nil when tn
-- has no state left; and whether its dead set is gone. An entry comes due
-- when its tenant's keys have expired, so most checks find nothing:
-- keys_left and the policy's HEXISTS say so (the TTLs are read only for a
-- tenant with a key left).
local function index_check(tn)
  if not keys_left(tn) then
    if rcall('HEXISTS', K_POLICY, tn) == 0 then return nil end
    return NOW + INDEX_RECHECK, true
  end
  local ttl, dead_gone = -2, false
  for i, key in ipairs({k_tenant(tn), k_dead(tn)}) do
    local x = rcall('PTTL', key)
    if i == 2 then dead_gone = x == -2 end
    if x == -1 then
      ttl = -1
      break
    end
    if x > ttl then ttl = x end
  end
  if ttl == -2 and rcall('HEXISTS', K_POLICY, tn) == 0 and rcall('EXISTS', k_secrets(tn)) == 0 then return nil end
  if ttl >= 0 then return NOW + mmin(INDEX_RECHECK, (ttl + 1000) * 1000), dead_gone end
  return NOW + INDEX_RECHECK, dead_gone
end

-- index_trim checks up to n entries due by now: removes the tenants with no
-- state left, pushes the others' next check later. Returns the removed
-- count and, when n entries were due (more may be), when the next check
-- should come: 100 ms on (the pass's next wake), so that a mass expiry —
-- a million tenants drained at once — leaves the index in seconds, not at
-- n entries per idle pass (one per dispatch.max_sleep).
local function index_trim(n)
  local key = k_index()
  local due = rcall('ZRANGEBYSCORE', key, '-inf', istr(NOW), 'LIMIT', 0, n)
  local gone, undead = {}, {}
  for _, tn in ipairs(due) do
    local at, dead_gone = index_check(tn)
    if at then
      rcall('ZADD', key, istr(at), tn)
      -- A tenant that stays listed (overrides, secrets) leaves the dead
      -- aggregates once its dead set has expired.
      if dead_gone then undead[#undead + 1] = tn end
    else
      gone[#gone + 1] = tn
    end
  end
  index_remove(gone)
  if #undead > 0 then AGG.dead_gone(undead, {}) end
  if #due == n then return #gone, NOW + 100000 end
  return #gone, nil
end

-- has_state says whether tn has state: its hash, dead letters, secrets by
-- API (keys_left), policy overrides, or an index entry not yet due (jobs
-- ended within their retention; see above).
local function has_state(tn)
  return keys_left(tn) or rcall('HEXISTS', K_POLICY, tn) == 1
    or (tonum(rcall('ZSCORE', k_index(), tn)) or 0) > NOW
end

-- each_with_state calls f(tn) for each tenant of names that has state and
-- takes the others out of the index and name set (index_remove).
local function each_with_state(names, f)
  local gone = {}
  for _, tn in ipairs(names) do
    if has_state(tn) then f(tn) else gone[#gone + 1] = tn end
  end
  index_remove(gone)
end

-- oldest_queued is the created time (µs) of the older of the tenant's two
-- next jobs — the head lane's first and the backlog's first — or -1 when
-- it has no queued job. A canceled tombstone counts as its job would.
local function oldest_queued(tn, t)
  local oldest = -1
  local ids = {rcall('LINDEX', k_queue(tn), 0)}
  if t.hlen > 0 then ids[2] = rcall('ZRANGE', k_head(tn), 0, 0)[1] end
  for i = 1, 2 do
    local c = ids[i] and tonum(rcall('HGET', k_job(ids[i]), 'created'))
    if c and (oldest < 0 or c < oldest) then oldest = c end
  end
  return oldest
end

-- policy_upstreams is p with tn's default upstreams (policy field
-- upstreams, a list merge_policy does not carry: no script uses it): the
-- tenant's entry's when it sets them, else the defaults'. p is shared and
-- read-only (merged), so the list goes on a copy; an empty list is left out
-- (the view reads none).
local function policy_upstreams(p, tn)
  local ups
  for _, raw in ipairs(rcall('HMGET', K_POLICY, tn, '*')) do
    if raw then
      local ok, v = pcall(cjson.decode, raw)
      if ok and type(v) == 'table' and type(v.upstreams) == 'table' then ups = v.upstreams break end
    end
  end
  if not ups or #ups == 0 then return p end
  local out = {}
  for k, v in pairs(p) do out[k] = v end
  out.upstreams = ups
  return out
end

-- tenant_view is tenant_state.lua's reply for tn (no writes): see there.
local function tenant_view(tn)
  local p, version = load_policy(tn)
  local exists = rcall('EXISTS', k_tenant(tn))
  local t = load_tenant(tn, p)
  rescale_tat(t, p, NOW)
  refill(t, p, NOW)
  local queued = rcall('LLEN', k_queue(tn)) + rcall('ZCARD', k_head(tn)) + t.uq
  local score = tonum(rcall('ZSCORE', K_READY, tn)) or -1
  local oldest = -1
  if queued > 0 then oldest = oldest_queued(tn, t) end
  return {'ok', NOW, exists, t.live, t.bytes, queued, t.qtok, t.running, t.released,
    t.atok, score, t.tat, t.paused_until, t.admin_paused, t.disabled, version, cjson.encode(policy_upstreams(p, tn)),
    t.rtok, t.admin_until, t.vt, rcall('ZCARD', k_dead(tn)),
    factor(t, p), interval(t, p), t.cut_until, oldest, t.in_m, t.in_c, t.in_p,
    t.q_unit, t.q_rem, t.q_lim, t.q_reset, t.qh, PACE.interval(t, p), t.q_fly}
end

-- dead_start is the rank in dead set key at which a page after the cursor
-- (cscore, cid) — the death time and id of the last letter seen, cscore < 0:
-- none — starts: the set orders (score, id), so letters replayed or trimmed
-- in between shift nothing.
local function dead_start(key, cscore, cid)
  if cscore < 0 then return 0 end
  local start = rcall('ZCOUNT', key, '-inf', '(' .. istr(cscore))
  for _, m in ipairs(rcall('ZRANGEBYSCORE', key, istr(cscore), istr(cscore))) do
    if m <= cid then start = start + 1 end
  end
  return start
end

-- requeue_dead moves dead job j (load_job's) of tenant t to the backlog's
-- tail (docs/design.md §2, dead → queued): same id, gen + 1, attempts and attempt
-- log kept, admission not charged, caps not applied; out of the dead set,
-- `ended`, `due` and `reason` cleared (a letter that dies again is told
-- why anew), the record and its idempotency key persisted.
-- The caller reschedules, saves and expires t, then checks the wake.
local function requeue_dead(j, t)
  local tn, jk = j.tenant, k_job(j.id)
  rcall('ZREM', k_dead(tn), j.id)
  AGG.dead_add(tn, -1) -- lib.lua
  if j.ups ~= '' then
    LN.push(j, t, false) -- lanes.lua (counts qtok)
    t.qtok = t.qtok - j.cost
  else
    rcall('RPUSH', k_queue(tn), j.id)
  end
  rcall('HSET', jk, 'state', 'queued', 'gen', j.gen + 1)
  rcall('HDEL', jk, 'ended', 'due', 'reason')
  rcall('PERSIST', jk)
  if j.idem ~= '' then rcall('PERSIST', k_idem(tn, j.idem)) end
  t.live = t.live + 1
  t.bytes = t.bytes + j.bytes
  t.qtok = t.qtok + j.cost
  if j.cost > 1 then t.c1 = 0 end -- lib.lua head_job
end
