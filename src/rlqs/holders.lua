-- The holders of one key's quota shares across a fleet of tollgate servers on one Redis:
-- each server's streams with their demand, when their last assignment expires (the
-- server's share is held until then, as on one server) and the tokens it was told to
-- hold. Records the caller's, drops the expired, returns the live demand in all and the
-- tokens the other servers' streams were told (a share that starts full must leave them
-- room: they may still spend them). Time is Redis's own, so every server agrees.
--
-- KEYS[1]  the key's holders hash
-- ARGV[1]  the caller's field (server and stream), ARGV[2] its demand, ARGV[3] its TTL in
--          ms, ARGV[4] the tokens it was last told, ARGV[5] its server's prefix (every
--          field of its server starts with it)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
local mine = ARGV[5]
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. (now + ttl) .. ':' .. ARGV[4])
local all = redis.call('HGETALL', KEYS[1])
local sum = 0
local others = 0
for i = 1, #all, 2 do
  -- A server of an earlier version writes no tokens.
  local demand, expires, told = string.match(all[i + 1], '^([^:]+):(%d+):?(%d*)$')
  if demand == nil or tonumber(expires) <= now then
    redis.call('HDEL', KEYS[1], all[i])
  else
    sum = sum + tonumber(demand)
    if told ~= '' and string.sub(all[i], 1, #mine) ~= mine then
      others = others + tonumber(told)
    end
  end
end
redis.call('PEXPIRE', KEYS[1], ttl * 2)
return tostring(sum) .. ' ' .. string.format('%.0f', others)
