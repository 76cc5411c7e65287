-- The holders of one key's quota shares across a fleet of tollgate servers on one Redis:
-- each server's streams with their demand and when their last assignment expires (the
-- server's share is held until then, as on one server). Records the caller's, drops the
-- expired, returns the live demand in all. Time is Redis's own, so every server agrees.
--
-- KEYS[1]  the key's holders hash
-- ARGV[1]  the caller's field (server and stream), ARGV[2] its demand, ARGV[3] its TTL in ms
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. (now + ttl))
local all = redis.call('HGETALL', KEYS[1])
local sum = 0
for i = 1, #all, 2 do
  local demand, expires = string.match(all[i + 1], '^([^:]+):(%d+)$')
  if demand == nil or tonumber(expires) <= now then
    redis.call('HDEL', KEYS[1], all[i])
  else
    sum = sum + tonumber(demand)
  end
end
redis.call('PEXPIRE', KEYS[1], ttl * 2)
return tostring(sum)
