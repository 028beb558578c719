-- observe.lua — the shard's observation aggregates (lib.lua AGG), read in a
-- few commands whatever the tenant count: what GET /v1/summary and the
-- state metrics read instead of walking the tenants.
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  top: how many of the largest backlogs, 0 … 1000
-- ARGV[4]  attention: how many disabled and how many paused tenants, 0 … 1000
-- ARGV[5]  clean: '1' = drop the gate entries whose time has passed
-- Reply:   {'ok', now, built (0|1), open, running, dead letters, tenants in
--           the index, admin-paused, upstream-paused, disabled, paused and not
--           disabled, {tenant, backlog, …} the top largest backlogs (backlog
--           descending, then tenant ascending), {tenant, …} up to attention
--           disabled tenants, {tenant, …} up to attention paused ones,
--           {tenant, …} when the shard holds fewer than top backlogs: the
--           first top + their count tenants of the index by name (the
--           caller fills its top with those holding no backlog, as a sort
--           by backlog then name would)}
--
-- built = 0: the shard's aggregates were never built (a deployment from
-- before them; observe_rebuild.lua builds them) and the counts are not to be
-- trusted. A dead set expired since it was counted (dead:x due) is taken out
-- of the dead count here, before the reply. The only writes: that, and the
-- passed gate entries when clean — both only drop what no longer counts.

local ntop, natt, clean = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
if not ntop or ntop < 0 or ntop > 1000 or not natt or natt < 0 or natt > 1000 or (clean ~= '0' and clean ~= '1') then
  return redis.error_reply('ERR sluice observe: want top 0 … 1000, attention 0 … 1000, clean 0|1')
end
local key = AGG.key('agg')
local a = redis.call('HMGET', key, 'v', 'or', 'dead')
local open, running = AGG.split(a[2]) -- lib.lua
local built = 0
if a[1] == AGG.VERSION then built = 1 end

-- Dead sets expired since counted: out of the count.
local dead = tonumber(a[3]) or 0
local xkey, nkey = AGG.key('dead:x'), AGG.key('dead:n')
for _, tn in ipairs(redis.call('ZRANGEBYSCORE', xkey, '-inf', istr(NOW), 'LIMIT', 0, 100)) do
  local ttl = redis.call('PTTL', k_dead(tn))
  if ttl ~= -2 then -- still there (-1: no TTL, looked at again in an hour)
    if ttl < 0 then ttl = 3600000 end
    redis.call('ZADD', xkey, istr(NOW + ttl * 1000 + 1000), tn)
  else
    local n = tonumber(redis.call('HGET', nkey, tn)) or 0
    redis.call('HDEL', nkey, tn)
    redis.call('ZREM', xkey, tn)
    if n ~= 0 then
      dead = redis.call('HINCRBY', key, 'dead', istr(-n))
    end
  end
end

local now = istr(NOW)
local counts = {}
for i, g in ipairs({'gate:a', 'gate:u', 'gate:d', 'gate:p'}) do
  local gk = AGG.key(g)
  if clean == '1' then redis.call('ZREMRANGEBYSCORE', gk, '-inf', now) end
  counts[i] = redis.call('ZCOUNT', gk, '(' .. now, '+inf')
end

-- The ntop largest backlogs, ties by tenant: ZREVRANGE orders ties by
-- tenant descending, so those at the last score are read again ascending.
local top = {}
if ntop > 0 then
  local tk = AGG.key('top')
  local r = redis.call('ZREVRANGE', tk, 0, ntop - 1, 'WITHSCORES')
  local above = #r / 2
  if above == ntop then
    local last = r[#r]
    above = redis.call('ZCOUNT', tk, '(' .. last, '+inf')
    for i = 1, above * 2 do top[i] = r[i] end
    for _, tn in ipairs(redis.call('ZRANGEBYSCORE', tk, last, last, 'LIMIT', 0, ntop - above)) do
      top[#top + 1] = tn
      top[#top + 1] = last
    end
  else
    top = r
  end
  for i = 2, #top, 2 do top[i] = tonumber(top[i]) end
end

local names = {}
if #top < 2 * ntop then names = redis.call('ZRANGE', k_names(), 0, ntop + #top / 2 - 1) end

local disabled, paused = {}, {}
if natt > 0 then
  disabled = redis.call('ZRANGE', AGG.key('gate:d'), 0, natt - 1)
  paused = redis.call('ZRANGEBYSCORE', AGG.key('gate:p'), '(' .. now, '+inf', 'LIMIT', 0, natt)
end

return {'ok', NOW, built, open, running, dead, redis.call('ZCARD', k_index()),
  counts[1], counts[2], counts[3], counts[4], top, disabled, paused, names}
