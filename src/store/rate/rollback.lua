-- tollgate: take back an admission written by gcra.lua in another slot, when a later slot
-- denied the request. If nobody moved the key since, restore the old value exactly;
-- otherwise subtract exactly our increment.
--
-- KEYS[i]  the tier's key
-- ARGV[4(i−1) + 1 .. 4]  written value, old value ("" = idle), old expiry ms, increment ns
for i = 1, #KEYS do
  local base = (i - 1) * 4
  local written, old = ARGV[base + 1], ARGV[base + 2]
  local old_ttl, increment = tonumber(ARGV[base + 3]), tonumber(ARGV[base + 4])
  local current = redis.call('GET', KEYS[i])
  if current == written then
    if old == '' then
      redis.call('DEL', KEYS[i])
    else
      redis.call('SET', KEYS[i], old, 'PX', math.max(1, old_ttl))
    end
  elseif current then
    local s, ns = string.match(current, '^(%d+):(%d+)$')
    if s then
      local total = tonumber(ns) - increment
      local rest = math.fmod(total, 1000000000)
      if rest < 0 then rest = rest + 1000000000 end
      local sec = tonumber(s) + (total - rest) / 1000000000
      -- A quota's mark (tat.lua: seconds zero-padded to 12 digits) is kept.
      local form = string.sub(s, 1, 1) == '0' and '%012d:%09d' or '%d:%09d'
      redis.call('SET', KEYS[i], string.format(form, sec, rest), 'KEEPTTL')
    end
  end
end
return #KEYS
