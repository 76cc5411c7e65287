-- tollgate: read TATs without changing them. Returns { now_s, now_ns, debt_1 … debt_n }.
local time = redis.call('TIME')
local now_s = tonumber(time[1])
local now_ns = tonumber(time[2]) * 1000
local reply = { now_s, now_ns }
for i = 1, #KEYS do
  local debt = 0
  local stored = redis.call('GET', KEYS[i])
  if stored then
    local s, ns = string.match(stored, '^(%d+):(%d+)$')
    if s then debt = (tonumber(s) - now_s) * 1000000000 + (tonumber(ns) - now_ns) end
  end
  if debt < 0 then debt = 0 end
  reply[2 + i] = debt
end
return reply
