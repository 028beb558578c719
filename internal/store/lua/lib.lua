-- lib.lua — shared prologue of every dispatch script (docs/design.md §3).
--
-- Assembled at init (scripts.go) as:  BUILTIN table, clock.lua, this file,
-- lifecycle.lua, the script.
--
-- Conventions every script follows:
--   KEYS[1]  the shard's ready set "<p>:{sN}:ready" — the script's shard key
--   ARGV[1]  the shard base "<p>:{sN}:"; KEYS[1] must equal ARGV[1] .. "ready".
--            Every other key is built from it by the key builders below, so
--            each key a script touches carries the shard's hash tag.
--   ARGV[2]  now in µs; "0" means Redis TIME (production). Tests pass a fake now.
--   ARGV[3…] the script's own arguments.
-- Replies are arrays whose first element is a status: "ok" or an error code
-- ("not_found", "conflict", "version_mismatch", "invalid") that the Go runner
-- maps to a typed error. Numbers cross the boundary as integers only; numbers
-- turned into strings go through istr (Lua's tostring would print 1.7e+15).
-- Scripts parse and validate their arguments and read the policy, the tenant
-- and the records they decide on before their first write, so a refusal or
-- an error leaves nothing half-done. The reads that follow writes are
-- reschedule's (the head of the tenant's lists, the head job's cost), the
-- wake check's (the first scores of ready and delayed), the attempt log's,
-- the dead-set trim's, and the pass's release loop (the next job of each
-- tenant, tombstones skipped) and next-wake reads: keys of the script's own
-- slot, plain reads that cannot fail. (The pass reads every policy and
-- tenant it may touch before its first write; its last step, the tenant
-- index's trim (tenants.lua), reads and writes index entries after it.)

-- Per-call state. Every script call starts with begin() (assembled ahead of
-- the script's body, or run by the Redis Functions wrapper): it sets the
-- shard base, now and the key names from KEYS/ARGV and clears the per-call
-- caches (RESETS), so helpers defined once, at library load, serve every call.
local BASE, NOW
-- Aliases of the globals the hot paths call, bound by begin() (a library's
-- load may not read the standard libraries): an upvalue each instead of
-- two table lookups per use.
local rcall, tonum, mmax, mmin, mfloor
local K_READY, K_DELAYED, K_LEASES, K_POLICY, K_WAKE, K_VCLOCK, K_FINISHED
local RESETS = {}

-- Numbers given to redis.call go as istr strings on the hot paths: Redis
-- formats a Lua number with %.17g, several times the cost of an integer's.
-- string.format is itself a C call, a sprintf and a string to intern, so
-- istr remembers the values a call formats again and again: now (the
-- ended, due and index times of every job a call ends) and the integers
-- 0 … 4095 (counts, attempts, statuses, TTLs in seconds), kept across
-- calls (a number's text never changes). In a block: the prologue's
-- locals are few.
local istr
do
  local now_n, now_s, small = nil, nil, {}
  istr = function(n)
    if n == NOW then
      if now_n ~= n then now_n, now_s = n, string.format('%d', n) end
      return now_s
    end
    local s = small[n]
    if s then return s end
    s = string.format('%d', n)
    if n >= 0 and n < 4096 then small[n] = s end
    return s
  end
end

-- The key names of the last call's shard stand for a call on the same shard
-- (with Redis Functions: the library's scope; BASE and K_READY are only
-- ever set together, checked): not built again.
local function begin()
  local base = ARGV[1]
  if base ~= BASE or KEYS[1] ~= K_READY then
    if type(base) ~= 'string' or KEYS[1] ~= base .. 'ready' then
      return redis.error_reply('ERR sluice: KEYS[1] must be ARGV[1] .. "ready"')
    end
    BASE = base
    K_READY = KEYS[1]
    K_DELAYED = BASE .. 'delayed'
    K_LEASES = BASE .. 'leases'
    K_POLICY = BASE .. 'policy'
    K_WAKE = BASE .. 'wake'
    K_VCLOCK = BASE .. 'vclock'
    K_FINISHED = BASE .. 'finished' -- finish.lua's counter, finished.lua's read
  end
  NOW = clock(ARGV[2]) -- clock.lua
  if not rcall then rcall, tonum, mmax, mmin, mfloor = redis.call, tonumber, math.max, math.min, math.floor end
  for i = 1, #RESETS do RESETS[i]() end -- (a numeric for: ipairs costs a C call a step)
  return nil
end

local function k_tenant(tn) return BASE .. 't:' .. tn end
local function k_queue(tn) return BASE .. 't:' .. tn .. ':q' end
local function k_head(tn) return BASE .. 't:' .. tn .. ':head' end
local function k_dead(tn) return BASE .. 't:' .. tn .. ':dead' end
local function k_job(id) return BASE .. 'j:' .. id end
local function k_idem(tn, key) return BASE .. 'idem:' .. tn .. ':' .. key end
local function k_secrets(tn) return BASE .. 'sec:' .. tn end
-- The tenant index (tenant → next check µs) and its name set (every member
-- at score 0, in name order): the same members (tenants.lua).
local function k_index() return BASE .. 'tenants' end
local function k_names() return BASE .. 'tenant_names' end

-- secret_live: the tenant holds a webhook secret by API that has not
-- expired (secrets_write.lua keeps the summary field '~live': -1 when one
-- never expires, else the latest expiry µs).
local function secret_live(tn)
  local v = rcall('HGET', k_secrets(tn), '~live')
  return v == '-1' or (tonum(v) or 0) > NOW
end


-- Policy: BUILTIN ← field "*" ← field <tenant>, merged on every call, so a
-- policy write is effective on the very next decision. Returns the effective
-- params and the tenant overrides' version (0 when none).
-- decode_policy decodes one stored entry; absent is {}. A corrupt entry
-- raises an error, which is safe: it happens in the read phase.
-- MERGED caches the merge results by the stored texts of the layers
-- (MERGED[defaults][overrides], '' for absent): with
-- Redis Functions it outlives the call (the library's scope), so most calls
-- neither decode JSON nor copy BUILTIN; with EVAL it lasts one call. The
-- key is the exact text, so a policy write is effective on the very next
-- decision all the same. Bounded: cleared when it holds MERGED_MAX entries.
local MERGED, MERGED_N, MERGED_MAX = {}, 0, 512

local function decode_policy(raw)
  if not raw then return {} end
  local ok, v = pcall(cjson.decode, raw)
  if not ok or type(v) ~= 'table' then
    error({err = 'ERR sluice: corrupt policy entry in ' .. K_POLICY})
  end
  return v
end

local function merge_policy(defaults, overrides)
  local p = {}
  for k, v in pairs(BUILTIN) do p[k] = v end
  for _, layer in ipairs({defaults, overrides}) do
    for k, v in pairs(layer) do
      if (BUILTIN[k] ~= nil and type(v) == 'number') or (k == 'result_headers' and type(v) == 'table') then
        p[k] = v -- result_headers: a list the scripts carry but never read
      end
    end
  end
  return p
end

-- merged returns {params, overrides' version} for the stored texts of the
-- defaults and the overrides (either absent: nil); the tables are shared
-- and read-only.
local function merged(raw_defaults, raw_overrides)
  local d, o = raw_defaults or '', raw_overrides or ''
  local by = MERGED[d]
  local m = by and by[o]
  if m then return m end
  local ov = decode_policy(raw_overrides)
  m = {merge_policy(decode_policy(raw_defaults), ov), tonum(ov.version) or 0}
  if MERGED_N >= MERGED_MAX then MERGED, MERGED_N, by = {}, 0, nil end
  if not by then
    by = {}
    MERGED[d] = by
  end
  by[o], MERGED_N = m, MERGED_N + 1
  return m
end

-- load_policy reads the shard's policy epoch once per call and the tenant's
-- overrides; the returned table is read-only. policy_put.lua stamps every
-- write of the hash with a new epoch (field "#v", not a tenant id); while
-- it is the same, the defaults' text and the tenants' are remembered across
-- calls (POLICY_TEXTS, per policy key, with Redis Functions: the library's
-- scope), so the defaults are read once per epoch (a call reads "#v" and
-- the tenant's field) and a tenant's overrides once per epoch and call.
-- Bounded: a key's texts are dropped at POLICY_TEXTS_MAX entries (a
-- tenant's overrides and its secrets count one each), the whole cache at
-- POLICY_KEYS_MAX keys. The bound is small on purpose: what the library
-- keeps stays in the Functions VM's heap, and a heap that grows with the
-- tenants costs every call (Lua's collector walks it, from cold memory):
-- at 10 000 entries a key (16 shards holding 100 000 tenants: a 12 MB
-- heap) a drain's Redis CPU per job was ~20 % higher (store
-- BenchmarkManyTenants: 119–121 µs against 97 at 512). A shard whose
-- active tenants outnumber the bound gains little from remembering them:
-- what a miss costs is the tenant's field read in its call (an HGET; for a
-- claim, an HGETALL of its secrets). A hash without an epoch (written
-- before it existed) is read every call, defaults and all.
-- The shard's aggregates (AGG, below save_tenant); declared here for
-- load_policy (AGG.cur), load_tenant and save_tenant.
local AGG = {}
RESETS[#RESETS + 1] = function() AGG.cur = nil end
local POLICY_TEXTS, POLICY_KEYS, POLICY_TEXTS_MAX, POLICY_KEYS_MAX = {}, 0, 512, 4096
local POLICY_DEFAULTS, POLICY_RAW = nil, nil
RESETS[#RESETS + 1] = function() POLICY_DEFAULTS, POLICY_RAW = nil, nil end

-- policy_texts returns the remembered texts of K_POLICY at epoch v (nil:
-- none): the tenants' policies (raw) and, for claims, their secrets hashes
-- (sec; see signing_set).
-- d: the defaults' text at v (false: absent), kept as field d.
local function policy_texts(v, d)
  local c = POLICY_TEXTS[K_POLICY]
  if not v then
    if c then POLICY_TEXTS[K_POLICY], POLICY_KEYS = nil, POLICY_KEYS - 1 end
    return nil
  end
  if c and c.v == v and c.n < POLICY_TEXTS_MAX then return c end
  if not c then
    if POLICY_KEYS >= POLICY_KEYS_MAX then POLICY_TEXTS, POLICY_KEYS = {}, 0 end
    POLICY_KEYS = POLICY_KEYS + 1
  end
  c = {v = v, d = d, n = 0, raw = {}, sec = {}}
  POLICY_TEXTS[K_POLICY] = c
  return c
end

local function load_policy(tn)
  local raw
  if POLICY_DEFAULTS == nil then
    local c, v = POLICY_TEXTS[K_POLICY], nil
    -- Field "#ab" (an aggregates build's cursor, AGG.cur) rides along.
    if c then -- the defaults at epoch c.v are known: read them only when "#v" moved
      local r = rcall('HMGET', K_POLICY, '#v', '#ab', tn)
      v, raw = r[1], r[3]
      AGG.cursor(r[2])
      if v == c.v then POLICY_DEFAULTS = c.d else POLICY_DEFAULTS = rcall('HGET', K_POLICY, '*') or false end
    else
      local r = rcall('HMGET', K_POLICY, '*', '#v', '#ab', tn)
      POLICY_DEFAULTS, v, raw = r[1] or false, r[2], r[4]
      AGG.cursor(r[3])
    end
    POLICY_RAW = policy_texts(v, POLICY_DEFAULTS)
  else
    local known = POLICY_RAW and POLICY_RAW.raw[tn]
    if known ~= nil then
      raw = known or nil
    else
      raw = rcall('HGET', K_POLICY, tn)
    end
  end
  if POLICY_RAW and POLICY_RAW.raw[tn] == nil then
    POLICY_RAW.raw[tn], POLICY_RAW.n = raw or false, POLICY_RAW.n + 1
  end
  local m = merged(POLICY_DEFAULTS or nil, raw or nil)
  return m[1], m[2]
end

-- signing_set appends to out the tenant's signing state: now, its policy
-- p's unsigned flag (0|1), then its live secrets by API (expires = 0 or >
-- now), four values each: id, created µs, expires µs (0 = never), sealed —
-- in no order; secrets_read's and claim's reply (Go: decodeSecretSet).
-- Returns out, or nil when a stored secret is corrupt.
-- With remember (claim.lua), the hash read is remembered across calls in
-- the policy epoch's entry (POLICY_TEXTS, field sec; load_policy, which
-- the caller has run for the tenant, found it): secrets_write.lua renews
-- the epoch "#v" with every write of a secrets hash, so a tenant's secrets
-- are read once per epoch instead of once per claim call. A secret's
-- expiry is in the secret, checked against now here. A hash without an
-- epoch is read every time.
local function signing_set(tn, p, out, remember)
  out[#out + 1] = NOW
  out[#out + 1] = p.unsigned == 1 and 1 or 0
  local known = remember and POLICY_RAW and POLICY_RAW.sec
  local all = known and known[tn]
  if all == false then return out end -- known to hold none (remembered as false: no table kept)
  if not all then
    all = rcall('HGETALL', k_secrets(tn))
    if known then known[tn], POLICY_RAW.n = #all > 0 and all, POLICY_RAW.n + 1 end
  end
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 1) ~= '~' then
      local created, expires, sealed = string.match(all[i + 1], '^(%d+) (%d+) (%S+)$')
      if not created then return nil end
      local e = tonum(expires)
      if e == 0 or e > NOW then
        out[#out + 1] = all[i]
        out[#out + 1] = tonum(created)
        out[#out + 1] = e
        out[#out + 1] = sealed
      end
    end
  end
  return out
end

-- Tenant state (hash t:<tenant>). Absent fields read as 0; a tenant seen for
-- the first time starts with a full admission bucket. Fields: see tenant.go.
-- The state is packed in the hash's one field s: the values of T_FIELDS, in
-- order, as little-endian doubles (struct T_PACK; every value is an integer
-- below 2^53, so exact), read with one HGETALL and one struct.unpack and
-- written with one HSET — a listpack's fields cost a scan each, and their
-- text a conversion each. A field of T_FIELDS stored under its own name
-- (the representation before s, or a test's write) overrides s, and
-- save_tenant folds it into s and deletes it: an older tenant is migrated
-- on its first save. Field rs (sched_sig's digest, a string) is stored
-- beside s, in the same HSET. Field cu (t.st_cu, 0 when absent: the latest
-- due of the tenant's jobs deferred by a destination's circuit) is written
-- by finish.lua defer alone and deleted by circuit_wake.lua. A field ra (the ring of the tenant's last
-- attempts before it got a key of its own, recent.lua) is deleted by the
-- next save, as the named fields are. load_tenant remembers what was stored
-- (fields st_packed, st_rs, st_named, st_ra of the tenant table) so that
-- save_tenant writes only what changed, and whether the tenant was busy
-- (st_busy, see expire_tenant); tenant_of sizes the table for them and for
-- rs, so none of them grows it.
local T_FIELDS = {'tat', 'tat_t', 'tat_b', 'atok', 'ats', 'live', 'bytes', 'qtok',
  'running', 'released', 'rtok', 'hseq', 'hlen', 'paused_until', 'admin_paused', 'admin_until',
  'disabled', 'vt', 'lead', 'rf', 'cut_until', 'stat', 'sslot', 'slast', 'c1', 'dz',
  'in_m', 'in_c', 'in_p', 'uq', 'useq', 'q_unit', 'q_rem', 'q_lim', 'q_reset', 'q_fly', 'q_next', 'fw'}
local T_PACK = '<dddddddddddddddddddddddddddddddddddddd' -- #T_FIELDS doubles (a test checks)
-- A tenant's packed state leaves out its trailing zero fields (a queued
-- tenant's last ones — lanes, pacing, fw — are 0): the bytes saved keep its
-- hash in a smaller allocator class (448 → 320 bytes of listpack). A
-- shorter s reads its missing fields as 0 (load_tenant), so this changes no
-- value. T_FIELDS.used(t) is the number of fields up to the last that is
-- not 0; T_FIELDS.fmt[n] packs the first n (struct.pack ignores the
-- values past its format), built at the first call.
function T_FIELDS.used(t)
  for i = #T_FIELDS, 1, -1 do
    if t[T_FIELDS[i]] ~= 0 then return i end
  end
  return 0
end
local T_INDEX, T_ZERO -- built at the first call (a library's load may not use string)
RESETS[#RESETS + 1] = function()
  if T_INDEX then return end
  T_INDEX, T_ZERO = {}, string.rep('\0', 8 * #T_FIELDS)
  T_FIELDS.fmt = {[0] = '<'}
  for n = 1, #T_FIELDS do T_FIELDS.fmt[n] = '<' .. string.rep('d', n) end
  T_FIELDS.pad = {} -- T_FIELDS.pad[8n]: the zeros a field s of n values lacks (load_tenant)
  for n = 0, #T_FIELDS - 1 do T_FIELDS.pad[8 * n] = string.sub(T_ZERO, 8 * n + 1) end
  for i, f in ipairs(T_FIELDS) do T_INDEX[f] = i end
end
local busy

-- tenant_of unpacks field s into a tenant table; pack_tenant packs one.
-- Both name T_FIELDS in its order, written out (a test checks): no loop,
-- no table but the tenant's.
-- The tenant tables of a call are reused by the calls after it (with Redis
-- Functions: the library's scope; T_FIELDS.pool, at most POOL_MAX): a new
-- one is 64 hash nodes (~3 KiB) to allocate, fill key by key and collect —
-- the allocation's share of Lua's collector, which walks the library's
-- heap, costs more than the rest of the load. A table lent to a call
-- (T_FIELDS.lent, by load_tenant, tenant_of's one caller) goes back to the
-- pool at the next call's begin(): no script keeps a tenant table past its
-- call. A reused table gets every value of T_FIELDS here; load_tenant sets
-- the others (rs, qh, st_*) on every table it returns. Every key a script
-- sets on a tenant table is one of the constructor's (a test checks), so
-- a reused table holds no key a new one would not.
T_FIELDS.pool, T_FIELDS.lent, T_FIELDS.POOL_MAX = {}, {}, 128
RESETS[#RESETS + 1] = function()
  local lent, pool = T_FIELDS.lent, T_FIELDS.pool
  for i = 1, #lent do
    if #pool < T_FIELDS.POOL_MAX then pool[#pool + 1] = lent[i] end
    lent[i] = nil
  end
end
local function tenant_of(s)
  local tat, tat_t, tat_b, atok, ats, live, bytes, qtok, running, released, rtok, hseq, hlen,
    paused_until, admin_paused, admin_until, disabled, vt, lead, rf, cut_until, stat, sslot,
    slast, c1, dz, in_m, in_c, in_p, uq, useq, q_unit, q_rem, q_lim, q_reset, q_fly,
    q_next, fw = struct.unpack(T_PACK, s)
  local pool = T_FIELDS.pool
  local t = pool[#pool]
  if t then
    pool[#pool] = nil
    t.tat = tat; t.tat_t = tat_t; t.tat_b = tat_b; t.atok = atok; t.ats = ats; t.live = live; t.bytes = bytes;
    t.qtok = qtok; t.running = running; t.released = released; t.rtok = rtok; t.hseq = hseq; t.hlen = hlen;
    t.paused_until = paused_until; t.admin_paused = admin_paused; t.admin_until = admin_until;
    t.disabled = disabled; t.vt = vt; t.lead = lead; t.rf = rf; t.cut_until = cut_until; t.stat = stat;
    t.sslot = sslot; t.slast = slast; t.c1 = c1; t.dz = dz; t.in_m = in_m; t.in_c = in_c; t.in_p = in_p;
    t.uq = uq; t.useq = useq; t.q_unit = q_unit; t.q_rem = q_rem; t.q_lim = q_lim; t.q_reset = q_reset;
    t.q_fly = q_fly; t.q_next = q_next; t.fw = fw;
    return t
  end
  return {tat = tat, tat_t = tat_t, tat_b = tat_b, atok = atok, ats = ats, live = live,
    bytes = bytes, qtok = qtok, running = running, released = released, rtok = rtok, hseq = hseq,
    hlen = hlen, paused_until = paused_until, admin_paused = admin_paused,
    admin_until = admin_until, disabled = disabled, vt = vt, lead = lead, rf = rf,
    cut_until = cut_until, stat = stat, sslot = sslot, slast = slast, c1 = c1, dz = dz,
    in_m = in_m, in_c = in_c, in_p = in_p, uq = uq, useq = useq, q_unit = q_unit, q_rem = q_rem,
    q_lim = q_lim, q_reset = q_reset, q_fly = q_fly, q_next = q_next, fw = fw,
    -- Set by load_tenant, sized in here: added later, they would rehash the
    -- table (a constructor's nil fields still count for its size).
    rs = '', qh = '', st_cu = nil, st_w = nil, st_packed = nil, st_rs = nil, st_ra = nil, st_named = nil, st_busy = nil,
    st_qh = nil, st_open = nil, st_run = nil, st_ga = nil, st_gu = nil, st_gd = nil, -- st_w: its policy weight (FAIR)
    st_k = nil, -- its key, k_tenant's (built once a call)
    st_p = nil, st_f0 = nil, st_ff = nil, -- its policy of the load; fast-finish fields f0 and ff as loaded (T_FIELDS.fold)
    st_rsnow = nil, st_rscode = nil} -- rs just computed (T_FIELDS.mint), and its blocked code
end
local function pack_tenant(t)
  return struct.pack(T_FIELDS.fmt[T_FIELDS.used(t)], t.tat, t.tat_t, t.tat_b, t.atok, t.ats, t.live, t.bytes, t.qtok,
    t.running, t.released, t.rtok, t.hseq, t.hlen, t.paused_until, t.admin_paused, t.admin_until,
    t.disabled, t.vt, t.lead, t.rf, t.cut_until, t.stat, t.sslot, t.slast, t.c1, t.dz,
    t.in_m, t.in_c, t.in_p, t.uq, t.useq, t.q_unit, t.q_rem, t.q_lim, t.q_reset, t.q_fly, t.q_next, t.fw)
end

local function load_tenant(tn, p)
  local key = k_tenant(tn)
  local all = rcall('HGETALL', key)
  local packed, rs, ra, named, qh, cu, ff, f0 = nil, '', false, nil, '', 0, nil, nil
  for i = 1, #all, 2 do
    local f = all[i]
    if f == 's' then
      packed = all[i + 1]
    elseif f == 'rs' then
      rs = all[i + 1]
    elseif f == 'qh' then
      qh = all[i + 1]
    elseif f == 'cu' then
      cu = tonum(all[i + 1]) or 0
    elseif f == 'ra' then
      ra = true
    elseif f == 'ff' then
      ff = tonum(all[i + 1])
    elseif f == 'f0' then
      f0 = tonum(all[i + 1])
    elseif T_INDEX[f] then
      named = named or {}
      named[#named + 1] = f
      named[f] = tonum(all[i + 1])
    end
  end
  local s = packed or T_ZERO
  -- A field s packed before the last fields existed is shorter: they read as 0.
  if #s < #T_ZERO then s = s .. (T_FIELDS.pad[#s] or string.sub(T_ZERO, #s + 1)) end
  local t = tenant_of(s)
  T_FIELDS.lent[#T_FIELDS.lent + 1] = t -- back to the pool at the next call
  if ff or f0 then T_FIELDS.fold(t, f0 or 0, ff or 0) end -- the fast finishes since the last save
  t.st_p, t.st_f0, t.st_ff, t.st_rsnow = p, f0 or 0, ff or 0, nil
  -- What the aggregates counted of the tenant: its packed state's (a field
  -- stored by name is counted at the save that folds it in).
  t.st_open, t.st_run = t.live + t.running, t.running
  t.st_ga, t.st_gu, t.st_gd = AGG.gates(t)
  t.rs, t.qh, t.st_qh, t.st_w, t.st_cu = rs, qh, qh, p.weight or 1, cu
  if named then
    for _, f in ipairs(named) do t[f] = named[f] or 0 end
  end
  if not packed and not (named and named.atok) then t.atok = p.admit_burst; t.ats = NOW end
  t.st_packed, t.st_rs, t.st_ra, t.st_named, t.st_busy, t.st_k = packed, rs, ra, named, busy(t), key
  return t
end

-- Fair shares of the workers' pool (docs/design.md §2.2 "Fair shares of
-- the pool"; issue #32). Field fw of a tenant is the weight it adds to its shard's
-- held weight, field w of hash <p>:{sN}:fair (FAIR.key): its policy weight
-- while it holds a worker slot (running + released > 0), else 0. Every
-- save_tenant brings it up to date (FAIR.count: one HINCRBY when it moved,
-- or one per pass or batch of finishes, FAIR.defer; a sum of 0 is deleted,
-- so an idle shard keeps no key), so the field is the sum of fw over the
-- shard's tenants, whichever script changed them. Field r of the same hash is the weight of the tenants the
-- shard's last pass that had capacity left waiting with no slot (pass.lua).
-- The dispatcher's budget reads both to compute the deployment-wide slots
-- per unit of weight λ, which it gives a pass while the pool is contended:
-- FAIR.lv (λ in thousandths, nil outside such a pass) makes blocked() hold
-- a tenant whose running + released reached FAIR.cap, max(1, ⌊weight·λ⌋).
-- One table: the scripts' prologue has few locals to spare.
local FAIR = {}
RESETS[#RESETS + 1] = function() FAIR.lv, FAIR.d = nil, nil end
function FAIR.key() return BASE .. 'fair' end
function FAIR.cap(p) return mmax(1, mfloor((p.weight or 1) * FAIR.lv / 1000)) end
function FAIR.count(t)
  local fw = 0
  if t.running + t.released > 0 then fw = t.st_w or 1 end
  if fw ~= t.fw then
    if FAIR.d then FAIR.d = FAIR.d + fw - t.fw else FAIR.add(fw - t.fw) end
    t.fw = fw
  end
end
-- FAIR.add moves the shard's held weight by d.
function FAIR.add(d)
  if d ~= 0 and rcall('HINCRBY', FAIR.key(), 'w', istr(d)) <= 0 then rcall('HDEL', FAIR.key(), 'w') end
end
-- Between FAIR.defer() and FAIR.flush() the saves' changes add up (FAIR.d)
-- and move the sum once: for a caller that saves many tenants (pass, a
-- batch of finishes), as ready_defer does for ready.
function FAIR.defer() FAIR.d = 0 end
function FAIR.flush()
  local d = FAIR.d or 0
  FAIR.d = nil
  FAIR.add(d)
end

-- INDEX_RECHECK (µs) is how long after its last check a tenant's entry in
-- the shard's tenant index (<p>:{sN}:tenants, ZSET tenant → next check µs)
-- is checked again by index_trim (tenants.lua): one hour.
local INDEX_RECHECK = 3600000000

local function save_tenant(tn, t)
  FAIR.count(t)
  AGG.note(tn, t)
  local named = t.st_named
  local packed = pack_tenant(t)
  local f0, fx = T_FIELDS.mint(t)
  local ws, wr, wq = packed ~= t.st_packed or named or t.st_ra, t.rs ~= t.st_rs, t.qh ~= t.st_qh
  local wf = f0 ~= t.st_f0 or t.st_ff ~= t.st_f0
  if not (ws or wr or wq or wf) then return end
  local key = t.st_k
  -- A tenant hash created here enters the shard's tenant index and its
  -- name set (one ZADD each per creation; see index_check).
  if not t.st_packed and not named then
    rcall('ZADD', k_index(), istr(NOW + INDEX_RECHECK), tn)
    rcall('ZADD', k_names(), '0', tn)
  end
  if ws and wr and not wq and not wf then -- the common writes, without a table of arguments
    rcall('HSET', key, 's', packed, 'rs', t.rs)
  elseif ws and wr and not wq and not fx then
    local f = istr(f0)
    rcall('HSET', key, 's', packed, 'rs', t.rs, 'ff', f, 'f0', f)
  else
    local args = {}
    if ws then args[1], args[2] = 's', packed end
    if wr then
      args[#args + 1] = 'rs'
      args[#args + 1] = t.rs
    end
    if wq then
      args[#args + 1] = 'qh'
      args[#args + 1] = t.qh
    end
    if wf then
      local f = istr(f0)
      args[#args + 1], args[#args + 2], args[#args + 3], args[#args + 4] = 'ff', f, 'f0', f
      if fx then args[#args + 1], args[#args + 2] = 'fx', istr(fx) end
    end
    rcall('HSET', key, unpack(args))
  end
  if named then rcall('HDEL', key, unpack(named)) end
  if t.st_ra then rcall('HDEL', key, 'ra') end
  t.st_packed, t.st_rs, t.st_ra, t.st_named, t.st_qh, t.st_f0, t.st_ff = packed, t.rs, false, nil, t.qh, f0, f0
end

-- Observation aggregates (docs/design.md §3, aggregates): what GET
-- /v1/summary and the state metrics read instead of walking the tenants.
-- Per shard (keys AGG.key):
--   agg         HASH  or = open + running · AGG.RUN, where open = Σ (live +
--                     running) and running = Σ running (one field: a claim
--                     or a finish moves both in one HINCRBY; open < 2^32,
--                     running < 2^21, so the sum is exact in a double);
--                     dead = Σ dead letters; v = AGG.VERSION once
--                     observe_rebuild.lua built them
--   top         ZSET  tenant → its backlog (live), every tenant with one
--   gate:a|u|d  ZSET  tenant → when its admin pause, upstream pause or
--                     disable ends (µs; AGG.FOREVER: not by itself)
--   gate:p      ZSET  the same for "paused and not disabled" (the later of
--                     a and u; absent while disabled)
--   dead:n      HASH  tenant → its dead letters
--   dead:x      ZSET  tenant → when its dead set expires (µs)
-- Gate entries whose time has passed may stay (counts read from now on);
-- observe.lua drops them. load_tenant remembers a tenant's counts and gates
-- (st_open, st_run, st_ga, st_gu, st_gd); save_tenant notes the change
-- (AGG.note): counts add to the call's deltas, a changed backlog to the
-- call's top writes, a changed gate is written at once (admin and upstream
-- events, not jobs). AGG.flush writes the deltas — one HINCRBY per count
-- that moved (open and running share one) and one ZADD / ZREM of top per
-- call, whatever the jobs — at
-- the save itself, or, for a caller that saves many tenants (the tenant
-- cache's flush_tenants, claim, finish), once after AGG.hold. The dead-set
-- writers (lifecycle.lua to_dead, trim_dead; tenants.lua requeue_dead) call
-- AGG.dead_add before their tenant's save.
AGG.VERSION = '1'
AGG.FOREVER = 9007199254740991 -- 2^53 - 1 µs: an end that never comes
AGG.RUN = 4294967296 -- 2^32: running's unit in field or
-- split is field or's (open, running).
function AGG.split(v)
  v = tonum(v) or 0
  local run = mfloor(v / AGG.RUN)
  return v - run * AGG.RUN, run
end
function AGG.key(name) return BASE .. name end
function AGG.reset()
  AGG.open, AGG.run, AGG.dead, AGG.held, AGG.top, AGG.order, AGG.had = 0, 0, 0, false, nil, nil, nil
end
RESETS[#RESETS + 1] = AGG.reset
function AGG.hold() AGG.held = true end

-- An aggregates build (observe_rebuild.lua) walks the shard's tenants in
-- name order over many calls, so that no call blocks Redis for long. While
-- it runs, the policy hash's field "#ab" is "=" followed by the last name
-- it counted ("=" alone: none yet), and the aggregates hold exactly the
-- tenants up to that name: the changes of a tenant past it are not noted
-- (the walk counts its state when it gets there), those of a tenant up to
-- it are. AGG.cur is the cursor for this call: nil until read (load_policy
-- reads it with the policy, no command of its own), false when no build
-- runs, else the last name counted.
function AGG.cursor(v) AGG.cur = v and string.sub(v, 2) or false end

-- counted reports whether tn's changes go into the aggregates: no build
-- runs, or it has counted tn (byte order, as ZRANGE BYLEX walks: not Lua's
-- string comparison, which follows the server's locale).
function AGG.counted(tn)
  if AGG.cur == nil then AGG.cursor(rcall('HGET', K_POLICY, '#ab')) end
  local c = AGG.cur
  if not c then return true end
  for i = 1, mmin(#tn, #c) do
    local x, y = string.byte(tn, i), string.byte(c, i)
    if x ~= y then return x < y end
  end
  return #tn <= #c
end

-- gates are t's admin pause, upstream pause and disable ends (0: none).
function AGG.gates(t)
  local a, d = t.admin_until, 0
  if t.admin_paused == 1 then a = AGG.FOREVER end
  if t.disabled == 1 then d = AGG.FOREVER end
  return a, t.paused_until, d
end

-- gate writes tn's end v in gate key name (0: out of it).
function AGG.gate(name, v, tn)
  if v > 0 then rcall('ZADD', AGG.key(name), istr(v), tn) else rcall('ZREM', AGG.key(name), tn) end
end

function AGG.note(tn, t)
  if AGG.cur ~= false and not AGG.counted(tn) then -- an aggregates build has not reached tn: it will count it
    t.st_open, t.st_run = t.live + t.running, t.running
    t.st_ga, t.st_gu, t.st_gd = AGG.gates(t)
    return
  end
  local open, run = t.live + t.running, t.running
  if open ~= t.st_open or run ~= t.st_run then
    AGG.open, AGG.run = AGG.open + open - t.st_open, AGG.run + run - t.st_run
    if t.live ~= t.st_open - t.st_run then
      if not AGG.top then AGG.top, AGG.order, AGG.had = {}, {}, {} end
      if AGG.top[tn] == nil then
        AGG.order[#AGG.order + 1] = tn
        AGG.had[tn] = t.st_open - t.st_run > 0 -- in top before the call (see AGG.zset_write)
      end
      AGG.top[tn] = t.live
    end
    t.st_open, t.st_run = open, run
  end
  local a, u, d = AGG.gates(t)
  if a ~= t.st_ga or u ~= t.st_gu or d ~= t.st_gd then
    if a ~= t.st_ga then AGG.gate('gate:a', a, tn) end
    if u ~= t.st_gu then AGG.gate('gate:u', u, tn) end
    if d ~= t.st_gd then AGG.gate('gate:d', d, tn) end
    local p = mmax(a, u)
    if d > 0 then p = 0 end
    AGG.gate('gate:p', p, tn)
    t.st_ga, t.st_gu, t.st_gd = a, u, d
  end
  if not AGG.held then AGG.flush() end
end

-- dead_add counts n letters added to (n < 0: taken from) tn's dead set;
-- expire_at (µs, optional) is when the set now expires.
function AGG.dead_add(tn, n, expire_at)
  if n == 0 or not AGG.counted(tn) then return end
  local left = rcall('HINCRBY', AGG.key('dead:n'), tn, istr(n))
  if left <= 0 then
    n = n - left -- never below none (counts from before the aggregates: observe_rebuild.lua)
    rcall('HDEL', AGG.key('dead:n'), tn)
    rcall('ZREM', AGG.key('dead:x'), tn)
  elseif expire_at then
    rcall('ZADD', AGG.key('dead:x'), istr(expire_at), tn)
  end
  AGG.dead = AGG.dead + n
end

function AGG.flush()
  local key = AGG.key('agg')
  if AGG.open ~= 0 or AGG.run ~= 0 then rcall('HINCRBY', key, 'or', istr(AGG.open + AGG.run * AGG.RUN)) end
  if AGG.dead ~= 0 then rcall('HINCRBY', key, 'dead', istr(AGG.dead)) end
  if AGG.top then
    local up, add, del = {}, {}, {}
    for i = 1, #AGG.order do
      local tn = AGG.order[i]
      local n = AGG.top[tn]
      if n <= 0 then
        del[#del + 1] = tn
      elseif AGG.had[tn] then
        up[#up + 1] = n
        up[#up + 1] = tn
      else
        add[#add + 1] = n
        add[#add + 1] = tn
      end
    end
    AGG.zset_write(AGG.key('top'), del, up, add)
  end
  AGG.reset()
end

-- AGG.zset_write writes a batch to sorted set key: ZREM of the members of
-- del, then ZADD of the (score, member) pairs of up (members the set
-- holds: updates) and of add (members it may not hold), scores as
-- numbers, each member once (in commands of at most 500 members). A small
-- sorted set is a listpack, where Redis updates a member by finding it (a
-- scan from the head), deleting it, and inserting it after every entry
-- ranked before it (a scan that reads each score): a batch of updates to
-- scores past most of the set scans the whole set twice per member. So
-- when up holds two or more and the set is small (ZCARD ≤ AGG.ZSET_SMALL,
-- zset-max-listpack-entries' default: a larger set is a skiplist, which
-- updates in place), up's members join the ZREM (in the caller's order,
-- roughly the set's: each found near the head) and are added back ranked
-- last first, each then inserted ahead of what it ranks before, without a
-- scan. The set written is the same. Used for ready (ready_flush) and top.
AGG.ZSET_SMALL = 128
function AGG.zset_write(key, del, up, add)
  local ord = {}
  if #up >= 4 and rcall('ZCARD', key) <= AGG.ZSET_SMALL then
    for i = 1, #up, 2 do del[#del + 1] = up[i + 1] end
    for i = #up - 1, 1, -2 do ord[#ord + 1] = i end -- callers' orders run roughly ascending
    for k = 2, #ord do
      local a, b = ord[k - 1], ord[k]
      if up[a] < up[b] or (up[a] == up[b] and up[a + 1] < up[b + 1]) then
        table.sort(ord, function(x, y)
          if up[x] ~= up[y] then return up[x] > up[y] end
          return up[x + 1] > up[y + 1]
        end)
        break
      end
    end
  else
    for i = 1, #up, 2 do ord[#ord + 1] = i end
  end
  local args = {}
  for k = 1, #ord do
    args[#args + 1] = istr(up[ord[k]])
    args[#args + 1] = up[ord[k] + 1]
  end
  for i = 1, #add, 2 do
    args[#args + 1] = istr(add[i])
    args[#args + 1] = add[i + 1]
  end
  for i = 1, #del, 500 do rcall('ZREM', key, unpack(del, i, mmin(#del, i + 499))) end
  for i = 1, #args, 1000 do rcall('ZADD', key, unpack(args, i, mmin(#args, i + 999))) end
end

-- Adaptive rate (docs/design.md §4.2). An adaptive tenant (policy adaptive = 1)
-- sends at a fraction f of its policy rate, its rate factor, in parts per
-- million: field rf, where 0 (absent) means RF_FULL. Every GCRA computation
-- uses the effective emission interval T_eff = ⌈T·10⁶ / f⌉ (interval), so
-- the rate bound holds with r_eff = r·f / 10⁶. finish.lua cuts and recovers
-- f; a non-adaptive tenant's factor is always full (rescale_tat resets it).
local RF_FULL = 1000000

-- factor is the tenant's rate factor in ppm, 1 … RF_FULL.
local function factor(t, p)
  if p.adaptive ~= 1 or t.rf <= 0 or t.rf >= RF_FULL then return RF_FULL end
  return t.rf
end

-- interval is T_eff = ⌈T·10⁶ / f⌉ in µs, computed in integers: T = a·f + r
-- (0 ≤ r < f ≤ 10⁶), so T·10⁶ / f = a·10⁶ + r·10⁶ / f, every product below
-- 10¹² or below T_eff — exact in doubles for any T up to 1/d (T·10⁶ itself,
-- up to 8.64·10¹⁶, would not be).
local function interval(t, p)
  local f = t.rf -- factor's, without the call (the hot paths ask often)
  if p.adaptive ~= 1 or f <= 0 or f >= RF_FULL then return p.rate_us end
  local a = mfloor(p.rate_us / f)
  local rm = (p.rate_us - a * f) * RF_FULL
  local q = mfloor(rm / f)
  if q * f < rm then q = q + 1 end
  return a * RF_FULL + q
end

-- scale is d·to/from, rounded down; the product is split so that it stays
-- exact within doubles (error below 1 µs).
local function scale(d, from, to)
  local q = mfloor(d / from)
  return q * to + mfloor((d - q * from) * to / from)
end

-- rescale_tat applies a rate or burst change of the policy to the GCRA
-- state (docs/design.md §3): TAT′ = now + max(0, TAT − now)·T′/T, capped at now +
-- b′·T′, with T and T′ the effective intervals before and after (lib.lua
-- interval: a cut tenant's policy rate change keeps its factor). tat_t and
-- tat_b remember the T_eff and b the TAT was computed with, so a change of
-- the shard defaults is applied lazily, at the tenant's next decision. A
-- tenant that is not adaptive (any more) gets its full rate back here (rf
-- and cut_until cleared). A change of the rate factor alone goes through
-- refactor instead.
local function rescale_stat(t, now, old, new)
  if old > new and t.stat > now then t.stat = now + scale(t.stat - now, old, new) end
end
local function rescale_tat(t, p, now)
  if p.adaptive ~= 1 and (t.rf ~= 0 or t.cut_until ~= 0) then t.rf, t.cut_until = 0, 0 end
  local iv = interval(t, p)
  if t.tat_t == iv and t.tat_b == p.burst then return end
  if t.tat_t > 0 and t.tat > now then
    t.tat = now + mmin(scale(t.tat - now, t.tat_t, iv), p.burst * iv)
  end
  rescale_stat(t, now, t.tat_t, iv)
  t.tat_t, t.tat_b = iv, p.burst
end

-- (rescale_stat: the send schedule's TAT, claim.lua, follows a shorter
-- interval the same way, without the cap; a longer one is left to the plan:
-- jobs released before a cut keep their slots.)
-- refactor applies a change of the rate factor (finish.lua adapt, after
-- rescale_tat) to TAT like a rate change, TAT′ = now + max(0, TAT − now)·T′/T
-- capped at now + b·T′, but never below TAT − T + T′: every slot already
-- handed out (each ≤ TAT − T) keeps the new interval T′ to the next one,
-- which the plain rescale would break on a recovery (T′ < T) or through
-- its cap when released slots reach past now + b·T′. The floor holds for a
-- TAT already past too: a cut right after a send (TAT ≤ now, the last slot
-- TAT − T) still keeps the next slot T′ after it.
local function refactor(t, p, now)
  local iv, old = interval(t, p), t.tat_t
  if old > 0 and old ~= iv and t.tat > now then
    t.tat = mmax(now + mmin(scale(t.tat - now, old, iv), p.burst * iv), t.tat - old + iv)
  elseif old > 0 and old ~= iv and t.tat > 0 then
    t.tat = mmax(t.tat, t.tat - old + iv)
  end
  rescale_stat(t, now, old, iv)
  t.tat_t = iv
end

-- Pacing by quota headers (issue #32; docs/dispatch.md "Pacing by quota
-- headers"). A tenant whose policy has pacing = 1 keeps the last quota its
-- upstream reported (finish.lua PACE.observe): q_unit (1 requests, 2 tokens; 0
-- none), q_rem what was left, q_lim the quota's size (0 unknown), q_reset
-- (µs) when it is whole again, q_fly the units sent since the report (and
-- in flight at it), q_next the paced slot of the next job; field qh (beside
-- s) names the header. While now < q_reset, what is left is L = q_rem −
-- q_fly: L < u holds the next job of u units until q_reset; else one released
-- at slot s sets q_next = min(q_reset, s + u·(q_reset − s) / (L·(1 −
-- MARGIN))), u = 1 for a requests quota and c for a tokens quota: what is
-- left, spread over the time to the reset with a margin. A slot is max(GCRA
-- slot, pauses, q_next): never faster than the configured rate, and after
-- q_reset the configured rate again.
-- One table, PACE, holds it all: the scripts' prologue has few locals to
-- spare (Lua allows 200 per function).
local PACE = {MARGIN = 0.05} -- store.PaceMargin

-- PACE.on says whether the tenant's reported quota paces it now.
function PACE.on(t, p) return p.pacing == 1 and t.q_unit > 0 and NOW < t.q_reset end

-- PACE.slot is the earliest slot pacing leaves the tenant's next job, of
-- cost c (0 = any): q_reset when what is left is less than the job's units
-- (1, or c for a tokens quota), else q_next.
function PACE.slot(t, p, c)
  if p.pacing ~= 1 or t.q_unit <= 0 or NOW >= t.q_reset then return 0 end -- not PACE.on
  local u = 1
  if t.q_unit == 2 then u = c end
  if t.q_rem - t.q_fly < u then return t.q_reset end
  return t.q_next
end

-- PACE.take charges a job of cost c released at slot to the quota.
function PACE.take(t, p, slot, c)
  if p.pacing ~= 1 or not PACE.on(t, p) then return end
  local u = 1
  if t.q_unit == 2 then u = c end
  local left = t.q_rem - t.q_fly
  t.q_fly = t.q_fly + u
  if left <= 0 or slot >= t.q_reset then
    t.q_next = t.q_reset
  else
    t.q_next = mmin(t.q_reset, slot + math.ceil(u * (t.q_reset - slot) / (left * (1 - PACE.MARGIN))))
  end
end

-- PACE.interval is the pace now in µs per unit of the quota (0 = not
-- pacing): (q_reset − now) / (L·(1 − MARGIN)), q_reset − now when nothing
-- is left.
function PACE.interval(t, p)
  if p.pacing ~= 1 or not PACE.on(t, p) then return 0 end -- (the common case without the call)
  local left = t.q_rem - t.q_fly
  if left <= 0 then return t.q_reset - NOW end
  return math.ceil((t.q_reset - NOW) / (left * (1 - PACE.MARGIN)))
end

-- refill brings the admission bucket (capacity admit_burst, one token per
-- admit_us) up to now in whole tokens; ats keeps the partial progress.
local function refill(t, p, now)
  local cap, iv = p.admit_burst, p.admit_us
  if t.atok < cap and now > t.ats then
    local n = mfloor((now - t.ats) / iv)
    t.atok = t.atok + n
    t.ats = t.ats + n * iv
  end
  if t.atok >= cap then
    t.atok = cap
    if now > t.ats then t.ats = now end
  end
end

-- admit_wait is the time until cost tokens exist (> 0 when refused now).
local function admit_wait(t, p, cost, now)
  if t.atok >= cost then return 0 end
  return mmax(1, (cost - t.atok) * p.admit_us - (now - t.ats))
end

-- earliest is GCRA's earliest slot for cost c: max(now, TAT − (b − c)·T),
-- T the effective interval.
local function earliest(t, p, c, now)
  local e = t.tat - (p.burst - c) * interval(t, p)
  if e > now then return e end -- max without math.max's C call
  return now
end

-- send_target is when a job planned at slot goes out under the tenant's
-- send schedule (claim.lua): for a job planned at or after sslot, the
-- planned slot of the last job claimed, max(slot, slast + (slot − sslot))
-- — its slot, or later by the lateness the schedule carries; nil for a job
-- planned before it (out of order: claim.lua's GCRA decides).
local function send_target(t, slot)
  if slot < t.sslot then return nil end
  return mmax(slot, t.slast + (slot - t.sslot))
end

-- head_job is the tenant's next job: the head lane first (read only when
-- its length hlen says it holds any), then the backlog. A tenant whose
-- jobs all cost 1 (field c1 = 1) needs no read: it has a next job of cost
-- 1 when its queued tokens qtok are > 0 (the id is then true).
local function head_job(tn, t)
  if t.c1 == 1 then
    if t.qtok > 0 then return true, 1 end
    return nil, 0
  end
  local id = nil
  if t.hlen > 0 then id = rcall('ZRANGE', k_head(tn), '0', '0')[1] end
  if not id then id = rcall('LINDEX', k_queue(tn), '0') end
  if not id then return nil, 0 end
  return id, tonum(rcall('HGET', k_job(id), 'cost')) or 1
end

-- gate is the end of the tenant's timed pauses (upstream and admin): no slot
-- may be earlier.
local function gate(t)
  local a, b = t.paused_until, t.admin_until -- math.max's C call costs more
  if a > b then return a end
  return b
end

-- release_cap is the most tokens the tenant may have released and unclaimed
-- at once: ⌈r·D⌉ + b = ⌈D / T⌉ + b (T the effective interval), with D the
-- lead of the last pass that released one of its jobs (field lead; 0 before
-- the first: no cap needed, nothing is released). pass.lua passes its own D.
local function release_cap(t, p, lead)
  return math.ceil((lead or t.lead) / interval(t, p)) + p.burst
end

-- blocked names what keeps the tenant from releasing any job whatever its
-- slot, or nil: disabled, admin-paused (indefinitely), at its concurrency
-- cap (released + running ≥ concurrency).
local function blocked(t, p)
  if t.disabled == 1 then return 'disabled' end
  if t.admin_paused == 1 then return 'paused' end
  if t.running + t.released >= p.concurrency then return 'concurrency' end
  if FAIR.lv and t.running + t.released >= FAIR.cap(p) then return 'fair' end
  return nil
end

-- reschedule(tenant) — the one routine every script that changes a tenant
-- calls last (docs/design.md §2.2): score in ready = max(earliest slot for the head
-- job's cost, paused_until, admin_until); removed when the tenant has no
-- queued job, is disabled or admin-paused indefinitely, has released +
-- running ≥ concurrency, or would exceed its release cap with the head job
-- (claim, finish and sweep re-add it). A tenant holding lane jobs (uq > 0,
-- lanes.lua) scores the best of its plain head and its lanes' heads, each
-- lane head at max(its GCRA slot, pauses, each upstream's earliest or
-- expected grant). Returns the score, or nil when removed.
-- A caller that has just read the head job may pass it (head = {id, cost},
-- or false when the tenant has none) to save the reads. It records what it
-- decided on in field rs (sched_sig), so callers save the tenant after it.
-- Between ready_defer(present) and ready_flush() its writes to ready are
-- queued (READY_ADD, READY_DEL) and written by ready_flush in one ZREM and
-- one ZADD (AGG.zset_write): for a caller that reschedules many tenants,
-- each once, and reads ready only after the flush. present (optional):
-- the tenants the caller read from ready (tenant → anything), whose
-- scores are updates (READY_ADD.up; the others: READY_ADD.add).
local sched_sig, RS_HELD
local lane_score -- lanes.lua LN.score
local READY_ADD, READY_DEL = nil, nil
RESETS[#RESETS + 1] = function() READY_ADD, READY_DEL = nil, nil end
local function ready_defer(present) READY_ADD, READY_DEL = {present = present or {}, up = {}, add = {}}, {} end
local function ready_flush()
  local add, del = READY_ADD, READY_DEL
  READY_ADD, READY_DEL = nil, nil
  AGG.zset_write(K_READY, del, add.up, add.add)
end
-- ready_add scores tn in ready (queued between ready_defer and ready_flush).
local function ready_add(tn, score)
  if READY_ADD then
    local q = READY_ADD.present[tn] and READY_ADD.up or READY_ADD.add
    q[#q + 1] = score
    q[#q + 1] = tn
  else
    rcall('ZADD', K_READY, istr(score), tn)
  end
end
local function unready(tn)
  if READY_DEL then
    READY_DEL[#READY_DEL + 1] = tn
  else
    rcall('ZREM', K_READY, tn)
  end
end
local function reschedule(tn, t, p, now, head)
  local code
  t.rs, code = sched_sig(t, p)
  t.st_rscode = code
  if code ~= 0 then -- blocked (sched_sig's code)
    unready(tn)
    return nil
  end
  local id, cost
  if head == nil or t.uq > 0 then
    id, cost = head_job(tn, t)
  elseif head then
    id, cost = head[1], head[2]
  end
  local score, held = nil, false
  if id and t.rtok > 0 and t.rtok + cost > release_cap(t, p) then
    held = true
  elseif id then
    score = mmax(earliest(t, p, cost, now), gate(t), PACE.slot(t, p, cost))
  end
  if t.uq > 0 then -- lanes.lua: the best of the lanes' heads too
    local ls, lheld = lane_score(tn, t, p, now)
    if ls and (not score or ls < score) then score = ls end
    held = held or lheld
  end
  if not score then
    if held then t.rs = RS_HELD end -- held by its release cap: see sched_sig
    unready(tn)
    return nil
  end
  ready_add(tn, score)
  return score
end

-- sched_sig is a digest, as a string of doubles (struct SIG.PACK), of what
-- reschedule decides on besides now, the head job's identity and the
-- released tokens: whether the tenant is blocked (under the policy of the
-- call), TAT, the pauses' end, the queued jobs (head-lane length, queued
-- tokens), the release cap's lead, the effective interval and the burst.
-- Every script that changes a queue changes the queued counts too. A
-- script whose changes leave it equal to field rs (the last reschedule's)
-- may skip reschedule: the tenant's ready score stands (up to now: a score
-- already past is due either way). The released tokens only decide whether
-- the release cap holds the tenant out, so they are left out: fewer of them
-- never hold out a tenant that was not, only the pass adds to them (and it
-- reschedules every tenant it released from), and reschedule records RS_HELD
-- for a tenant it removed for its release cap (its head job's cost, not in
-- the digest, decided), so any script that lowers them reschedules it.
-- The digest is the values themselves, packed (no hash: equal digests are
-- equal values), the last, the pacing slot, left out when it is 0 (8
-- doubles or 9: still one digest per values); RS_HELD is no packed string's.
RS_HELD = 'held'
-- One table for the digest's layout and blocked()'s codes (the prologue's
-- locals are few).
local SIG = {PACK = '<ddddddddd', PACK8 = '<dddddddd', BLOCKED = {disabled = 1, paused = 2, concurrency = 3, fair = 4}}
-- Its second value is that code of blocked(t, p), 0 when not blocked.
sched_sig = function(t, p)
  local ps = PACE.slot(t, p, 1)
  local code = SIG.BLOCKED[blocked(t, p)] or 0
  return struct.pack(ps == 0 and SIG.PACK8 or SIG.PACK, code, t.tat, gate(t), t.hlen,
    t.qtok, t.lead, interval(t, p), p.burst, ps), code
end

-- Fast finishes (finish.lua: a plain success of a tenant the call has not
-- loaded). Each save mints tokens (T_FIELDS.mint): the finishes of as many
-- of the tenant's running jobs that change nothing of its state but running
-- − 1 — no held-weight or expiry change (the tenant stays busy and holds a
-- slot), no dead set to trim, no adaptive state nor quota to pace by
-- (PACE.slot is 0 without one, whatever the time) — and, at most, put it
-- back in ready. Fields f0 (as minted) and ff (left) hold F + D·K + S·K²,
-- K = FF_K: F tokens; D the held weight (fw) the last of them drops from
-- the shard's sum (FAIR), minted when the tenant keeps a backlog and
-- releases nothing, so that running reaching 0 changes nothing else; S = 1
-- when the tenant is out of ready only for its fair share (a pass's hold,
-- docs/design.md §2.2, which any finish lifts) with one job running: its
-- token also puts it back, at max(fx, now) — fx the score reschedule would
-- give it, its jobs all costing 1. A finish takes a token with HINCRBY ff
-- −1 instead of loading and saving the tenant (left ≥ 0 is its licence;
-- the shard's aggregates move by its running − 1 at once). The next load
-- folds what the tokens took (T_FIELDS.fold: running − (f0 − ff), fw 0 once
-- D was dropped), so every reader sees the tenant as full finishes would
-- have left it; the save after it mints afresh. A plain success that finds
-- no token (ff was 0: left −1) has taken its running − 1 all the same and
-- goes on as a full finish that does not count it again.
T_FIELDS.FF_K = 2097152 -- 2^21: running stays below it (AGG); D·K + S·K² stays below 2^53
function T_FIELDS.ff_split(f) -- F (left), D, S of a field's value
  local k, k2 = T_FIELDS.FF_K, T_FIELDS.FF_K * T_FIELDS.FF_K
  local s = mfloor(f / k2)
  local rest = f - s * k2
  local left = rest % k
  return left, (rest - left) / k, s
end
function T_FIELDS.fold(t, f0, ff)
  if f0 > ff then t.running = mmax(0, t.running - (f0 - ff)) end
  local _, d = T_FIELDS.ff_split(f0)
  local left = T_FIELDS.ff_split(ff)
  if d > 0 and left == 0 and ff >= 0 then t.fw = 0 end -- the last token dropped the held weight
end
-- mint is what t's save stores in f0 and ff (and, with S, fx): 0
-- unless its policy of the load is at hand (not BUILTIN: a reader's) and a
-- finish could leave everything but running, ready and rs as it is.
function T_FIELDS.mint(t)
  local p = t.st_p
  if t.running <= 0 or not p or p == BUILTIN or t.dz ~= 1 or t.q_unit > 0 or (p.adaptive == 1 and t.rf ~= 0)
      or t.uq > 0 or t.running + t.released >= p.concurrency or (t.live == 0 and t.running == 1) then
    return 0
  end
  -- The digest a finish computes (no fair cap outside a pass) is rs itself
  -- when its caller has just computed rs (st_rsnow 1; 2: with the pass's λ,
  -- which changes the digest only by holding the tenant for its share:
  -- code fair, checked after every other block). Else it is computed here;
  -- the pass (the one caller with λ) always says.
  if t.rs == RS_HELD or (not t.st_rsnow and (FAIR.lv or sched_sig(t, p) ~= t.rs)) then return 0 end
  local k = T_FIELDS.FF_K
  if not (t.st_rsnow == 2 and t.st_rscode == SIG.BLOCKED.fair) then
    if t.live > 0 then return t.running + (t.released == 0 and t.fw or 0) * k end
    return t.running - 1
  end
  -- Held for its fair share only (the pass's digest is rs), with one job
  -- running: its finish puts it back in ready (lib.lua reschedule, its head
  -- costing 1) and leaves it holding no slot (rs, the pass's digest, then
  -- says nothing a reader acts on: a held tenant holds a slot).
  if t.running ~= 1 or t.c1 ~= 1 or t.qtok <= 0 or (t.rtok > 0 and t.rtok + 1 > release_cap(t, p)) then
    return 0
  end
  local fx = mmax(earliest(t, p, 1, 0), gate(t)) -- reschedule's score for a head of cost 1, now left out
  return 1 + (t.released == 0 and t.fw or 0) * k + k * k, fx
end

-- Inflow (tenant fields in_m, in_c, in_p): the tokens admitted in the
-- current minute (number in_m, minutes since the epoch of Redis time) and
-- in the minute before; inflow_add counts an admission of n tokens. Go's
-- TenantState.InflowPerSecond weighs them as a sliding window.
local function inflow_add(t, n)
  local m = mfloor(NOW / 60000000) -- a minute in µs (a constant, not a local: pass.lua's EVAL build has none to spare)
  if m ~= t.in_m then
    if m == t.in_m + 1 then t.in_p = t.in_c else t.in_p = 0 end
    t.in_c, t.in_m = 0, m
  end
  t.in_c = t.in_c + n
end

-- expire_tenant: the tenant hash expires only when it holds no job and is
-- neither disabled nor admin-paused, and not before its TAT, pause and
-- admission refill have all run out (so expiry never hands out free tokens).
-- Its entry in the tenant index (tenants.lua) is then due for a check a
-- second after the hash expires, or keep_us (µs, optional: the retention of
-- the jobs that just ended, finish.lua's and cancel.lua's) after now when
-- that is later: one ZADD beside the PEXPIRE, only when the tenant is idle.
-- Its score is also the time until which the tenant is listed (tenants.lua
-- has_state). A tenant idle when loaded keeps the later of the two (GT): no
-- idle moment shortens what an earlier one set. A tenant busy when loaded
-- (the finish of its last job, a cancel) gets the score outright: what its
-- entry held was the index's recheck time (the creation's or index_check's,
-- INDEX_RECHECK on), not a listing, and kept it would hold an idle tenant's
-- entry — and list it — an hour past a shorter retention. (The ending that
-- makes a tenant idle sets its own retention, so a shorter one — a cancel's
-- retention after a success's — can list a tenant for less than the records
-- kept of its earlier jobs.)
-- A hash that was busy when loaded has no TTL already (every script that
-- leaves a tenant busy persists it), so only a change to busy persists.
busy = function(t)
  return t.live > 0 or t.running > 0 or t.disabled == 1 or t.admin_paused == 1
end
local function expire_tenant(tn, t, p, now, keep_us)
  if busy(t) then
    if not t.st_busy then rcall('PERSIST', t.st_k) end
    return
  end
  local key = t.st_k
  local full_at = t.ats + mmax(0, p.admit_burst - t.atok) * p.admit_us
  local ttl_ms = mfloor(mmax(0, mmax(t.tat, t.stat, gate(t), full_at) - now) / 1000) + 1000
  rcall('PEXPIRE', key, istr(ttl_ms))
  local at = istr(now + mmax((ttl_ms + 1000) * 1000, keep_us or 0))
  if t.st_busy then rcall('ZADD', k_index(), at, tn) else rcall('ZADD', k_index(), 'GT', at, tn) end
end

-- shard_earliest is the shard's earliest due time: min of the first ready
-- score and the first delayed score, nil when both sets are empty.
local function shard_earliest()
  local best = nil
  for _, key in ipairs({K_READY, K_DELAYED}) do
    local r = rcall('ZRANGE', key, '0', '0', 'WITHSCORES')
    local s = tonum(r[2])
    if s and (best == nil or s < best) then best = s end
  end
  return best
end

-- wake_at publishes score when it is now the shard's earliest time: for a
-- script that has just put a tenant back in ready at score. Returns 1 when
-- it published.
local function wake_at(score)
  local after = shard_earliest()
  if after and after >= score then
    rcall('PUBLISH', K_WAKE, istr(score))
    return 1
  end
  return 0
end

-- wake publishes the new earliest time on the shard's wake channel when it
-- moved earlier than before (or appeared). Returns 1 when it published.
local function wake(before)
  local after = shard_earliest()
  if after and (before == nil or after < before) then
    rcall('PUBLISH', K_WAKE, istr(after))
    return 1
  end
  return 0
end

-- note_earliest remembers the shard's earliest time before the call's
-- first write to ready or delayed, once per call (BEFORE, BEFORE_READ);
-- lowered(score) notes each score the call then writes there (LOWEST, the
-- least); wake_if_earlier publishes LOWEST when it is earlier than BEFORE:
-- then it is the shard's earliest time (every other score is ≥ BEFORE),
-- with no second read. For scripts that know only late whether they will
-- write there, and that write each tenant's score once.
local BEFORE, BEFORE_READ, LOWEST = nil, false, nil
RESETS[#RESETS + 1] = function() BEFORE, BEFORE_READ, LOWEST = nil, false, nil end
local function note_earliest()
  if not BEFORE_READ then BEFORE, BEFORE_READ = shard_earliest(), true end
end
local function lowered(score)
  if score and (LOWEST == nil or score < LOWEST) then LOWEST = score end
end
-- sets_wake is the earliest of best (nil: none), the first ready score
-- less d, the first delayed due past now + d less d (those before it are
-- promoted or waiting) and the first lease deadline: the next wake of a
-- pass that left no work (pass.lua, plan_apply.lua).
local function sets_wake(d, best)
  for _, key in ipairs({K_READY, K_DELAYED, K_LEASES}) do
    local s
    if key == K_DELAYED then
      s = tonum(rcall('ZRANGEBYSCORE', key, '(' .. istr(NOW + d), '+inf', 'WITHSCORES', 'LIMIT', '0', '1')[2])
      if s then s = s - d end
    else
      s = tonum(rcall('ZRANGE', key, '0', '0', 'WITHSCORES')[2])
      if s and key == K_READY then s = s - d end
    end
    if s and (best == nil or s < best) then best = s end
  end
  return best
end
local function wake_if_earlier()
  if not (BEFORE_READ and LOWEST) or (BEFORE and LOWEST >= BEFORE) then return 0 end
  rcall('PUBLISH', K_WAKE, istr(LOWEST))
  return 1
end

-- Lease writes a script defers to its end, one command for all its jobs:
-- lease_add(id, deadline) and lease_del(id) queue them, leases_flush runs
-- the removals, then the additions (in commands of at most LEASE_CHUNK
-- jobs). A script defers only writes that nothing before its flush reads,
-- and only one kind per job.
local LEASE_ADD, LEASE_DEL, LEASE_CHUNK = {}, {}, 500
RESETS[#RESETS + 1] = function() -- new tables only when the last call left entries (leases_flush empties them)
  if #LEASE_ADD > 0 or #LEASE_DEL > 0 then LEASE_ADD, LEASE_DEL = {}, {} end
end
local function lease_add(id, deadline)
  LEASE_ADD[#LEASE_ADD + 1] = istr(deadline)
  LEASE_ADD[#LEASE_ADD + 1] = id
end
local function lease_del(id) LEASE_DEL[#LEASE_DEL + 1] = id end
local function leases_flush()
  for i = 1, #LEASE_DEL, LEASE_CHUNK do
    rcall('ZREM', K_LEASES, unpack(LEASE_DEL, i, mmin(#LEASE_DEL, i + LEASE_CHUNK - 1)))
  end
  for i = 1, #LEASE_ADD, 2 * LEASE_CHUNK do
    rcall('ZADD', K_LEASES, unpack(LEASE_ADD, i, mmin(#LEASE_ADD, i + 2 * LEASE_CHUNK - 1)))
  end
  if #LEASE_ADD > 0 or #LEASE_DEL > 0 then LEASE_ADD, LEASE_DEL = {}, {} end
end

-- Job states (docs/design.md §2).
local LIVE = {scheduled = true, queued = true, released = true, retrying = true}
