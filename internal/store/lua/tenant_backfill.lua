-- tenant_backfill.lua — add tenants whose state predates the tenant index
-- to the index and its name set (tenants.lua).
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  done: '1' = this is the shard's last batch: set its marker
--          <p>:{sN}:tenants_backfilled (no TTL) after it; '0' = not
-- ARGV[4…] tenants of this shard, at most 1000
-- Reply:   {'ok', now, tenants added to the index or the name set}
--
-- A tenant with state (has_state) that is not in the index enters it as it
-- would have (index_check's next check time), and its name enters the name
-- set; a tenant already in either is left as it is there (ZADD NX), one with
-- no state is skipped. Idempotent: a second run over the same tenants adds
-- nothing.

if #ARGV - 3 > 1000 or (ARGV[3] ~= '0' and ARGV[3] ~= '1') then
  return redis.error_reply('ERR sluice tenant_backfill: want done 0|1 and at most 1000 tenants')
end
local added = 0
for i = 4, #ARGV do
  local tn = ARGV[i]
  local at = index_check(tn)
  if at then
    local a = redis.call('ZADD', k_index(), 'NX', istr(at), tn)
    if redis.call('ZADD', k_names(), 'NX', 0, tn) + a > 0 then added = added + 1 end
  end
end
if ARGV[3] == '1' then redis.call('SET', BASE .. 'tenants_backfilled', istr(NOW)) end
return {'ok', NOW, added}
