-- tollgate: read TATs without changing them. Returns { now_s, now_ns, debt_1 … debt_n }.
local reply = { now_s, now_ns }
for i = 1, #KEYS do
  reply[2 + i] = debt_at(KEYS[i])
end
return reply
