-- policy_put.lua — replace one entry of the shard's policy hash (docs/design.md §3).
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  field: a tenant, or '*' for the shard's defaults
-- ARGV[4]  the entry as a JSON object of integer fields, without "version"
-- ARGV[5]  If-Match version: the write happens only when the entry's current
--          version equals it (0 = the entry must not exist); -1 = always
-- Reply:   {'ok', new version} | {'version_mismatch', current version}
--
-- The stored entry is the given object plus "version" = current + 1; field
-- "#v" gets a new epoch (lib.lua load_policy). For a
-- tenant entry whose tenant has state, the change is applied at once: the
-- bucket is brought to now under the old policy, TAT is rescaled to the new
-- T and b (lib.lua rescale_tat), admission tokens are kept, capped at the new
-- admit_burst; then reschedule(tenant), expiry and the wake check. A change of
-- '*' reaches each tenant lazily, at its next decision (rescale_tat).

local field = ARGV[3]
local ok, entry = pcall(cjson.decode, ARGV[4])
local if_version = tonumber(ARGV[5])
if not ok or type(entry) ~= 'table' or not if_version then
  return redis.error_reply('ERR sluice policy_put: want a JSON object and a version')
end

-- Read phase.
local raw = redis.call('HMGET', K_POLICY, '*', field, '#v')
local defaults = decode_policy(raw[1])
local current = decode_policy(raw[2])
local version = tonumber(current.version) or 0
if if_version >= 0 and if_version ~= version then return {'version_mismatch', version} end
entry.version = version + 1
local encoded = cjson.encode(entry)
-- A new epoch (lib.lua load_policy): scripts read the hash afresh.
local epoch = redis.sha1hex((raw[3] or '') .. ':' .. istr(NOW) .. ':' .. field .. ':' .. encoded)
if field == '*' then
  redis.call('HSET', K_POLICY, '*', encoded, '#v', epoch)
  return {'ok', entry.version}
end

local has_state = redis.call('EXISTS', k_tenant(field)) == 1
local before = shard_earliest()
local old = merge_policy(defaults, current)
local new = merge_policy(defaults, entry)
local t = load_tenant(field, old)
t.st_w = new.weight or 1 -- the weight it holds slots with (lib.lua FAIR) follows the policy
rescale_tat(t, old, NOW)
refill(t, old, NOW)
rescale_tat(t, new, NOW)
refill(t, new, NOW)

-- Write phase.
redis.call('HSET', K_POLICY, field, encoded, '#v', epoch)
if not has_state then -- tenants.lua
  redis.call('ZADD', k_index(), istr(NOW + INDEX_RECHECK), field)
  redis.call('ZADD', k_names(), 0, field)
end
if has_state then
  reschedule(field, t, new, NOW)
  save_tenant(field, t)
  expire_tenant(field, t, new, NOW)
  wake(before)
end
return {'ok', entry.version}
