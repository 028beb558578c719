-- observe_rebuild.lua — build the shard's observation aggregates (lib.lua
-- AGG) from the tenants themselves, in one call: for a deployment from
-- before them, or to repair them.
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  force: '1' = rebuild even when built; '0' = only when not
-- Reply:   {'ok', now, tenants read, built (1 | 0: built already, not forced)}
--
-- Reads every tenant of the shard's tenant index (its hash and dead set),
-- so its cost is the shard's tenants (a few commands each): one call, run
-- once per shard after an upgrade (store.RebuildAggregates). Atomic: the
-- aggregates it writes are exact, and every script after it keeps them so.

local force = ARGV[3]
if force ~= '0' and force ~= '1' then
  return redis.error_reply('ERR sluice observe_rebuild: want force 0|1')
end
local key = AGG.key('agg')
if force == '0' and redis.call('HGET', key, 'v') == AGG.VERSION then return {'ok', NOW, 0, 0} end
redis.call('DEL', key, AGG.key('top'), AGG.key('gate:a'), AGG.key('gate:u'), AGG.key('gate:d'),
  AGG.key('gate:p'), AGG.key('dead:n'), AGG.key('dead:x'))
local open, run, dead = 0, 0, 0
local tenants = redis.call('ZRANGE', k_index(), 0, -1)
for _, tn in ipairs(tenants) do
  if redis.call('EXISTS', k_tenant(tn)) == 1 then
    local t = load_tenant(tn, BUILTIN) -- counted as save_tenant counts: its packed state (lib.lua st_*)
    open, run = open + t.st_open, run + t.st_run
    local live = t.st_open - t.st_run
    if live > 0 then redis.call('ZADD', AGG.key('top'), istr(live), tn) end
    local a, u, d = t.st_ga, t.st_gu, t.st_gd
    if a > 0 then AGG.gate('gate:a', a, tn) end
    if u > 0 then AGG.gate('gate:u', u, tn) end
    if d > 0 then AGG.gate('gate:d', d, tn) end
    if d == 0 and mmax(a, u) > 0 then AGG.gate('gate:p', mmax(a, u), tn) end
  end
  local n = redis.call('ZCARD', k_dead(tn))
  if n > 0 then
    dead = dead + n
    redis.call('HSET', AGG.key('dead:n'), tn, n)
    local ttl = redis.call('PTTL', k_dead(tn))
    if ttl >= 0 then redis.call('ZADD', AGG.key('dead:x'), istr(NOW + ttl * 1000 + 1000), tn) end
  end
end
redis.call('HSET', key, 'or', istr(open + run * AGG.RUN), 'dead', istr(dead), 'v', AGG.VERSION)
return {'ok', NOW, #tenants, 1}
