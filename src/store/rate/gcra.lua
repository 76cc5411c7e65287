-- tollgate: decide all tiers of one request that live in one slot, atomically, on the
-- server's clock. A denial by an enforcing tier writes nothing; an admission writes every
-- tier that admitted, with an expiry equal to its time until idle.
--
-- TATs are in tat.lua's stored form and all arithmetic is done on the debt (TAT − now,
-- in ns).
--
-- A calendar quota's tier (limit::calendar) is decided at its window's end instead of
-- now: it names the window and the next as "start:end:next" Unix seconds, the end that
-- holds the server's now is taken, and its TAT (end + units used) is measured from it.
--
-- KEYS[i]  the tier's key
-- ARGV[6(i−1) + 1 .. 6]  T, tau, max_delay (ns), shadow ("1" or "0"), cost (units),
--                        window ("" for a rate, "start:end:next" for a quota)
-- ARGV[6n + 1]  optional: "s:ns" on the server's clock after which the call is too late
-- Returns  { now_s, now_ns, admitted (1/0, 2: too late, 3: a quota's window a window or
--           more off the server's clock; nothing decided for either), debt_1 … debt_n }
local n = #KEYS
-- A call that reaches the server after the gateway gave up on it decides nothing: its
-- request was answered per on_error.
if past(ARGV[6 * n + 1]) then
  local late = { now_s, now_ns, 2 }
  for i = 1, n do late[3 + i] = 0 end
  return late
end
local debts, fresh, quota = {}, {}, {}
-- A key named twice in one call (a rate limit service call's descriptors may repeat one)
-- is decided on what the earlier tier left it, as the local store decides in order:
-- every debt is read before any write, so the later tier would overwrite the earlier's
-- charge with one made from the old debt.
local left, first = {}, {}
local denied, skewed = false, false
for i = 1, n do
  local base = (i - 1) * 6
  local t = tonumber(ARGV[base + 1])
  local tau = tonumber(ARGV[base + 2])
  local max_delay = tonumber(ARGV[base + 3])
  local shadow = ARGV[base + 4] == '1'
  local cost = tonumber(ARGV[base + 5])
  -- The basis: how far the instant the tier is measured from lies ahead of now.
  local basis = 0
  local ws, we, wn = string.match(ARGV[base + 6], '^(%d+):(%d+):(%d+)$')
  if ws then
    local s, e = tonumber(ws), tonumber(we)
    -- The window named and the next hold the server's now, or the one before it does
    -- (a gateway a moment ahead at a boundary). Past that, the gateway's wall clock is a
    -- window or more off: measured from its window, the key's usage would read as
    -- another calendar's (none) and the charge land where no correct gateway reads it.
    if now_s >= tonumber(wn) or now_s < s - (e - s) then skewed = true end
    if now_s < s then e = s elseif now_s >= e then e = tonumber(wn) end
    basis = (e - now_s) * 1000000000 - now_ns
  end
  -- The reply gives each key's debt before the call (the gateway replays the call's
  -- tiers on those, in order, for their reports).
  local debt = left[KEYS[i]]
  if debt then
    debts[i] = debts[first[KEYS[i]]]
  else
    debt = debt_at(KEYS[i], ws ~= nil)
    debts[i] = debt
    first[KEYS[i]] = i
  end
  local over = debt - basis
  -- 15 minutes or more past the end: written under another calendar, nothing used here
  -- (limit::calendar's CARRY_NS).
  if over < 0 or (ws and over >= 900000000000) then over = 0 end
  local ahead = over + cost * t
  if ahead <= tau + max_delay then
    -- A forced quota tier (a usage report) is charged whatever it owes, its usage capped
    -- one below what would read as another calendar's.
    if ws and ahead >= 900000000000 then ahead = 899999999999 end
    -- A forced rate tier's lead is capped as a settle's is.
    if not ws and ahead > MAX_LEAD_NS then ahead = MAX_LEAD_NS end
    fresh[i] = basis + ahead
    quota[i] = ws ~= nil
    left[KEYS[i]] = fresh[i]
  elseif not shadow then
    denied = true
  end
end
if skewed then
  local off = { now_s, now_ns, 3 }
  for i = 1, n do off[3 + i] = 0 end
  return off
end
local reply = { now_s, now_ns, denied and 0 or 1 }
for i = 1, n do reply[3 + i] = debts[i] end
if denied then return reply end
for i = 1, n do
  local ahead = fresh[i]
  if ahead then
    redis.call('SET', KEYS[i], stamp(ahead, quota[i]), 'PX', math.max(1, math.ceil(ahead / 1000000)))
  end
end
return reply
