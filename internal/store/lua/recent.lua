-- recent.lua — a tenant's recent attempts: a ring of its last RA_MAX
-- attempts, kept in field ra of its hash (t:<tenant>) beside s and rs, so
-- it is read by load_tenant's HGETALL and written by save_tenant's HSET
-- (lib.lua): no command of its own. Part of the prologue (after lib.lua);
-- only finish.lua writes it, one record per attempt that finished a running
-- job (a stale finish is not recorded).
--
-- Layout (the Go twin: recent.go): one byte, the count of records (0…RA_MAX),
-- then the records, oldest first, each the struct RA_HEAD — finished at µs
-- (double), latency µs (uint32, capped at 2^32 − 1), HTTP status (uint16,
-- 0 = none), kind (uint8: RA_KINDS), job id length (uint8) — then the job id.
-- An absent field is the empty ring.

local RA_MAX = 20
local RA_HEAD = '<dI4HBB'
local RA_HEAD_LEN = 16
local RA_KINDS = {success = 1, retry = 2, throttled = 3, permanent = 4, gone = 5}

-- recent_add appends one attempt (finish.lua's request r: id, kind, status,
-- latency µs) finished at now to tenant t's ring, dropping the oldest record
-- when the ring holds RA_MAX.
local function recent_add(t, r, now)
  local id = string.sub(r.id, 1, 255)
  local rec = struct.pack(RA_HEAD, now, mmax(0, mmin(r.latency, 4294967295)), mmax(0, mmin(r.status, 65535)),
    RA_KINDS[r.kind], #id) .. id
  local ra = t.ra or ''
  local n = #ra > 0 and string.byte(ra, 1) or 0
  local body = string.sub(ra, 2)
  if n >= RA_MAX then
    local idlen = string.byte(body, RA_HEAD_LEN)
    body = string.sub(body, RA_HEAD_LEN + idlen + 1)
    n = RA_MAX - 1
  end
  t.ra = string.char(n + 1) .. body .. rec
end
