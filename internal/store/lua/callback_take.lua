-- callback_take.lua — take the shard's due callbacks for sending.
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  the most to take (≥ 1)    ARGV[4]  lease µs (≥ 1)
-- Reply:   {'ok', now, next, id, …}  the jobs whose callback is due,
--          oldest first; next: the earliest due time left in the set after
--          the take (the taken ones' lease ends included), 0 when empty
--
-- The callback set <p>:{sN}:cb holds job id → due time (µs): queued by
-- every terminal transition (lifecycle.lua callback_due), due again after a
-- failed send (callback_done.lua). A taken entry's due time moves to now +
-- lease, so no other sender takes it meanwhile, and a sender that dies with
-- it leaves it due again when the lease ends: at least once.

local n, lease = tonum(ARGV[3]), tonum(ARGV[4])
if not (n and n >= 1 and lease and lease >= 1) then
  return redis.error_reply('ERR sluice callback_take: bad arguments')
end
local key = BASE .. 'cb'
local ids = rcall('ZRANGEBYSCORE', key, '-inf', istr(NOW), 'LIMIT', 0, n)
local reply = {'ok', NOW, 0}
for _, id in ipairs(ids) do
  rcall('ZADD', key, istr(NOW + lease), id)
  reply[#reply + 1] = id
end
local first = rcall('ZRANGE', key, 0, 0, 'WITHSCORES')
if first[2] then reply[3] = tonum(first[2]) end
return reply
