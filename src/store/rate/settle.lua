-- tollgate: settle a reservation on one key, on the server's clock (see tat.lua for the
-- stored form). A debt is owed from max(TAT, now) and never takes the debt past
-- max_debt; a refund gives back at most `room` and never takes the TAT below now.
--
-- KEYS[1]  the tier's key
-- KEYS[2]  a refund's: its reset marker (reset.lua): a refund of a charge at or before
--          it gives nothing back, as the key's usage since the reset is not the refund's
--          (a debt is sent with KEYS[1] alone, so it is served while its slot migrates)
-- ARGV[1]  "debt" or "refund"
-- ARGV[2]  ns owed or refunded
-- ARGV[3]  room (refund: ns of this request's reservation still ahead of now)
-- ARGV[4]  max_debt (ns)
-- ARGV[5]  a calendar quota's window, "start:end:next" Unix seconds ("" for a rate): its
--          TAT is measured from the window's end instead of now (see gcra.lua)
--          A refund of a reservation whose window has ended gives nothing back (the
--          units were served in that window, not in the one now running); a TAT written
--          under another calendar (15 minutes or more past the end, limit::calendar's
--          CARRY_NS) is no usage of this window, and is left as it is when it is not the
--          previous window's either (the policy's calendar changed since admission: the
--          usage is the new calendar's). Once the window after it has ended too,
--          nothing is settled (the key's TAT is a later window's).
-- ARGV[6]  the charge's time on this server (µs since the epoch, estimated early; 0:
--          unknown, and any marker refuses the refund)
-- KEYS[3]  optional: this refund's one-time key (same slot): a refund runs once, though
--          the Cluster client may send the call again after a connection dropped; kept
--          ARGV[7] ms (ten store timeouts, a second at least: a retry comes within them)
-- Returns  {the debt (TAT − now, ns; a quota: TAT − the window's end, its units used),
--          1 when a refund was held by the key's reset marker, else 0}
local op, ns = ARGV[1], tonumber(ARGV[2])
local room, max_debt = tonumber(ARGV[3]), tonumber(ARGV[4])
local basis, ended, start = 0, false, 0
local ws, we, wn = string.match(ARGV[5] or '', '^(%d+):(%d+):(%d+)$')
if ws then
  local s, e = tonumber(ws), tonumber(we)
  -- The window after the admitting one has ended too: the key's TAT, if any, is a later
  -- window's usage this settle cannot be placed against; nothing is settled.
  if now_s >= tonumber(wn) then return {0, 0} end
  if now_s < s then
    s, e = s - (e - s), s
  elseif now_s >= e then
    s, e, ended = e, tonumber(wn), true
  end
  basis = (e - now_s) * 1000000000 - now_ns
  start = (s - now_s) * 1000000000 - now_ns
end
local _, ahead, marked = tat_at(KEYS[1])
-- Another calendar's TAT, neither this window's usage nor the previous one's: the
-- policy's calendar changed since admission, and the usage is the new one's.
if ws and ahead and ahead > 0 then
  local function from(at) return ahead >= at and ahead < at + 900000000000 end
  if not from(basis) and not from(start) then return {0, 0} end
end
-- A quota's usage is no debt of a rate (tat.lua), nor the rate's to overwrite: the policy
-- became a quota under this name on a gateway that has reloaded since this request was
-- admitted as a rate (or this gateway has not reloaded yet). Its usage stays as it is.
if marked and not ws then return {0, 0} end
local debt = ahead and ahead - basis or 0
if debt < 0 or (ws and debt >= 900000000000) then debt = 0 end
local after
if op == 'debt' then
  after = math.min(debt + ns, math.max(debt, max_debt))
else
  if debt == 0 or ended or math.min(ns, room) <= 0 then return {debt, 0} end
  local reset = tonumber(redis.call('GET', KEYS[2]) or '')
  if reset and reset >= (tonumber(ARGV[6]) or 0) then return {debt, 1} end
  after = math.max(debt - math.min(ns, room), 0)
  if KEYS[3] and after ~= debt and not redis.call('SET', KEYS[3], '1', 'NX', 'PX', ARGV[7]) then
    return {debt, 0}
  end
end
if after == debt then return {debt, 0} end
if after == 0 then
  redis.call('DEL', KEYS[1])
  return {0, 0}
end
redis.call('SET', KEYS[1], stamp(basis + after, ws ~= nil), 'PX', math.max(1, math.ceil((basis + after) / 1000000)))
return {after, 0}
