-- admin.lua — pause or resume one tenant (docs/design.md §6, admin routes).
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  op: pause | resume        ARGV[4]  tenant
-- ARGV[5]  pause: until µs (0 = indefinitely)
-- Reply:   {'ok', ready score µs (-1 = not in ready)}
--
-- pause with until = 0 sets admin_paused (the tenant leaves ready until a
-- resume); with until > 0 it sets admin_until (no slot before it) and clears
-- admin_paused: the latest pause wins. resume clears admin_paused,
-- admin_until, the upstream pause (paused_until) and the 410 disable. Both
-- end with reschedule(tenant), expiry and the wake check; released jobs see
-- a pause at their claim and return to the head lane unsent.

local op, tn, until_us = ARGV[3], ARGV[4], tonumber(ARGV[5])
if (op ~= 'pause' and op ~= 'resume') or not until_us then
  return redis.error_reply('ERR sluice admin: want pause|resume, tenant, until')
end

-- Read phase.
local p = load_policy(tn)
local t = load_tenant(tn, p)
rescale_tat(t, p, NOW)
local before = shard_earliest()

-- Write phase.
if op == 'pause' then
  if until_us == 0 then
    t.admin_paused, t.admin_until = 1, 0
  else
    t.admin_paused, t.admin_until = 0, until_us
  end
else
  t.admin_paused, t.admin_until, t.paused_until, t.disabled = 0, 0, 0, 0
end
local score = reschedule(tn, t, p, NOW)
save_tenant(tn, t)
expire_tenant(tn, t, p, NOW)
wake(before)
return {'ok', score or -1}
