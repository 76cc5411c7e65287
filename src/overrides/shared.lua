-- The fleet's runtime overrides: one hash, each field an override's id (JSON) holding
-- the override (JSON), and a version every change bumps so gateways re-read only then.
--   KEYS[1]  the hash
--   ARGV[1]  "put" id value | "del" id… | "read" seen-version
-- put/del answer the new version; read answers {version} when it equals seen-version,
-- else {version, id, value, id, value, …}.
local VERSION = "#version"
local op = ARGV[1]
if op == "put" then
  redis.call("HSET", KEYS[1], ARGV[2], ARGV[3])
  return redis.call("HINCRBY", KEYS[1], VERSION, 1)
elseif op == "del" then
  for i = 2, #ARGV do
    redis.call("HDEL", KEYS[1], ARGV[i])
  end
  return redis.call("HINCRBY", KEYS[1], VERSION, 1)
elseif op == "read" then
  local version = redis.call("HGET", KEYS[1], VERSION) or "0"
  if version == ARGV[2] then
    return {version}
  end
  local out = {version}
  local all = redis.call("HGETALL", KEYS[1])
  for i = 1, #all, 2 do
    if all[i] ~= VERSION then
      out[#out + 1] = all[i]
      out[#out + 1] = all[i + 1]
    end
  end
  return out
end
return redis.error_reply("unknown operation " .. tostring(op))
