-- tollgate: read TATs without changing them. ARGV[i] "1" reads key i as a calendar
-- quota's (a quota's mark, tat.lua, is then usage, not idle). Returns { now_s, now_ns,
-- debt_1 … debt_n }.
local reply = { now_s, now_ns }
for i = 1, #KEYS do
  reply[2 + i] = debt_at(KEYS[i], ARGV[i] == '1')
end
return reply
