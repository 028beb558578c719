-- recent.lua — a tenant's recent attempts: the records of its last attempts
-- appended to the string <p>:{sN}:t:<tenant>:ra (its ring key), read by
-- RecentAttempts (recent.go), which keeps the last RecentMax. Part of the
-- prologue (after lib.lua); only finish.lua writes it, one record per
-- attempt that finished a running job (a stale finish is not recorded).
--
-- Layout (the Go twin: recent.go): the records, oldest first, each the
-- struct RA_HEAD — finished at µs (double), latency µs (uint32, capped at
-- 2^32 − 1), HTTP status (uint16, 0 = none), kind (uint8: RA_KINDS), job id
-- length (uint8) — then the job id. An absent key is the empty ring.
--
-- A record costs one APPEND and nothing is read: the ring was a field of
-- the tenant's hash, read (and its ~1 KiB hashed byte by byte by Redis's
-- Lua) by every script that loads the tenant and rebuilt by every finish,
-- 5 % of Redis's instructions on the hot path. The string is cut back to
-- its last RA_MAX records once it passes RA_TRIM bytes (one GET and one
-- SET every few dozen finishes). Its TTL, the succeeded retention, is set
-- when APPEND creates it and at every cut: the ring lives about as long as
-- the records of the jobs it names (and holds at most 4 KiB, far less than
-- those records). A field ra left in a tenant's hash by
-- an earlier release is read by RecentAttempts while the key is absent and
-- dropped by the tenant's next save (lib.lua).

local RA_MAX = 20
local RA_HEAD = '<dI4HBB'
local RA_HEAD_LEN = 16
local RA_KINDS = {success = 1, retry = 2, throttled = 3, permanent = 4, gone = 5}

-- recent_add appends one attempt (finish.lua's request r: id, kind, status,
-- latency µs) finished at now to tenant tn's ring; ttl_us is its TTL when
-- it sets one.
local function recent_add(tn, r, now, ttl_us)
  local id = r.id
  if #id > 255 then id = string.sub(id, 1, 255) end
  local lat, st = r.latency, r.status -- clamped without math's C calls (NaN: 0, as math.max(0, math.min(NaN, …)))
  if not (lat >= 0) then lat = 0 elseif lat > 4294967295 then lat = 4294967295 end
  if not (st >= 0) then st = 0 elseif st > 65535 then st = 65535 end
  local rec = struct.pack(RA_HEAD, now, lat, st, RA_KINDS[r.kind], #id) .. id
  local key = k_tenant(tn) .. ':ra'
  local n = rcall('APPEND', key, rec)
  if n == #rec then
    rcall('PEXPIRE', key, istr(mmax(1, mfloor(ttl_us / 1000))))
  elseif n > 4096 then -- RA_TRIM
    local s = rcall('GET', key)
    local starts, i = {}, 1
    while i + RA_HEAD_LEN - 1 <= #s do
      starts[#starts + 1] = i
      i = i + RA_HEAD_LEN + string.byte(s, i + RA_HEAD_LEN - 1)
    end
    rcall('SET', key, string.sub(s, starts[mmax(1, #starts - RA_MAX + 1)]), 'PX', istr(mmax(1, mfloor(ttl_us / 1000))))
  end
end
