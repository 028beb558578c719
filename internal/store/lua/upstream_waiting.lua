-- upstream_waiting.lua — the jobs of one shard waiting on an upstream, by
-- tenant (UpstreamRuntime). Reads only.
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  upstream name             ARGV[4]  most tenants (≥ 1)
-- Reply:   {'ok', more (0|1), tenant, jobs, tenant, jobs, …}: the tenants of
--          the shard's waiting set of the upstream (lanes.lua LN.k_wait), at
--          most ARGV[4] of them, each with the jobs queued in its lanes
--          naming the upstream (0: its entry is stale); more = 1 when the
--          set holds more tenants.

local name, limit = ARGV[3], tonum(ARGV[4])
if not limit or limit < 1 then return redis.error_reply('ERR sluice upstream_waiting: want a limit ≥ 1') end
local tenants = rcall('ZRANGE', LN.k_wait(name), 0, limit)
local more = 0
if #tenants > limit then
  more = 1
  tenants[#tenants] = nil
end
local reply = {'ok', more}
for _, tn in ipairs(tenants) do
  local n = 0
  for _, ups in ipairs(rcall('SMEMBERS', LN.k_lanes(tn))) do
    for _, u in ipairs(LN.names(ups)) do
      if u == name then
        n = n + rcall('ZCARD', LN.k_lane(tn, ups))
        break
      end
    end
  end
  reply[#reply + 1] = tn
  reply[#reply + 1] = n
end
return reply
