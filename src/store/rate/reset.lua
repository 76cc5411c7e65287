-- tollgate: reset one key for the whole fleet: forget its state, and leave a marker with
-- the server's time so that no gateway's settle or rollback of a charge made before it
-- takes back out of the key's usage after it (settle.lua, rollback.lua).
--
-- KEYS[1]  the key
-- KEYS[2]  its reset marker (the key's name and ":reset": the same hash slot)
-- ARGV[1]  how long requests decided before may still move the key (ms); 0: no marker
-- ARGV[2]  the deadline on this server's clock ("s:ns"; absent: none): the gateway that
--          sent the reset answered the operator that it failed once it gave up on it
-- Returns  1, or 2 when run after the deadline (nothing reset)
if past(ARGV[2]) then return 2 end
redis.call('DEL', KEYS[1])
local hold = tonumber(ARGV[1])
if hold and hold > 0 then
  -- Microseconds since the epoch, as digits (a double prints 16 digits in exponent form).
  redis.call('SET', KEYS[2], time[1] .. string.format('%06d', tonumber(time[2])), 'PX', hold)
end
return 1
