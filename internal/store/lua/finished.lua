-- finished.lua — the jobs that ended by an attempt on the shard over the last seconds.
--
-- KEYS[1]  <p>:{sN}:ready
-- ARGV[1]  shard base <p>:{sN}:      ARGV[2]  now µs (0 = Redis TIME)
-- ARGV[3]  w: seconds, 1 … 11 (the seconds finish.lua keeps: MaxFinishedWindow)
-- Reply:   {'ok', now, n, cur} — n: the jobs that succeeded or died by an
--          attempt (finish.lua's counter <p>:{sN}:finished) in the w whole
--          seconds before now's second; cur: those of now's second so far
--
-- One HMGET of w + 1 fields. No writes.

local w = tonumber(ARGV[3])
if not w or w < 1 or w > 11 or w % 1 ~= 0 then
  return redis.error_reply('ERR sluice finished: want w of 1 … 11')
end
local sec = mfloor(NOW / 1000000)
local fields = {}
for s = sec - w, sec do fields[#fields + 1] = istr(s) end
local got = rcall('HMGET', K_FINISHED, unpack(fields))
local n = 0
for i = 1, w do
  if got[i] then n = n + tonum(got[i]) end
end
return {'ok', NOW, n, tonum(got[w + 1]) or 0}
