-- tollgate: what every rate script starts with, prepended to it when it is loaded
-- (`script` in store/rate/mod.rs): the server's clock, and a TAT in its stored form,
-- "seconds:nanoseconds". All arithmetic is on a TAT's lead over now in ns, which stays far
-- below 2^53, so Lua's doubles are exact.
local time = redis.call('TIME')
local now_s = tonumber(time[1])
local now_ns = tonumber(time[2]) * 1000

-- The TAT stored at `key` as written, and how far it lies ahead of now in ns (negative
-- when past); the lead is nil when there is none or it cannot be read.
local function tat_at(key)
  local stored = redis.call('GET', key)
  if not stored then return nil, nil end
  local s, ns = string.match(stored, '^(%d+):(%d+)$')
  if not s then return stored, nil end
  return stored, (tonumber(s) - now_s) * 1000000000 + (tonumber(ns) - now_ns)
end

-- What `key` owes: how far its TAT lies ahead of now, 0 when it is idle, absent or
-- unreadable; and the TAT as written.
local function debt_at(key)
  local stored, ahead = tat_at(key)
  if ahead and ahead > 0 then return ahead, stored end
  return 0, stored
end

-- The stored form of the instant `ahead` ns (≥ 0) after now. fmod is exact on integers;
-- `/` and `%` go through a rounded quotient.
local function stamp(ahead)
  local total = now_ns + ahead
  local ns = math.fmod(total, 1000000000)
  return string.format('%d:%09d', now_s + (total - ns) / 1000000000, ns)
end

