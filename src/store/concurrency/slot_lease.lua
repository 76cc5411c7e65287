-- tollgate: slots of a concurrency policy shared by a fleet, as leases. The key is a sorted
-- set of lease ids scored by their expiry (server clock, ms); expired leases are dropped
-- first, so a gateway that died holding slots loses them within the lease's ttl.
--
-- KEYS[1]  the key's lease set
-- ARGV[1]  mode: "take" | "refresh" | "give" | "count"
-- ARGV[2]  lease id        ARGV[3]  max_in_flight        ARGV[4]  ttl (ms)
-- Returns  { done (1/0), leases held after the call }
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local mode, id = ARGV[1], ARGV[2]
-- The set lives as long as its longest lease: leases taken with different ttls (gateways on
-- two config versions) must not be cut short by the shorter one's expiry.
local function expire_with_latest()
  local latest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if latest[2] then
    redis.call('PEXPIREAT', KEYS[1], latest[2])
  end
end
local ttl = tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if mode == 'give' then
  local done = redis.call('ZREM', KEYS[1], id)
  return { done, redis.call('ZCARD', KEYS[1]) }
end
if mode == 'count' then
  return { 1, redis.call('ZCARD', KEYS[1]) }
end
-- A refresh of a lease that is gone (Redis restarted or failed over and lost it, or it
-- expired while its gateway could not reach Redis) takes it again, full or not: its
-- request is in flight, and a set without it would let one more in. Answers 0 then.
if mode == 'refresh' then
  local was_there = redis.call('ZSCORE', KEYS[1], id)
  redis.call('ZADD', KEYS[1], now + ttl, id)
  expire_with_latest()
  return { was_there and 1 or 0, redis.call('ZCARD', KEYS[1]) }
end
-- A take sent again (the client resent it after its connection broke, or the gateway
-- retried after a reply it never read) holds the slot it took: refreshed, not "full".
if redis.call('ZSCORE', KEYS[1], id) then
  redis.call('ZADD', KEYS[1], now + ttl, id)
  expire_with_latest()
  return { 1, redis.call('ZCARD', KEYS[1]) }
end
local held = redis.call('ZCARD', KEYS[1])
if held >= tonumber(ARGV[3]) then
  return { 0, held }
end
redis.call('ZADD', KEYS[1], now + ttl, id)
expire_with_latest()
return { 1, held + 1 }
