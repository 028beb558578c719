-- callback_done.lua — record one send of a job's callback.
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  job id                    ARGV[4]  the record's ended µs the send told of
-- ARGV[5]  outcome: delivered | retry | drop
-- ARGV[6]  jitter seed
-- Reply:   {'ok', 'done' | 'stale' | 'dropped' | 'retry', due µs (retry, else 0),
--          failures so far}
--
-- delivered → the entry leaves the callback set (done). retry → the record's
-- failure count cb_n + 1; when it reaches the tenant's retry.max_attempts
-- (the policy's, merged as always) the entry leaves (dropped), else it is
-- due again at now + backoff(cb_n) ± 10 % — the tenant's retry curve
-- (lifecycle.lua backoff). drop → the entry leaves (dropped: a send that
-- can never succeed, an address the egress guard refuses). When the record
-- is gone, no longer terminal, or terminal at another ended time than the
-- send told of (replayed and ended again: a new callback is queued), the
-- send is stale: the entry leaves only when the record is gone or live.

local id, ended, outcome = ARGV[3], tonum(ARGV[4]), ARGV[5]
if not (ended and (outcome == 'delivered' or outcome == 'retry' or outcome == 'drop')) then
  return redis.error_reply('ERR sluice callback_done: bad arguments')
end
local key, jk = BASE .. 'cb', k_job(id)
local r = rcall('HMGET', jk, 'state', 'tenant', 'ended', 'gen', 'cb_n')
local state = r[1]
if not state or not (state == 'succeeded' or state == 'dead' or state == 'canceled') then
  rcall('ZREM', key, id)
  return {'ok', 'stale', 0, 0}
end
if tonum(r[3]) ~= ended then return {'ok', 'stale', 0, 0} end
local failures = tonum(r[5]) or 0
if outcome == 'delivered' then
  rcall('ZREM', key, id)
  rcall('HDEL', jk, 'cb_n')
  return {'ok', 'done', 0, failures}
end
failures = failures + 1
local p = load_policy(r[2])
if outcome == 'drop' or failures >= p.max_attempts then
  rcall('ZREM', key, id)
  rcall('HSET', jk, 'cb_n', istr(failures))
  return {'ok', 'dropped', 0, failures}
end
local due = NOW + backoff(p, failures, jitter(ARGV[6], {id = id, gen = tonum(r[4]) or 0}))
rcall('ZADD', key, istr(due), id)
rcall('HSET', jk, 'cb_n', istr(failures))
return {'ok', 'retry', due, failures}
