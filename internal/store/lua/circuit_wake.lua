-- circuit_wake.lua — bring a tenant's jobs deferred for a destination back
-- now: its circuit closed (docs/design.md §4.5; circuit.go WakeDeferred).
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  tenant                    ARGV[4]  destination
-- Reply:   {'ok', jobs brought back}
--
-- The tenant's <p>:{sN}:t:<tenant>:circ:<destination> (ZSET job id → the due
-- µs its deferral set, finish.lua defer) is read and deleted, and the field
-- of <p>:{sN}:t:<tenant>:circ. A job still in the delayed set at that very
-- due time (still waiting for the destination: not canceled, not sent and
-- retried since) is due now instead; the next pass promotes it to the head
-- of its lane. The tenant's field cu goes with its last open destination
-- (the pass then reads no job's destination). The wake's time is kept for
-- an hour in <p>:{sN}:t:<tenant>:circ:woken (HASH destination → µs): a
-- deferral of a job claimed before it, finished after it, is due now
-- (finish.lua defer). A wake-up is published when
-- that moves the shard's earliest time earlier.

local tn, dest = ARGV[3], ARGV[4]
if not tn or tn == '' or not dest or dest == '' then
  return redis.error_reply('ERR sluice circuit_wake: want a tenant and a destination')
end
local ck = k_tenant(tn) .. ':circ'
local jk = ck .. ':' .. dest
local held = rcall('ZRANGE', jk, 0, -1, 'WITHSCORES')
note_earliest()
local n = 0
for i = 1, #held, 2 do
  local id, due = held[i], tonum(held[i + 1])
  if due > NOW and tonum(rcall('ZSCORE', K_DELAYED, id)) == due then
    rcall('ZADD', K_DELAYED, istr(NOW), id)
    rcall('HSET', k_job(id), 'due', istr(NOW))
    n = n + 1
  end
end
rcall('DEL', jk)
rcall('HDEL', ck, dest)
if rcall('HLEN', ck) == 0 then rcall('HDEL', k_tenant(tn), 'cu') end -- pass.lua X.hold: nothing to hold
rcall('HSET', ck .. ':woken', dest, istr(NOW)) -- finish.lua defer: a deferral decided before it is due now
rcall('PEXPIRE', ck .. ':woken', 3600000)
if n > 0 then lowered(NOW) end
wake_if_earlier()
return {'ok', n}
