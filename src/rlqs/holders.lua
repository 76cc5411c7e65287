-- The holders of one key's quota shares across a fleet of tollgate servers on one Redis:
-- each server's streams with their demand and when their last assignment expires (the
-- server's share is held until then, as on one server), and in a second hash the tokens
-- each was told to hold. Records the caller's, drops the expired, returns the live
-- demand in all and the tokens the other servers' live streams were told (a share that
-- starts full must leave them room: they may still spend them). Time is Redis's own, so
-- every server agrees. The tokens have a hash of their own so that a server of an earlier
-- version, whose script reads `demand:expires` and drops any other value, keeps working
-- beside this one during a rolling upgrade.
--
-- KEYS[1]  the key's holders hash, KEYS[2] its told tokens hash (the same slot)
-- ARGV[1]  the caller's field (server and stream), ARGV[2] its demand, ARGV[3] its TTL in
--          ms, ARGV[4] the tokens it was last told, ARGV[5] its server's prefix (every
--          field of its server starts with it)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
local mine = ARGV[5]
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. (now + ttl))
redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
local told = {}
local kept = redis.call('HGETALL', KEYS[2])
for i = 1, #kept, 2 do
  told[kept[i]] = tonumber(kept[i + 1]) or 0
end
local all = redis.call('HGETALL', KEYS[1])
local sum = 0
local others = 0
for i = 1, #all, 2 do
  local field = all[i]
  local demand, expires = string.match(all[i + 1], '^([^:]+):(%d+)$')
  if demand == nil or tonumber(expires) <= now then
    redis.call('HDEL', KEYS[1], field)
  else
    sum = sum + tonumber(demand)
    if told[field] ~= nil and string.sub(field, 1, #mine) ~= mine then
      others = others + told[field]
    end
    told[field] = nil
  end
end
-- Tokens of holders no longer live (expired, or ended) are dropped.
for field, _ in pairs(told) do
  redis.call('HDEL', KEYS[2], field)
end
redis.call('PEXPIRE', KEYS[1], ttl * 2)
redis.call('PEXPIRE', KEYS[2], ttl * 2)
return tostring(sum) .. ' ' .. string.format('%.0f', others)
