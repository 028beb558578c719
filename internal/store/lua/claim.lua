-- claim.lua — a worker's claim of a released job at its slot (docs/design.md §2.3, step 3).
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  ε: tolerance µs
-- ARGV[4…] the jobs, in pairs: job id, gen the task carries (at least one)
-- Reply:   {'ok', r1, r2, …}, one r per job in request order, each one of
--          {'claimed', tenant, type, body, gen, attempt, timeout µs, slot µs, created µs,
--           cost (reserved), upstreams (record field ups: names joined by ',', '' = none),
--           signing: a webhook job's {now µs, unsigned (0|1), id, created µs, expires µs
--           (0 = never), sealed, …} — its tenant's policy flag and live secrets by
--           API, as secrets_read.lua gives them —, else {} (also when a stored
--           secret is corrupt: the worker then reads them itself),
--           send µs: the instant to send at, ≥ now (below)}
--          {'early', wait µs}           not yet: claim again after wait
--          {'stale', state}             gen not current or not released ('' = no record)
--          {'canceled'}
--          {'returned', reason}         back to the head lane unsent, gen + 1, no
--                                       attempt: disabled | paused | concurrency
--
-- The jobs are claimed one after the other, in request order, at one now:
-- each decides on the state the ones before it left (a job twice in one
-- call: the second is stale), and one job's refusal leaves the others as
-- they are. Each tenant's policy and state are read once and saved once.
--
-- released(gen) → running(gen) when gen is current, the job is not
-- canceled, the tenant is neither disabled nor paused (admin or upstream)
-- and has running < concurrency (the job itself is counted as released),
-- and now ≥ target − ε (below). Then attempt + 1, claimed = now, first =
-- now on the first attempt, the lease deadline becomes send + timeout +
-- grace (send: below; grace: the pass's, field grace), and the job counts
-- toward concurrency as running.
--
-- The send schedule (tenant fields slast, sslot, stat) keeps late claims
-- from clumping. slast is when the last job went out and sslot its planned
-- slot; a job planned at or after sslot goes out at target = max(slot,
-- slast + (slot − sslot)) (lib.lua send_target): on time that is its slot;
-- after a late claim — the task waited in asynq, Redis was slow — the jobs
-- planned after it keep their planned distances from it, each at its own
-- instant, in order. A job planned before the last one sent (it arrived
-- out of order) goes out when stat, a GCRA over claim instants, allows:
-- target = max(slot, stat − (b − c)·T) (T the effective interval T_eff);
-- when that is not now, the target is reserved for it (record field resv;
-- stat and slast move past it, so the jobs planned later wait behind it
-- instead of starving it). A claim is allowed from target − ε; the job is
-- sent at send = max(now, target) — for an in-plan job whose target is past
-- its slot max(now, slot, target − κ): a late schedule catches up κ a job,
-- κ = min(ε/4, 0.5 ms) — which the reply tells the worker (it waits for that instant: a
-- claim's round trip, early by up to ε, never moves a send); then stat ←
-- max(stat, send) + c·T and slast, sslot ← send, slot — for an
-- out-of-order job only slast ← max(slast, send), and nothing for one that
-- had reserved its turn. Late jobs thus never go out in a clump, none
-- forfeits its slot, and the order holds. The pass moves sslot where the
-- plan has a gap (pass.lua), so a lateness does not outlive the backlog it
-- happened in; it also tells the worker send_target, so one claim per job
-- is the norm.
-- A tenant given a job back ends with reschedule(tenant) and its expiry. A
-- claim changes nothing its ready score depends on but the released tokens
-- (released to running: the concurrency sum stays), which only matter when
-- the release cap held the tenant out of ready; so a tenant whose ready
-- score stood for its state at its load (field rs = lib.lua sched_sig,
-- which leaves the released tokens out; the last reschedule records a
-- tenant held by its cap as RS_HELD) is not rescheduled; any other is. When a
-- reschedule moved the shard's earliest time earlier, a wake-up is
-- published (lib.lua wake_if_earlier).

local eps = tonum(ARGV[3])
local n = (#ARGV - 3) / 2
if not eps or n < 1 or n ~= mfloor(n) then
  return redis.error_reply('ERR sluice claim: want a tolerance and (id, gen) pairs')
end
local reqs = {}
for i = 1, n do
  local gen = tonum(ARGV[3 + 2 * i])
  if not gen then return redis.error_reply('ERR sluice claim: want integer gens') end
  reqs[i] = {id = ARGV[2 + 2 * i], gen = gen}
end

-- touched[tn]: 'saved' (a reservation: save only), 'claimed' (a job
-- claimed: save, and reschedule unless the score stands) or 'moved' (a
-- job given back: save, reschedule, expire); the strongest wins.
local touched = {}
local RANK = {saved = 1, claimed = 2, moved = 3}
local function touch(tn, how)
  if RANK[how] > (RANK[touched[tn]] or 0) then touched[tn] = how end
end

local function give_back(j, t, reason)
  rcall('ZREM', K_LEASES, j.id)
  unrelease(j, t)
  to_head(j, t, 1)
  touch(j.tenant, 'moved')
  return {'returned', reason}
end

-- claim_one claims one job (read phase: its record, then its tenant from
-- the call's cache; write phase: the transition).
local function claim_one(id, gen)
  local j = CLAIM.load(id) -- lifecycle.lua
  if not j then return {'stale', ''} end
  if j.state == 'canceled' then return {'canceled'} end
  if j.state ~= 'released' or j.gen ~= gen then return {'stale', j.state} end
  if NOW < j.slot - eps then return {'early', j.slot - NOW} end
  local tn = j.tenant
  local t, p = tenant(tn)
  local c = TENANTS[tn]
  -- What its ready score stands for (false: held out by its release cap).
  if c.sig == nil then c.sig = t.rs ~= RS_HELD and sched_sig(t, p) end

  if t.disabled == 1 then return give_back(j, t, 'disabled') end
  if t.admin_paused == 1 or gate(t) > NOW then return give_back(j, t, 'paused') end
  if t.running >= p.concurrency then return give_back(j, t, 'concurrency') end

  -- The send schedule (lib.lua send_target; a GCRA for out-of-order jobs).
  local iv = interval(t, p)
  local target = send_target(t, j.slot)
  local in_plan = target ~= nil
  if not in_plan and j.resv > 0 then
    target = j.resv
  elseif not in_plan then
    target = mmax(j.slot, t.stat - (p.burst - j.cost) * iv)
    if NOW < target - eps then
      -- Reserve its turn: the GCRA and the jobs planned after the last one
      -- sent move behind it, so a stream of them cannot starve it.
      t.stat = mmax(t.stat, target) + j.cost * iv
      t.slast = mmax(t.slast, target)
      rcall('HSET', k_job(id), 'resv', target)
      touch(tn, 'saved')
      return {'early', target - NOW}
    end
  end
  if NOW < target - eps then return {'early', target - NOW} end

  -- The send instant (lifecycle.lua CLAIM.send): the target, or now when
  -- the claim came after it. A claim up to ε early is answered at once and
  -- the worker waits for it, so the claim's round trip never shows in the
  -- send. A schedule running late catches up κ = min(ε/4, 0.5 ms) a job
  -- (an in-plan target past the slot is sent κ early, never before the
  -- slot): a lateness does not last the whole backlog, the long-run rate
  -- stays the tenant's, and the claim, aimed at ε/2 before the target,
  -- still has at least ε/4 of the wait to absorb its trip.
  touch(tn, 'claimed')
  return CLAIM.run(j, c, CLAIM.send(j, target, in_plan, eps), in_plan, {}, iv) -- lifecycle.lua
end

local reply = {'ok'}
for i, r in ipairs(reqs) do reply[i + 1] = claim_one(r.id, r.gen) end
leases_flush()

-- Every tenant changed: saved; those given a job back or freed from their
-- release cap also rescheduled and expired, then the wake check; the
-- aggregates written once after them (lib.lua AGG).
AGG.hold()
ready_defer() -- lib.lua: the ready set written once, after the last tenant
for _, tn in ipairs(TENANT_ORDER) do
  local how = touched[tn]
  if how then
    local c = TENANTS[tn]
    local stands = how == 'claimed' and c.t.rs == c.sig -- and rs with it: claims change nothing it covers
    if how ~= 'saved' and not stands then
      note_earliest()
      lowered(reschedule(tn, c.t, c.p, NOW))
      how = 'moved'
    end
    if how ~= 'saved' then c.t.st_rsnow = 1 end -- rs is the digest now, for save_tenant's mint (lib.lua)
    save_tenant(tn, c.t)
    if how == 'moved' then expire_tenant(tn, c.t, c.p, NOW) end
  end
end
ready_flush()
AGG.flush()
wake_if_earlier()
return reply
