-- upstream_put.lua — write one upstream's configuration in the registry
-- (issue #15). A standalone script (clock.lua, no lib.lua): its one key is
-- the upstream's hash, in the upstream's own slot {u:<name>}.
--
-- KEYS[1]  <p>:{u:<name>}:u (HASH: cfg, p, v, src, pu, pr; tat and the
--          coordinator's fields belong to the grant script)
-- ARGV[1]  now µs (0 = Redis TIME)
-- ARGV[2]  op: 'put' (PUT /v1/upstreams/{name}) | 'seed' (the configuration
--          file at throttler start)
-- ARGV[3]  cfg: the configuration's canonical JSON (upstream.View)
-- ARGV[4]  p: the scripts' integers as JSON (upstream.Params)
-- ARGV[5]  src: 'api' | 'config' (seed: 'config')
-- ARGV[6]  put: If-Match version, -1 = any, 0 = the upstream must not exist;
--          seed: ignored
-- Reply:   {'ok', version, outcome} with outcome 'created' | 'updated' |
--          'unchanged' (seed: the stored cfg is the file's) | 'kept' (seed:
--          the stored cfg was written by PUT and differs: Redis's wins);
--          {'version_mismatch', current version (0: none)}
--
-- put writes cfg, p, src and v = current + 1. seed writes cfg, p,
-- src = 'config' and v = current + 1 when the upstream is new or was last
-- written by the file with another cfg; an upstream last written by PUT is
-- kept. Neither touches the pause (pu, pr) or the coordinator's fields.
-- Reads before writes; a refusal writes nothing.

local key, op, cfg, params, src = KEYS[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local if_version = tonumber(ARGV[6])
local ok_cfg = pcall(cjson.decode, cfg or '')
local ok_p = pcall(cjson.decode, params or '')
if (op ~= 'put' and op ~= 'seed') or (src ~= 'api' and src ~= 'config') or not ok_cfg or not ok_p or not if_version then
  return redis.error_reply('ERR sluice upstream_put: want op put|seed, cfg and p JSON, src api|config, a version')
end

-- Read phase.
local cur = redis.call('HMGET', key, 'cfg', 'v', 'src')
local version = tonumber(cur[2]) or 0
local exists = cur[1] ~= false and cur[1] ~= nil

if op == 'put' then
  if if_version >= 0 and if_version ~= version then return {'version_mismatch', version} end
else
  if exists and cur[3] == 'api' and cur[1] ~= cfg then return {'ok', version, 'kept'} end
  if exists and cur[1] == cfg then return {'ok', version, 'unchanged'} end
end

-- Write phase.
local outcome = 'updated'
if not exists then outcome = 'created' end
version = version + 1
redis.call('HSET', key, 'cfg', cfg, 'p', params, 'v', version, 'src', src)
return {'ok', version, outcome}
