-- workers.lua — worker heartbeats and the total worker capacity (docs/design.md §2.2).
-- A standalone script (clock.lua, no lib.lua): its one key is not shard-tagged.
--
-- KEYS[1]  <p>:workers (HASH worker id → "<concurrency> <expiry µs>")
-- ARGV[1]  now µs (0 = Redis TIME)
-- ARGV[2]  op: beat | sum
-- ARGV[3…] beat: worker id, concurrency, ttl µs
-- Reply:   beat → {'ok'}; sum → {'ok', total concurrency, live workers,
--          live workers whose id says they run pre-claimed jobs}
--
-- beat writes the entry with expiry now + ttl and keeps the hash alive at
-- least that long. sum adds the concurrency of the entries not yet expired
-- and deletes the expired ones. A worker id that begins with '@1:' is one
-- of a process that runs pre-claimed jobs (fleet.Heartbeat adds it; an
-- entry's value keeps its format, which earlier versions read).

local NOW = clock(ARGV[1]) -- clock.lua
local key = KEYS[1]

if ARGV[2] == 'beat' then
  local conc, ttl = tonumber(ARGV[4]), tonumber(ARGV[5])
  if not conc or not ttl or ttl < 1 then
    return redis.error_reply('ERR sluice workers: want worker, concurrency, ttl')
  end
  redis.call('HSET', key, ARGV[3], string.format('%d %d', conc, NOW + ttl))
  local ttl_ms = math.ceil(ttl / 1000)
  if redis.call('PTTL', key) < ttl_ms then redis.call('PEXPIRE', key, ttl_ms) end
  return {'ok'}
end
if ARGV[2] ~= 'sum' then return redis.error_reply('ERR sluice workers: want beat|sum') end

local total, live, capable, gone = 0, 0, 0, {}
local all = redis.call('HGETALL', key)
for i = 1, #all, 2 do
  local conc, expiry = string.match(all[i + 1], '^(%d+) (%d+)$')
  if conc and tonumber(expiry) > NOW then
    total, live = total + tonumber(conc), live + 1
    if string.sub(all[i], 1, 3) == '@1:' then capable = capable + 1 end
  else
    gone[#gone + 1] = all[i]
  end
end
if #gone > 0 then redis.call('HDEL', key, unpack(gone)) end
return {'ok', total, live, capable}
