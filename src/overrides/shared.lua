-- The fleet's runtime overrides: a hash of field -> override (JSON; the id sealed, the
-- field a keyed hash of the id), a version every change bumps ("epoch:counter", the epoch
-- made when the hash is (again) created), and two sorted sets by version: the fields put
-- and the fields deleted since. A gateway that saw version V asks for what changed after
-- V and gets only that; one whose V is too old (deletions below #floor were pruned) or of
-- another epoch gets everything.
--   KEYS     the hash, the puts, the deletions (v2); for import: the old hash, the import
--   ARGV[1]  "put" epoch field value deadline | "del" epoch now_ms deadline field… |
--            "expire" epoch now_ms "" field… | "touch" epoch | "read" seen-epoch
--            seen-counter | "import" | "imported"
-- A put or del run after its deadline ("s:ns" on Redis's clock; "": none) changes nothing
-- and answers "late": its gateway gave up on it and answered the operator that it
-- failed (a frozen Redis resumed, a held network drained).
-- touch bumps the version alone: a key was reset, and every gateway that reads the change
-- forgets what it remembers of refusals.
-- put/expire answer the new version; del answers {version, removed}, removed counting the
-- overrides that had not expired by now_ms; read answers {version} when unchanged, else
-- {version, "delta", #puts, field, value, …, deleted field, …} or {version, "full", #all,
-- field, value, …}.
local HASH, PUTS, DELS = KEYS[1], KEYS[2], KEYS[3]
local VERSION, EPOCH, FLOOR = "#version", "#epoch", "#floor"
-- Deletions remembered; beyond, the oldest half is pruned and #floor raised past them.
local MAX_DELS = 10000
local op = ARGV[1]

local function version()
  local epoch = redis.call("HGET", HASH, EPOCH) or "none"
  local n = redis.call("HGET", HASH, VERSION) or "0"
  return epoch .. ":" .. n
end

local function bump(epoch)
  redis.call("HSETNX", HASH, EPOCH, epoch)
  return redis.call("HINCRBY", HASH, VERSION, 1)
end

-- Whether an override (JSON) has expired by now: it has an expiry, and it has passed.
local function expired(value, now)
  local ok, o = pcall(cjson.decode, value)
  return ok and type(o) == "table" and tonumber(o.expires_at_ms) ~= nil
    and tonumber(o.expires_at_ms) <= now
end

local function prune()
  local count = redis.call("ZCARD", DELS)
  if count <= MAX_DELS then return end
  local last = count - MAX_DELS / 2 - 1
  local gone = redis.call("ZRANGE", DELS, last, last, "WITHSCORES")
  redis.call("ZREMRANGEBYRANK", DELS, 0, last)
  redis.call("HSET", HASH, FLOOR, gone[2])
end

-- Redis's clock in ms.
local function server_ms()
  local t = redis.call("TIME")
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Whether Redis's clock is past `deadline` ("s:ns"; "" or unreadable: never).
local function past(deadline)
  local ds, dns = string.match(deadline or "", '^(%d+):(%d+)$')
  if not ds then return false end
  local t = redis.call("TIME")
  local s, ns = tonumber(t[1]), tonumber(t[2]) * 1000
  ds, dns = tonumber(ds), tonumber(dns)
  return s > ds or (s == ds and ns > dns)
end

-- Removes the fields ARGV[5..] (those expired only, when `only_expired`: by Redis's clock,
-- not the asking gateway's, so a gateway whose clock runs ahead cannot delete the fleet's
-- overrides before their time).
local function remove(only_expired)
  local now = only_expired and server_ms() or tonumber(ARGV[3])
  local removed, live, n = 0, 0, nil
  for i = 5, #ARGV do
    local value = redis.call("HGET", HASH, ARGV[i])
    if value and (not only_expired or expired(value, now)) then
      n = n or bump(ARGV[2])
      redis.call("HDEL", HASH, ARGV[i])
      redis.call("ZREM", PUTS, ARGV[i])
      redis.call("ZADD", DELS, n, ARGV[i])
      removed = removed + 1
      if not expired(value, now) then live = live + 1 end
    end
  end
  if n then prune() end
  return live
end

if op == "put" then
  if past(ARGV[5]) then return "late" end
  local n = bump(ARGV[2])
  redis.call("HSET", HASH, ARGV[3], ARGV[4])
  redis.call("ZADD", PUTS, n, ARGV[3])
  redis.call("ZREM", DELS, ARGV[3])
  return version()
elseif op == "del" then
  if past(ARGV[4]) then return {"late", 0} end
  local live = remove(false)
  return {version(), live}
elseif op == "touch" then
  bump(ARGV[2])
  return version()
elseif op == "expire" then
  remove(true)
  return version()
elseif op == "read" then
  local v = version()
  local epoch = redis.call("HGET", HASH, EPOCH) or "none"
  local n = tonumber(redis.call("HGET", HASH, VERSION) or "0")
  local seen = tonumber(ARGV[3])
  if ARGV[2] == epoch and seen == n then
    return {v}
  end
  local floor = tonumber(redis.call("HGET", HASH, FLOOR) or "0")
  if ARGV[2] == epoch and seen and seen >= floor and seen < n then
    local puts = redis.call("ZRANGEBYSCORE", PUTS, "(" .. seen, "+inf")
    local out = {v, "delta", #puts}
    for _, f in ipairs(puts) do
      out[#out + 1] = f
      out[#out + 1] = redis.call("HGET", HASH, f) or ""
    end
    for _, f in ipairs(redis.call("ZRANGEBYSCORE", DELS, "(" .. seen, "+inf")) do
      out[#out + 1] = f
    end
    return out
  end
  local all = redis.call("HGETALL", HASH)
  local out = {v, "full", 0}
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 1) ~= "#" then
      out[#out + 1] = all[i]
      out[#out + 1] = all[i + 1]
    end
  end
  out[3] = (#out - 3) / 2
  return out
elseif op == "import" then
  -- KEYS: the first version's hash (ids in clear), the import in progress.
  if redis.call("EXISTS", KEYS[1]) == 1 and redis.call("EXISTS", KEYS[2]) == 0 then
    redis.call("RENAME", KEYS[1], KEYS[2])
  end
  return redis.call("HGETALL", KEYS[2])
elseif op == "imported" then
  redis.call("DEL", KEYS[2])
  return 1
end
return redis.error_reply("unknown operation " .. tostring(op))
