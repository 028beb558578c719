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
local GRACE_S = istr(GRACE)
local T, at = {}, 10
for i = 1, n do
  local x = {name = ARGV[at], s = ARGV[at + 1], rs = ARGV[at + 2], f0 = ARGV[at + 3], ff = ARGV[at + 4],
    ns = ARGV[at + 5], nrs = ARGV[at + 6], nf0 = ARGV[at + 7], fx = ARGV[at + 8], score = ARGV[at + 9],
    dw = tonum(ARGV[at + 10]), drun = tonum(ARGV[at + 11]), top = ARGV[at + 12], had = ARGV[at + 13] == '1',
    nh = tonum(ARGV[at + 14]), nq = tonum(ARGV[at + 15]), m = tonum(ARGV[at + 16]), at = at + 17}
  if not (x.dw and x.drun and x.nh and x.nq and x.m) then
    return redis.error_reply('ERR sluice plan_apply: malformed tenant ' .. i)
  end
  T[i] = x
  at = x.at + 8 * x.m
end
if at - 1 ~= #ARGV then return redis.error_reply('ERR sluice plan_apply: want ' .. (at - 1) .. ' arguments') end

-- Check: every tenant as read.
local skipped = {}
for _, x in ipairs(T) do
  local k = k_tenant(x.name)
  local r = rcall('HMGET', k, 's', 'rs', 'f0', 'ff')
  x.k = k
  x.skip = r[1] ~= x.s or (r[2] or '') ~= x.rs or (r[3] or '') ~= x.f0 or (r[4] or '') ~= x.ff
  if x.skip then skipped[#skipped + 1] = x.name end
end

-- Write.
local ready_del, ready_up, fw, signs = {}, {}, 0, {}
for _, x in ipairs(T) do
  if not x.skip then
    if x.nh > 0 then rcall('ZPOPMIN', k_head(x.name), istr(x.nh)) end
    if x.nq > 0 then rcall('LPOP', k_queue(x.name), istr(x.nq)) end
    local webhook = false
    for j = x.at, x.at + 8 * (x.m - 1), 8 do
      local id, gen = ARGV[j], ARGV[j + 2]
      if ARGV[j + 1] == 'p' then
        local first = ARGV[j + 6]
        rcall('HSET', k_job(id), 'state', 'running', 'attempt', ARGV[j + 5], 'claimed', istr(NOW), 'first', first,
          'gen', gen, 'slot', ARGV[j + 3], 'grace', GRACE_S, 'resv', '0', 'pc', gen)
        webhook = webhook or ARGV[j + 7] == '1'
      else
        rcall('HSET', k_job(id), 'state', 'released', 'gen', gen, 'slot', ARGV[j + 3], 'grace', GRACE_S, 'resv', '0')
      end
      lease_add(id, tonum(ARGV[j + 4]))
    end
    local args = {}
    if x.ns ~= '' then args[#args + 1], args[#args + 2] = 's', x.ns end
    if x.nrs ~= '' then args[#args + 1], args[#args + 2] = 'rs', x.nrs end
    if x.nf0 ~= '' then
      args[#args + 1], args[#args + 2], args[#args + 3], args[#args + 4] = 'ff', x.nf0, 'f0', x.nf0
      if x.fx ~= '' then args[#args + 1], args[#args + 2] = 'fx', x.fx end
    end
    if #args > 0 then rcall('HSET', x.k, unpack(args)) end
    if x.score == '' then
      ready_del[#ready_del + 1] = x.name
    else
      ready_up[#ready_up + 1] = tonum(x.score)
      ready_up[#ready_up + 1] = x.name
    end
    fw = fw + x.dw
    AGG.run = AGG.run + x.drun
    if x.top ~= '' then
      if not AGG.top then AGG.top, AGG.order, AGG.had = {}, {}, {} end
      AGG.order[#AGG.order + 1] = x.name
      AGG.had[x.name] = x.had
      AGG.top[x.name] = tonum(x.top)
    end
    if webhook then -- lifecycle.lua CLAIM.run: the signing state rides in the reply
      local sign = signing_set(x.name, load_policy(x.name), {}, true) -- lib.lua
      if sign then
        table.insert(sign, 1, x.name)
        signs[#signs + 1] = sign
      end
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
