-- The fleet's runtime overrides: one hash, each field an override's id (JSON) holding
-- the override (JSON), a counter every change bumps and an epoch made when the hash is
-- (again) created, so gateways re-read only on a change, and notice a hash that was lost
-- and started over even when its counter happens to match.
--   KEYS[1]  the hash
--   ARGV[1]  "put" epoch id value | "del" epoch now_ms id… | "expire" epoch now_ms id… |
--            "read" seen-version
-- put/expire answer the new version; del answers {version, removed}, removed counting the
-- overrides that had not expired by now_ms; read answers {version} when it equals
-- seen-version, else {version, id, value, id, value, …}. A version is "epoch:counter".
local VERSION, EPOCH = "#version", "#epoch"
local op = ARGV[1]

local function version()
  local epoch = redis.call("HGET", KEYS[1], EPOCH) or "none"
  local n = redis.call("HGET", KEYS[1], VERSION) or "0"
  return epoch .. ":" .. n
end

-- Whether an override (JSON) has expired by now: it has an expiry, and it has passed.
local function expired(value, now)
  local ok, o = pcall(cjson.decode, value)
  return ok and type(o) == "table" and tonumber(o.expires_at_ms) ~= nil
    and tonumber(o.expires_at_ms) <= now
end

local function bump(epoch)
  redis.call("HSETNX", KEYS[1], EPOCH, epoch)
  redis.call("HINCRBY", KEYS[1], VERSION, 1)
  return version()
end

if op == "put" then
  redis.call("HSET", KEYS[1], ARGV[3], ARGV[4])
  return bump(ARGV[2])
elseif op == "del" then
  local now, removed = tonumber(ARGV[3]), 0
  for i = 4, #ARGV do
    local value = redis.call("HGET", KEYS[1], ARGV[i])
    if value then
      redis.call("HDEL", KEYS[1], ARGV[i])
      if not expired(value, now) then removed = removed + 1 end
    end
  end
  return {bump(ARGV[2]), removed}
elseif op == "expire" then
  -- Only what is expired as stored: an override set again since is kept.
  local now, removed = tonumber(ARGV[3]), 0
  for i = 4, #ARGV do
    local value = redis.call("HGET", KEYS[1], ARGV[i])
    if value and expired(value, now) then
      redis.call("HDEL", KEYS[1], ARGV[i])
      removed = removed + 1
    end
  end
  if removed > 0 then return bump(ARGV[2]) end
  return version()
elseif op == "read" then
  local v = version()
  if v == ARGV[2] then
    return {v}
  end
  local out = {v}
  local all = redis.call("HGETALL", KEYS[1])
  for i = 1, #all, 2 do
    if all[i] ~= VERSION and all[i] ~= EPOCH then
      out[#out + 1] = all[i]
      out[#out + 1] = all[i + 1]
    end
  end
  return out
end
return redis.error_reply("unknown operation " .. tostring(op))
