-- task_workers.lua — heartbeats of the sluicetask middleware on one task queue
-- (docs/design.md §2.5). A standalone script (clock.lua, no lib.lua): its one key is not
-- shard-tagged.
--
-- KEYS[1]  <p>:mw:<queue> (HASH instance id → "<concurrency> <expiry µs> <tci µs>")
-- ARGV[1]  now µs (0 = Redis TIME)
-- ARGV[2]  op: beat | drop | list
-- ARGV[3…] beat: instance id, concurrency, task check interval µs, ttl µs;
--          drop: instance id
-- Reply:   beat, drop → {'ok'};
--          list → {'ok', id, concurrency, tci µs, expiry µs, …} for every live
--          instance (expiry > now and concurrency > 0)
--
-- beat writes the entry with expiry now + ttl and keeps the hash alive at
-- least that long. drop deletes the entry (a middleware that stops). list
-- deletes the expired entries on the way; an entry with concurrency 0 that
-- has not expired is kept but is not live.

local NOW = clock(ARGV[1]) -- clock.lua
local key = KEYS[1]
local op = ARGV[2]

if op == 'beat' then
  local conc, tci, ttl = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
  if not conc or not tci or not ttl or ttl < 1 then
    return redis.error_reply('ERR sluice task_workers: want instance, concurrency, tci, ttl')
  end
  redis.call('HSET', key, ARGV[3], string.format('%d %d %d', conc, NOW + ttl, tci))
  local ttl_ms = math.ceil(ttl / 1000)
  if redis.call('PTTL', key) < ttl_ms then redis.call('PEXPIRE', key, ttl_ms) end
  return {'ok'}
end
if op == 'drop' then
  redis.call('HDEL', key, ARGV[3])
  return {'ok'}
end
if op ~= 'list' then return redis.error_reply('ERR sluice task_workers: want beat|drop|list') end

local out, gone = {'ok'}, {}
local all = redis.call('HGETALL', key)
for i = 1, #all, 2 do
  local conc, expiry, tci = string.match(all[i + 1], '^(%d+) (%d+) (%d+)$')
  if not conc or tonumber(expiry) <= NOW then
    gone[#gone + 1] = all[i]
  elseif tonumber(conc) > 0 then
    out[#out + 1] = all[i]
    out[#out + 1] = tonumber(conc)
    out[#out + 1] = tonumber(tci)
    out[#out + 1] = tonumber(expiry)
  end
end
if #gone > 0 then redis.call('HDEL', key, unpack(gone)) end
return out
