-- finish.lua — record one attempt's outcome (DESIGN §2.3 step 4, §4.2).
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  job id                    ARGV[4]  gen of the claim
-- ARGV[5]  kind: success | retry | throttled | permanent | gone
-- ARGV[6]  HTTP status (0 = none)    ARGV[7]  latency µs
-- ARGV[8]  error text                ARGV[9]  pause µs asked by the upstream (0 = default)
-- ARGV[10] succeeded retention µs    ARGV[11] dead retention µs
-- ARGV[12] dead letters per tenant   ARGV[13] attempt log length
-- ARGV[14] default pause µs          ARGV[15] max pause µs
-- ARGV[16] jitter seed               ARGV[17] congestion signal (0|1)
-- ARGV[18] adaptive floor, ppm       ARGV[19] adaptive recovery step, ppm
-- ARGV[20] idempotency retention µs (0 = the record's)
-- Reply:   {'ok', state after, stale (0|1)} | {'not_found'}
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
--               (any other kind with pause > 0 pauses the tenant the same
--               way: the upstream's quota is used up, DESIGN §4.2)
--   permanent → dead;
--   gone      → the tenant is disabled; the attempt is not counted; head lane.
-- Adaptive rate (policy adaptive = 1, DESIGN §4.2; see adapt below): a
-- congestion signal (throttled, or a retry after a 5xx or a timeout: the
-- caller says which, ARGV[17]) halves the tenant's rate factor once per
-- episode, down to the floor; a success adds the step, up to full; then TAT
-- is rescaled to the new effective interval (lib.lua refactor).
-- Dead: see lib.lua to_dead. Each finish trims the tenant's dead set by age
-- and count (lib.lua trim_dead), then reschedule(tenant); when the finish
-- let a tenant at its concurrency cap back into ready at the shard's
-- earliest time, a wake-up is published.

local id, gen, kind = ARGV[3], tonumber(ARGV[4]), ARGV[5]
local status, latency, err, pause = tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8], tonumber(ARGV[9])
local cfg = {succ_ret = tonumber(ARGV[10]), dead_ret = tonumber(ARGV[11]), dead_max = tonumber(ARGV[12]),
  log_n = tonumber(ARGV[13]), def_pause = tonumber(ARGV[14]), max_pause = tonumber(ARGV[15]),
  seed = ARGV[16], idem_ret = tonumber(ARGV[20]), trim = {}}
local congested, floor, step = ARGV[17] == '1', tonumber(ARGV[18]), tonumber(ARGV[19])
local KINDS = {success = true, retry = true, throttled = true, permanent = true, gone = true}
if not (gen and KINDS[kind] and status and latency and pause and cfg.succ_ret and cfg.dead_ret
    and cfg.dead_max and cfg.log_n and cfg.def_pause and cfg.max_pause
    and floor and floor >= 1 and floor <= RF_FULL and step and step >= 1) then
  return redis.error_reply('ERR sluice finish: bad arguments')
end
local entry = {at = NOW, outcome = kind, status = status, latency = latency, err = err}

-- Read phase.
local j = load_job(id)
if not j then return {'not_found'} end
if j.state ~= 'running' or j.gen ~= gen then
  entry.stale, entry.gen = true, gen
  log_attempt(j, cfg.log_n, entry)
  return {'ok', j.state, 1}
end
local tn = j.tenant
local p = load_policy(tn)
local t = load_tenant(tn, p)
rescale_tat(t, p, NOW)
local was_capped = t.running + t.released >= p.concurrency

-- Write phase.
redis.call('ZREM', K_LEASES, id)
unrun(j, t)
log_attempt(j, cfg.log_n, entry)

local function uncount_attempt()
  j.attempt = j.attempt - 1
  redis.call('HSET', k_job(id), 'attempt', j.attempt)
end

if pause > 0 or kind == 'throttled' then -- throttled, or a pre-emptive pause (quota used up)
  local d = pause > 0 and pause or cfg.def_pause
  t.paused_until = math.max(t.paused_until, NOW + math.min(d, cfg.max_pause))
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
local function adapt()
  if p.adaptive ~= 1 or j.slot < t.cut_until then return end
  local f = factor(t, p)
  if congested then
    t.cut_until = math.max(NOW, t.paused_until, t.tat)
    f = math.max(floor, math.floor(f / 2))
  elseif kind == 'success' then
    f = math.min(RF_FULL, f + step)
  end
  if f >= RF_FULL then f = 0 end
  t.rf = f
  refactor(t, p, NOW)
end
adapt()

local state
if kind == 'success' then
  to_succeeded(j, t, NOW, cfg)
  state = 'succeeded'
elseif kind == 'retry' then
  state = retry_or_dead(j, t, p, NOW, cfg)
elseif kind == 'permanent' then
  to_dead(j, t, NOW, cfg)
  state = 'dead'
elseif kind == 'throttled' then
  uncount_attempt()
  if retry_expired(j, p, NOW) then
    to_dead(j, t, NOW, cfg)
    state = 'dead'
  else
    to_head(j, t, 1)
    state = 'queued'
  end
else -- gone
  uncount_attempt()
  t.disabled = 1
  to_head(j, t, 1)
  state = 'queued'
end

save_tenant(tn, t)
local score = reschedule(tn, t, p, NOW)
expire_tenant(tn, t, p, NOW)
trim_dead(tn, NOW, cfg)
if was_capped and score then wake_at(score) end
return {'ok', state, 0}
