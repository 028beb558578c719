-- secrets_write.lua — add or delete one of a tenant's webhook secrets by API.
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  tenant                    ARGV[4]  op: 'add' | 'delete'
-- ARGV[5]  the secret's id (Go checks its form: never starting with '~')
-- add:     ARGV[6] the sealed secret (secretbox text, no spaces)
--          ARGV[7] expire_previous_in µs (≥ 0): every live secret expires
--                  at min(its expiry, now + this)
--          ARGV[8] the most live secrets, the new one included
-- Reply:   add    {'ok', now} | {'conflict', live secrets} (too many)
--          delete {'ok'} | {'not_found'} (no such secret, or expired)
--
-- The hash sec:<tenant> holds one field per secret, "<created µs> <expires
-- µs, 0 = never> <sealed>", and the summary '~live' that enqueue.lua reads
-- (lib.lua secret_live): -1 when a live secret never expires, else the
-- latest expiry. Every write drops the expired secrets and rewrites the
-- summary; a hash left with no secret is deleted. An add enters the tenant
-- in the shard's tenant index and name set (tenants.lua). Reads before writes: a
-- refusal writes nothing.

local tn, op, id = ARGV[3], ARGV[4], ARGV[5]
if (op ~= 'add' and op ~= 'delete') or not id or id == '' or string.sub(id, 1, 1) == '~' then
  return redis.error_reply('ERR sluice secrets_write: want op add|delete and an id')
end
local key = k_secrets(tn)

-- Read phase: every secret, parsed; the policy epoch (renewed below).
local all = rcall('HGETALL', key)
local epoch = rcall('HGET', K_POLICY, '#v') or ''
local secrets = {}
for i = 1, #all, 2 do
  local f = all[i]
  if string.sub(f, 1, 1) ~= '~' then
    local created, expires, sealed = string.match(all[i + 1], '^(%d+) (%d+) (%S+)$')
    if not created then return redis.error_reply('ERR sluice secrets_write: corrupt secret in ' .. key) end
    secrets[f] = {created = created, expires = tonum(expires), sealed = sealed}
  end
end

local function live(s) return s.expires == 0 or s.expires > NOW end

local reply
if op == 'add' then
  local sealed, within, most = ARGV[6], tonum(ARGV[7]), tonum(ARGV[8])
  if not sealed or sealed == '' or string.find(sealed, ' ') or not within or within < 0 or not most or most < 1 then
    return redis.error_reply('ERR sluice secrets_write: bad add arguments')
  end
  local n = 0
  for _, s in pairs(secrets) do
    if live(s) then n = n + 1 end
  end
  if within == 0 then n = 0 end -- every previous secret expires now
  if n + 1 > most then return {'conflict', n} end
  local until_us = NOW + within
  for _, s in pairs(secrets) do
    if live(s) and (s.expires == 0 or s.expires > until_us) then s.expires, s.changed = until_us, true end
  end
  secrets[id] = {created = istr(NOW), expires = 0, sealed = sealed, changed = true}
  reply = {'ok', NOW}
else
  if not secrets[id] or not live(secrets[id]) then return {'not_found'} end
  secrets[id] = nil
  rcall('HDEL', key, id)
  reply = {'ok'}
end

-- Write phase: drop the expired, write the changed, rewrite the summary.
local summary, gone, set = 0, {}, {}
for f, s in pairs(secrets) do
  if not live(s) then
    gone[#gone + 1] = f
  else
    if s.expires == 0 then summary = -1 elseif summary ~= -1 then summary = mmax(summary, s.expires) end
    if s.changed then
      set[#set + 1] = f
      set[#set + 1] = s.created .. ' ' .. istr(s.expires) .. ' ' .. s.sealed
    end
  end
end
if #gone > 0 then rcall('HDEL', key, unpack(gone)) end
if summary == 0 then
  rcall('DEL', key)
else
  set[#set + 1] = '~live'
  set[#set + 1] = istr(summary)
  rcall('HSET', key, unpack(set))
  if op == 'add' then -- the tenant is listed while it holds secrets (tenants.lua)
    rcall('ZADD', k_index(), 'NX', istr(NOW + INDEX_RECHECK), tn)
    rcall('ZADD', k_names(), 'NX', 0, tn)
  end
end
-- The shard's secrets counter (field "#sv" of its policy hash, beside the
-- policy epoch "#v"): workers re-read a tenant's secrets only when the
-- shard's pair moved (Store.SettingsVersion). The policy epoch is renewed
-- too, as policy_put.lua does: claims remember the secrets hashes they
-- read per epoch (lib.lua signing_set).
rcall('HINCRBY', K_POLICY, '#sv', 1)
rcall('HSET', K_POLICY, '#v', redis.sha1hex(epoch .. ':' .. istr(NOW) .. ':sec:' .. tn .. ':' .. op .. ':' .. id))
return reply
