-- tollgate: take back an admission written by gcra.lua in another slot, when a later slot
-- denied the request. If nobody moved the key since, restore the old value exactly;
-- otherwise subtract exactly our increment — unless the key was reset since our charge
-- (its marker, reset.lua, is at or after it): what it holds now is others' usage, and
-- our charge went with the reset.
--
-- A calendar quota's charge made in a window that has ended since is left in the key
-- unless the key still holds exactly what the charge wrote: what it holds is the next
-- window's usage, which the charge's increment is no part of.
--
-- A rollback runs once: the Cluster client may send a call again after a connection
-- dropped mid-call, and a second run would subtract the increment a second time.
--
-- KEYS[2i−1], KEYS[2i]  the tier's key and its reset marker
-- KEYS[last], when the keys are odd in number: this rollback's one-time key (same slot),
--            kept ARGV[last] ms (ten store timeouts, a second at least: a retry comes within them)
-- ARGV[6(i−1) + 1 .. 6]  written value, old value ("" = idle), old expiry ms, increment ns,
--                        the charge's time on this server (µs since the epoch), and for a
--                        calendar quota the end of the window charged (Unix seconds; 0
--                        for a rate)
local now_s = tonumber(redis.call('TIME')[1])
local count = math.floor(#KEYS / 2)
if #KEYS % 2 == 1 and not redis.call('SET', KEYS[#KEYS], '1', 'NX', 'PX', ARGV[count * 6 + 1]) then
  return count
end
for i = 1, count do
  local key, marker = KEYS[2 * i - 1], KEYS[2 * i]
  local base = (i - 1) * 6
  local written, old = ARGV[base + 1], ARGV[base + 2]
  local old_ttl, increment = tonumber(ARGV[base + 3]), tonumber(ARGV[base + 4])
  local window_end = tonumber(ARGV[base + 6])
  local reset = tonumber(redis.call('GET', marker) or '')
  local current = redis.call('GET', key)
  if reset and reset >= tonumber(ARGV[base + 5]) then
    current = nil
  end
  if current and current ~= written and window_end > 0 and now_s >= window_end then
    current = nil
  end
  if not current then
    -- Idle, or reset since: nothing of ours is left in it.
  elseif current == written then
    if old == '' then
      redis.call('DEL', key)
    else
      redis.call('SET', key, old, 'PX', math.max(1, old_ttl))
    end
  else
    local s, ns = string.match(current, '^(%d+):(%d+)$')
    if s then
      local total = tonumber(ns) - increment
      local rest = math.fmod(total, 1000000000)
      if rest < 0 then rest = rest + 1000000000 end
      local sec = tonumber(s) + (total - rest) / 1000000000
      -- A quota's mark (tat.lua: seconds zero-padded to 12 digits) is kept.
      local form = string.sub(s, 1, 1) == '0' and '%012d:%09d' or '%d:%09d'
      redis.call('SET', key, string.format(form, sec, rest), 'KEEPTTL')
    end
  end
end
return count
