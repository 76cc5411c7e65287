-- tollgate: draw units for a body as it streams (a bytes-settled tier), on the server's
-- clock: as many as fit, up to `want`, when at least `need` do, keeping the key's TAT at
-- most `bound` ahead of now (see limit::settle::draw; stored form as in tat.lua).
--
-- KEYS[1]  the tier's key
-- ARGV     T (ns), bound (ns), want, need
-- Returns  {units, debt after}  or  {0, wait} with units 0 only when `need` does not fit
local t, bound = tonumber(ARGV[1]), tonumber(ARGV[2])
local want, need = tonumber(ARGV[3]), tonumber(ARGV[4])
-- No TAT is written further ahead than any reader counts (an override's long T could
-- otherwise set a key's expiry decades out).
if bound > MAX_LEAD_NS then bound = MAX_LEAD_NS end
local debt, _, marked = debt_at(KEYS[1])
-- A quota's usage under this name (the policy became a quota on a gateway that has
-- reloaded; this one still runs it as a rate): neither this rate's debt nor the rate's
-- to overwrite. The units pass uncounted until this gateway reloads too.
if marked then return {math.max(want, need), 0} end
local fits = math.floor((bound - debt) / t)
if fits < 0 then fits = 0 end
if fits < need then
  -- Capped where doubles are exact: past 2^63 the integer reply would turn negative,
  -- a broken reply that leaves the body's units unchecked.
  return {0, math.min(debt + need * t - bound, 2^53)}
end
local units = math.max(math.min(want, fits), need)
if units == 0 then return {0, 0} end
local after = debt + units * t
redis.call('SET', KEYS[1], stamp(after), 'PX', math.max(1, math.ceil(after / 1000000)))
return {units, after}
