-- dead_letters.lua — one page of a tenant's dead letters, oldest first (no writes).
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  tenant                    ARGV[4]  limit, 1 … 1000
-- ARGV[5]  cursor: the score (death time µs) of the last item seen, -1 = from the start
-- ARGV[6]  cursor: the id of the last item seen
-- Reply:   {'ok', next score (-1 = no more), next id, {id, {field, value, …}}, …}
--
-- The dead set orders (score, id); the page starts after the cursor's
-- position, so items replayed or trimmed in between shift nothing.

local tn, limit, cscore, cid = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
if not limit or limit < 1 or not cscore then
  return redis.error_reply('ERR sluice dead_letters: want limit ≥ 1 and a cursor score')
end
local key = k_dead(tn)
local start = dead_start(key, cscore, cid) -- tenants.lua
local page = redis.call('ZRANGE', key, start, start + limit - 1, 'WITHSCORES')
local reply = {'ok', -1, ''}
for i = 1, #page, 2 do
  local h = redis.call('HGETALL', k_job(page[i]))
  if #h > 0 then reply[#reply + 1] = {page[i], h} end -- an expired record is skipped
end
if #page == 2 * limit and redis.call('ZCARD', key) > start + limit then
  reply[2], reply[3] = tonumber(page[#page]), page[#page - 1]
end
return reply
