-- tollgate: a gateway's slice of one key's capacity (sync = "lease"), on the server's
-- clock. First a previous slice's unused units are given back, only while that slice is
-- still the key's last reservation (the stored TAT equals its end); then `want` units are
-- granted when at least `need` are free: half of what is free when that is fewer, never
-- less than `need`. The slice's first slot begins `lead` ahead of now where the key has
-- room for that and `need` units after it (the capacity skipped over was unused).
-- `need` = 0 only gives back. Arithmetic on the debt (TAT − now, ns), exact in doubles
-- (see tat.lua). Mirrors limit::slice::grant.
--
-- KEYS[1]  the key
-- ARGV     T, tau, want, need, give_ns (0: none), give_end (the stamp the slice left),
--          lead (ns; absent: 0), and optionally "s:ns" on the server's clock after
--          which the call is too late
-- Returns  {granted, ahead, left, end}  or  {0, wait}  or  {2, now_s, now_ns}: too late,
--          nothing granted (the server's time, for the gateway to learn its clock from)
-- A fetch that reaches the server after its deadline (tat.lua's `past`) grants nothing:
-- its units would be charged with no gateway holding them. Its give-back is still done:
-- the gateway gave that slice up either way.
local t, tau = tonumber(ARGV[1]), tonumber(ARGV[2])
local want, need = tonumber(ARGV[3]), tonumber(ARGV[4])
local give_ns, give_end = tonumber(ARGV[5]), ARGV[6]
local lead = tonumber(ARGV[7] or '0')

local debt, stored = debt_at(KEYS[1])

local function store(ahead)
  if ahead <= 0 then
    redis.call('DEL', KEYS[1])
  else
    redis.call('SET', KEYS[1], stamp(ahead), 'PX', math.max(1, math.ceil(ahead / 1000000)))
  end
end

local gave = false
if give_ns > 0 and stored == give_end and debt > 0 then
  debt = math.max(debt - give_ns, 0)
  gave = true
end

if need == 0 then
  if gave then store(debt) end
  return {0, 0}
end
if past(ARGV[8]) then
  if gave then store(debt) end
  return {2, now_s, now_ns}
end
local free = math.floor((tau - debt) / t)
if free < need then
  if gave then store(debt) end
  -- Capped where doubles stay exact: an absurd `need` (a report-sized cost) times T
  -- passes 2^63, which Redis's integer reply would turn negative.
  return {0, math.min(debt + need * t - tau, 2^53)}
end
local start = math.max(debt, lead)
if math.floor((tau - start) / t) < need then start = debt end
free = math.floor((tau - start) / t)
local granted = math.min(want, math.max(math.floor(free / 2), need))
granted = math.min(math.max(granted, need), free)
local ahead = start + granted * t
store(ahead)
return {granted, ahead, free - granted, stamp(ahead)}
