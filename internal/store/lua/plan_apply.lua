-- plan_apply.lua — writes the release of a pass the dispatcher planned
-- (internal/plan; store planpass.go; docs/design.md "Where the decisions
-- run"). It decides nothing: it checks that each planned tenant is as the
-- plan read it and writes what the plan says, as pass.lua's release,
-- pre-claim and save would have.
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs: the plan's (not 0)
-- ARGV[3]  D: lead µs                ARGV[4]  grace µs
-- ARGV[5]  the shard's virtual clock to set ('' to leave it)
-- ARGV[6]  field r of <p>:{sN}:fair to set ('' to leave it, 0 to delete it)
-- ARGV[7]  more (0|1)                ARGV[8]  capacity reached (0|1)
-- ARGV[9]  n, the tenants; then each tenant's 17 values and its jobs:
--          name; s, rs, f0, ff as read ('' for an absent rs, f0, ff);
--          s, rs, f0 to write ('' none; f0 is written to ff too) and fx
--          ('' none); its ready score ('' out of ready); its held weight's
--          change (fair w), its running's change, its backlog for top
--          ('' unchanged) and 1 when it had one before; the entries taken
--          from its head lane and from its backlog list (tombstones
--          included); m, its jobs; then m jobs of 8 values: id, kind (r
--          released, p pre-claimed), gen, slot µs, lease deadline µs, and
--          for p (else 0): attempt, first µs, 1 for a webhook (its
--          tenant's signing state goes in the reply).
-- Reply:   {'ok', next wake µs (0 = none; now when more or capacity
--          reached, as pass.lua), {skipped tenant, …}, {tenant, signing
--          values as claim.lua's, …} for each tenant with a pre-claimed
--          webhook}
--
-- A tenant whose s, rs, f0 or ff moved since the read (a claim, finish,
-- enqueue or cancel in between) is skipped: nothing of it is written, and
-- the next pass plans it again. Every other tenant is written whole:
-- every queue change changes s, so an unchanged s is an unchanged backlog.
-- The index trim, promotions, sweeps, lanes and upstreams are pass.lua's:
-- the dispatcher plans only a pass that needs none of them.

local D, GRACE = tonum(ARGV[3]), tonum(ARGV[4])
local n = tonum(ARGV[9])
if not (D and GRACE and n) then return redis.error_reply('ERR sluice plan_apply: want integer D, grace and n') end
local GRACE_S, NOW_S = istr(GRACE), istr(NOW)
-- AT[i]: where tenant i's values start (no table a tenant: the values are
-- read from ARGV where they are).
local AT, at = {}, 10
for i = 1, n do
  local m = tonum(ARGV[at + 16])
  if not (m and tonum(ARGV[at + 10]) and tonum(ARGV[at + 11]) and tonum(ARGV[at + 14]) and tonum(ARGV[at + 15])) then
    return redis.error_reply('ERR sluice plan_apply: malformed tenant ' .. i)
  end
  AT[i] = at
  at = at + 17 + 8 * m
end
if at - 1 ~= #ARGV then return redis.error_reply('ERR sluice plan_apply: want ' .. (at - 1) .. ' arguments') end

-- Check: every tenant as read.
local skipped, keys = {}, {}
for i = 1, n do
  local a = AT[i]
  local k = k_tenant(ARGV[a])
  local r = rcall('HMGET', k, 's', 'rs', 'f0', 'ff')
  if r[1] ~= ARGV[a + 1] or (r[2] or '') ~= ARGV[a + 2] or (r[3] or '') ~= ARGV[a + 3] or (r[4] or '') ~= ARGV[a + 4] then
    skipped[#skipped + 1] = ARGV[a]
  else
    keys[i] = k
  end
end

-- Write.
local ready_del, ready_up, fw, signs = {}, {}, 0, {}
for i = 1, n do
  local k, a = keys[i], AT[i]
  if k then
    local tn = ARGV[a]
    if ARGV[a + 14] ~= '0' then rcall('ZPOPMIN', k .. ':head', ARGV[a + 14]) end -- k_head
    if ARGV[a + 15] ~= '0' then rcall('LPOP', k .. ':q', ARGV[a + 15]) end -- k_queue
    local webhook = false
    for j = a + 17, a + 17 + 8 * (tonum(ARGV[a + 16]) - 1), 8 do
      local id, gen = ARGV[j], ARGV[j + 2]
      if ARGV[j + 1] == 'p' then
        rcall('HSET', k_job(id), 'state', 'running', 'attempt', ARGV[j + 5], 'claimed', NOW_S, 'first', ARGV[j + 6],
          'gen', gen, 'slot', ARGV[j + 3], 'grace', GRACE_S, 'resv', '0', 'pc', gen)
        webhook = webhook or ARGV[j + 7] == '1'
      else
        rcall('HSET', k_job(id), 'state', 'released', 'gen', gen, 'slot', ARGV[j + 3], 'grace', GRACE_S, 'resv', '0')
      end
      LEASE_ADD[#LEASE_ADD + 1] = ARGV[j + 4] -- lib.lua lease_add, its deadline's text as given
      LEASE_ADD[#LEASE_ADD + 1] = id
    end
    local ns, nrs, nf0 = ARGV[a + 5], ARGV[a + 6], ARGV[a + 7]
    if nf0 == '' and ns ~= '' and nrs ~= '' then -- the common write, without a table of arguments
      rcall('HSET', k, 's', ns, 'rs', nrs)
    elseif ns ~= '' or nrs ~= '' or nf0 ~= '' then
      local args = {}
      if ns ~= '' then args[#args + 1], args[#args + 2] = 's', ns end
      if nrs ~= '' then args[#args + 1], args[#args + 2] = 'rs', nrs end
      if nf0 ~= '' then
        args[#args + 1], args[#args + 2], args[#args + 3], args[#args + 4] = 'ff', nf0, 'f0', nf0
        if ARGV[a + 8] ~= '' then args[#args + 1], args[#args + 2] = 'fx', ARGV[a + 8] end
      end
      rcall('HSET', k, unpack(args))
    end
    if ARGV[a + 9] == '' then
      ready_del[#ready_del + 1] = tn
    else
      ready_up[#ready_up + 1] = tonum(ARGV[a + 9])
      ready_up[#ready_up + 1] = tn
    end
    fw = fw + tonum(ARGV[a + 10])
    AGG.run = AGG.run + tonum(ARGV[a + 11])
    if ARGV[a + 12] ~= '' then
      if not AGG.top then AGG.top, AGG.order, AGG.had = {}, {}, {} end
      AGG.order[#AGG.order + 1] = tn
      AGG.had[tn] = ARGV[a + 13] == '1'
      AGG.top[tn] = tonum(ARGV[a + 12])
    end
    if webhook then -- lifecycle.lua CLAIM.run: the signing state rides in the reply
      local sign = signing_set(tn, load_policy(tn), {tn}, true) -- lib.lua
      if sign then signs[#signs + 1] = sign end
    end
  end
end
leases_flush()
AGG.zset_write(K_READY, ready_del, ready_up, {})
FAIR.add(fw)
AGG.flush()
if ARGV[5] ~= '' then rcall('SET', K_VCLOCK, ARGV[5]) end
if ARGV[6] == '0' then
  rcall('HDEL', FAIR.key(), 'r')
elseif ARGV[6] ~= '' then
  rcall('HSET', FAIR.key(), 'r', ARGV[6])
end

-- The next wake, as pass.lua's: now when work is left, else the earliest of
-- the first ready score − D, the first delayed due past now + D (less D)
-- and the first lease deadline.
local next_wake = NOW
if ARGV[7] == '0' and ARGV[8] == '0' then next_wake = sets_wake(D, nil) end -- lib.lua
return {'ok', next_wake or 0, skipped, signs}
