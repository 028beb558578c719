-- observe_rebuild.lua — build the shard's observation aggregates (lib.lua
-- AGG) from the tenants themselves, a chunk of tenants a call: for a
-- deployment from before them, or to repair them.
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  force: '1' = start a build anew, whatever the aggregates hold;
--          '0' = go on with the build under way, or start one when the
--          aggregates were never built, or do nothing when they were
-- ARGV[4]  chunk: the most tenants this call counts, 1 … 10000
-- Reply:   {'ok', now, tenants read, state}: state 0 = built already
--          (nothing done), 1 = this call ended the build, 2 = the build goes
--          on (call again with force '0')
--
-- A build walks the shard's name set (every tenant of its index, in name
-- order) and counts each tenant's hash and dead set (a few commands a
-- tenant), chunk tenants a call, so that no call holds Redis for long
-- however many tenants the shard has (store.RebuildAggregates calls it
-- until it ends). Its start empties the aggregates and sets the cursor,
-- field "#ab" of the shard's policy hash; each call counts the tenants
-- after the cursor and moves it to the last; the last call drops the
-- cursor and marks the aggregates built (field v). Meanwhile every script
-- notes the changes of the tenants up to the cursor and leaves out those
-- of the tenants past it (lib.lua AGG.counted), whose state the walk reads
-- when it reaches them: so the aggregates are exact when the build ends,
-- and every script after it keeps them so. Two builders of one shard
-- (two throttlers starting at once) share the walk.

local force, chunk = ARGV[3], tonumber(ARGV[4])
if (force ~= '0' and force ~= '1') or not chunk or chunk < 1 or chunk > 10000 or chunk ~= math.floor(chunk) then
  return redis.error_reply('ERR sluice observe_rebuild: want force 0|1 and chunk 1 … 10000')
end
local key = AGG.key('agg')
local cursor = redis.call('HGET', K_POLICY, '#ab')
if force == '0' and not cursor and redis.call('HGET', key, 'v') == AGG.VERSION then return {'ok', NOW, 0, 0} end
if force == '1' or not cursor then -- start: nothing counted
  redis.call('DEL', key, AGG.key('top'), AGG.key('gate:a'), AGG.key('gate:u'), AGG.key('gate:d'),
    AGG.key('gate:p'), AGG.key('dead:n'), AGG.key('dead:x'))
  cursor = '='
end
local from = '-'
if #cursor > 1 then from = '(' .. string.sub(cursor, 2) end
local tenants = redis.call('ZRANGE', k_names(), from, '+', 'BYLEX', 'LIMIT', 0, chunk)
local open, run, dead = 0, 0, 0
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
if open ~= 0 or run ~= 0 then redis.call('HINCRBY', key, 'or', istr(open + run * AGG.RUN)) end
if dead ~= 0 then redis.call('HINCRBY', key, 'dead', istr(dead)) end
if #tenants < chunk then
  redis.call('HDEL', K_POLICY, '#ab')
  redis.call('HSET', key, 'v', AGG.VERSION)
  return {'ok', NOW, #tenants, 1}
end
redis.call('HSET', K_POLICY, '#ab', '=' .. tenants[#tenants])
return {'ok', NOW, #tenants, 2}
