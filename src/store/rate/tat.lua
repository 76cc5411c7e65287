-- tollgate: what every rate script starts with, prepended to it when it is loaded
-- (`script` in store/rate/mod.rs): the server's clock, and a TAT in its stored form,
-- "seconds:nanoseconds". All arithmetic is on a TAT's lead over now in ns, which stays far
-- below 2^53, so Lua's doubles are exact.
local time = redis.call('TIME')
-- The furthest a key's TAT is ever put ahead of now: 2^52 ns, about 52 days
-- (config::MAX_SETTLED_DEBT_NS).
local MAX_LEAD_NS = 4503599627370496
local now_s = tonumber(time[1])
local now_ns = tonumber(time[2]) * 1000

-- Whether the server's now is past `deadline` ("s:ns" on its clock, sent by a gateway
-- with a call it gives up on after a while; absent or unreadable: never). A call run
-- after it (the server was frozen, the network held it back, a client resent it after a
-- broken connection) must decide and grant nothing: its gateway answered without it.
local function past(deadline)
  if not deadline then return false end
  local ds, dns = string.match(deadline, '^(%d+):(%d+)$')
  ds, dns = tonumber(ds), tonumber(dns)
  return ds ~= nil and (now_s > ds or (now_s == ds and now_ns > dns))
end

-- A calendar quota's TAT is written with its seconds zero-padded to 12 digits, a rate's
-- without: the mark says the value is a window's usage, not a rate's debt, so a policy
-- switched from a quota to a rate starts its keys idle instead of owing the rest of the
-- window. Both forms are the same number to every reader (older versions included); a
-- quota TAT written before the mark existed reads as a rate debt until next charged.

-- The TAT stored at `key` as written, how far it lies ahead of now in ns (negative when
-- past) and whether a quota wrote it; the lead is nil when there is none or it cannot
-- be read.
local function tat_at(key)
  local stored = redis.call('GET', key)
  if not stored then return nil, nil, false end
  local s, ns = string.match(stored, '^(%d+):(%d+)$')
  if not s then return stored, nil, false end
  local lead = (tonumber(s) - now_s) * 1000000000 + (tonumber(ns) - now_ns)
  return stored, lead, string.sub(s, 1, 1) == '0'
end

-- What `key` owes: how far its TAT lies ahead of now, 0 when it is idle, absent or
-- unreadable, or (read for a rate, `quota` false) when a quota wrote it; the TAT as
-- written; and whether a quota wrote it.
local function debt_at(key, quota)
  local stored, ahead, marked = tat_at(key)
  if ahead and ahead > 0 and (quota or not marked) then
    -- No charge leads further (MAX_SETTLED_DEBT_NS); a key written further by an
    -- older version reads as used up, never past what an integer reply holds.
    if ahead > MAX_LEAD_NS then ahead = MAX_LEAD_NS end
    return ahead, stored, marked
  end
  return 0, stored, marked
end

-- The stored form of the instant `ahead` ns (≥ 0) after now, marked when `quota`. fmod
-- is exact on integers; `/` and `%` go through a rounded quotient.
local function stamp(ahead, quota)
  local total = now_ns + ahead
  local ns = math.fmod(total, 1000000000)
  local form = quota and '%012d:%09d' or '%d:%09d'
  return string.format(form, now_s + (total - ns) / 1000000000, ns)
end

