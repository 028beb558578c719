-- clock.lua — the time every dispatch script decides by, assembled ahead
-- of lib.lua and of the standalone scripts (scripts.go).
--
-- clock(arg) is now in µs: arg, the caller's fake now, when it is a positive
-- number (tests); else Redis TIME (production passes "0").
local function clock(arg)
  local n = tonumber(arg)
  if n and n > 0 then return n end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
