-- circuit.lua — the destinations' circuits (docs/design.md §4.5).
-- A standalone script (clock.lua, no lib.lua): its keys share the hash tag
-- {circuits}, one slot for all shards.
--
-- KEYS[1]  <p>:{circuits}:c (HASH destination → "<failures> <state> <until µs>
--          <backoff µs> <probe deadline µs> <changed µs> <probe> <scout>
--          <scout deadline µs>"; state 0 closed, 1 open, 2 half-open; probe
--          the job "<id>:<gen>" that holds the probe, scout the job (id)
--          held to come back at the backoff's end, '-' for none). A destination
--          without a field is closed with no failure: only destinations that
--          failed are stored.
-- KEYS[2]  gate, report, close: <p>:{circuits}:w:<destination> (SET of the
--          tenants with jobs held long for it, to wake when it closes)
-- ARGV[1]  now µs (0 = Redis TIME)
-- ARGV[2]  op: gate | report | list | close
-- ARGV[3…] gate:   destination, job "<id>:<gen>", probe life µs (> 0), tenant,
--                  max backoff µs (≥ 1)
--          report: destination, job "<id>:<gen>", failed (0|1), failures to
--                  open (≥ 1), backoff µs (≥ 1), max backoff µs (≥ backoff)
--          list:   —
--          close:  destination
-- Reply:   gate   → {'ok', 'send'} | {'ok', 'probe'} | {'ok', 'wait', until µs, now µs}
--          report → {'ok', what, state, until µs[, tenant, …]} with what one
--                   of counted (a failure below the threshold), opened (this
--                   failure opened it), reopened (the probe failed: open
--                   again for twice the backoff, at most the max), closed
--                   (the probe answered: the field is deleted; the tenants
--                   of KEYS[2] follow, to wake, and KEYS[2] is deleted),
--                   clean (an answer while closed: the failures are
--                   forgotten), ignored (an outcome of a job sent before the
--                   circuit opened, or of a probe that is not the current one)
--          list   → {'ok', now µs, destination, value, …} (the hash, after
--                   dropping closed fields unchanged for STALE)
--          close  → {'ok', 1 | 0, tenant, …} (1: there was a field; it is
--                   deleted; the tenants of KEYS[2] follow, as for closed)
--
-- gate decides whether job may be sent now: closed → send; open from until
-- on (or half-open from the probe's deadline on: the probe's worker died) →
-- half-open, job is the one probe until now + probe life (its timeout and
-- the grace) → probe. Before that the job waits: the scout (the first job
-- held since the last scout's deadline passed, or the scout again, at any
-- gen: a failed probe retried is still the scout) until
-- the backoff's end, or the probe's deadline while half-open, to probe or
-- to look again; any other job long — until then + probe life + max
-- backoff — its tenant added to KEYS[2]: it comes back when the circuit
-- closes (the caller of the closing report wakes the tenants), else after
-- the longest a failed probe can reopen it for. Each return of a held job
-- costs its tenant a release: only the scout returns each backoff.
-- report records an attempt's outcome: only a timeout or a connection
-- failure is failed = 1; any HTTP answer is 0.

local NOW = clock(ARGV[1]) -- clock.lua
local key, op = KEYS[1], ARGV[2]
local STALE = 3600000000 -- 1 h: a closed destination not heard of since is forgotten

local function decode(v)
  local f, st, untl, bo, pdl, ch, probe, scout, sdl = string.match(v or '',
    '^(%d+) (%d) (%d+) (%d+) (%d+) (%d+) (%S+) (%S+) (%d+)$')
  if not f then return nil end
  return {f = tonumber(f), st = tonumber(st), untl = tonumber(untl), bo = tonumber(bo),
    pdl = tonumber(pdl), ch = tonumber(ch), probe = probe, scout = scout, sdl = tonumber(sdl)}
end

local function encode(c)
  return string.format('%d %d %d %d %d %d %s %s %d', c.f, c.st, c.untl, c.bo, c.pdl, c.ch, c.probe, c.scout, c.sdl)
end

local function bad(what) return redis.error_reply('ERR sluice circuit: ' .. what) end

-- waiters appends KEYS[2]'s tenants to out and deletes it.
local function waiters(out)
  for _, tn in ipairs(redis.call('SMEMBERS', KEYS[2])) do out[#out + 1] = tn end
  redis.call('DEL', KEYS[2])
  return out
end

if op == 'list' then
  local all, out, gone = redis.call('HGETALL', key), {'ok', NOW}, {}
  for i = 1, #all, 2 do
    local c = decode(all[i + 1])
    if not c or (c.st == 0 and c.ch < NOW - STALE) then
      gone[#gone + 1] = all[i]
    else
      out[#out + 1], out[#out + 2] = all[i], all[i + 1]
    end
  end
  if #gone > 0 then redis.call('HDEL', key, unpack(gone)) end
  return out
end

local dest = ARGV[3]
if not dest or dest == '' or not KEYS[2] then return bad('want a destination and its waiters key') end
if op == 'close' then return waiters({'ok', redis.call('HDEL', key, dest)}) end

local job = ARGV[4]
if not job or job == '' or string.find(job, ' ', 1, true) then return bad('want a job') end
local c = decode(redis.call('HGET', key, dest))

if op == 'gate' then
  local life, tn, cap = tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7])
  if not (life and life >= 1 and tn and tn ~= '' and cap and cap >= 1) then
    return bad('want a probe life, a tenant, a max backoff')
  end
  if not c or c.st == 0 then return {'ok', 'send'} end
  local back = c.untl -- open: the backoff's end
  if c.st == 2 then back = c.pdl end -- half-open: the probe's deadline
  if NOW >= back then
    c.st, c.pdl, c.probe, c.ch = 2, NOW + life, job, NOW
    redis.call('HSET', key, dest, encode(c))
    return {'ok', 'probe'}
  end
  local id = string.match(job, '^(.+):%d+$') or job -- the scout is a job, whatever its gen
  if c.scout == '-' or c.scout == id or c.sdl <= NOW then
    c.scout, c.sdl = id, back + life
    redis.call('HSET', key, dest, encode(c))
    return {'ok', 'wait', back, NOW}
  end
  redis.call('SADD', KEYS[2], tn)
  return {'ok', 'wait', back + life + cap, NOW}
end

if op ~= 'report' then return bad('want gate|report|list|close') end
local failed, n, bo0, cap = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
if not ((failed == '0' or failed == '1') and n and n >= 1 and bo0 and bo0 >= 1 and cap and cap >= bo0) then
  return bad('want failed, failures, backoff, max backoff')
end

if failed == '0' then
  if not c then return {'ok', 'clean', 0, 0} end
  if c.st == 0 then
    redis.call('HDEL', key, dest)
    return {'ok', 'clean', 0, 0}
  end
  if c.st == 2 and c.probe == job then
    redis.call('HDEL', key, dest)
    return waiters({'ok', 'closed', 0, 0})
  end
  return {'ok', 'ignored', c.st, c.st == 1 and c.untl or c.pdl}
end

c = c or {f = 0, st = 0, untl = 0, bo = 0, pdl = 0, ch = NOW, probe = '-', scout = '-', sdl = 0}
if c.st == 0 then
  c.f, c.ch = c.f + 1, NOW
  local what = 'counted'
  if c.f >= n then
    c.st, c.bo, c.untl, what = 1, bo0, NOW + bo0, 'opened'
  end
  redis.call('HSET', key, dest, encode(c))
  return {'ok', what, c.st, c.untl}
end
if c.st == 2 and c.probe == job then
  c.f, c.st, c.bo, c.ch, c.probe = c.f + 1, 1, math.min(c.bo * 2, cap), NOW, '-'
  c.untl = NOW + c.bo
  redis.call('HSET', key, dest, encode(c))
  return {'ok', 'reopened', 1, c.untl}
end
return {'ok', 'ignored', c.st, c.st == 1 and c.untl or c.pdl}
