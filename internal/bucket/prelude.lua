-- prelude.lua — prepended to every algorithm script at init (scripts.go),
-- so the clock and cost are read one way everywhere.
-- ARGV[1] now_us: "0" = read Redis TIME (production); else a fake now (tests).
-- ARGV[2] cost: tokens, ≥ 1 (checked in Go).
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local cost = tonumber(ARGV[2])
