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
--           rate factor ppm, effective interval µs, cut_until,
--           oldest queued job's created µs (-1 = none), inflow minute,
--           tokens admitted in that minute, tokens admitted the minute before}
--
-- Admission tokens and TAT are reported as the next decision would see them
-- (refilled to now, rescaled to the current policy), without writing back;
-- likewise the rate factor (full for a tenant that is not adaptive) and the
-- effective interval T_eff = ⌈T·10⁶ / f⌉ (lib.lua interval).

return tenant_view(ARGV[3]) -- tenants.lua
