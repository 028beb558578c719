-- tenant_state.lua — read one tenant's state (no writes).
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  tenant
-- Reply:   {'ok', now, exists (0|1), live, bytes, queued jobs, queued tokens,
--           running, released, admission tokens now, ready score (-1 = not
--           in ready), TAT, paused_until, admin_paused, disabled,
--           overrides version, effective policy as JSON,
--           released tokens, admin_until, vt, dead letters,
--           rate factor ppm, effective interval µs, cut_until}
--
-- Admission tokens and TAT are reported as the next decision would see them
-- (refilled to now, rescaled to the current policy), without writing back;
-- likewise the rate factor (full for a tenant that is not adaptive) and the
-- effective interval T_eff = ⌈T·10⁶ / f⌉ (lib.lua interval).

local tn = ARGV[3]
local p, version = load_policy(tn)
local exists = redis.call('EXISTS', k_tenant(tn))
local t = load_tenant(tn, p)
rescale_tat(t, p, NOW)
refill(t, p, NOW)
local queued = redis.call('LLEN', k_queue(tn)) + redis.call('ZCARD', k_head(tn))
local score = tonumber(redis.call('ZSCORE', K_READY, tn)) or -1
return {'ok', NOW, exists, t.live, t.bytes, queued, t.qtok, t.running, t.released,
  t.atok, score, t.tat, t.paused_until, t.admin_paused, t.disabled, version, cjson.encode(p),
  t.rtok, t.admin_until, t.vt, redis.call('ZCARD', k_dead(tn)),
  factor(t, p), interval(t, p), t.cut_until}
