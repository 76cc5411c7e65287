-- wrk script: every request carries a random x-tenant-id and x-user-id.
-- Key space from the environment: TENANTS (default 100) x USERS (default 10000).
-- The request text is built by concatenation (no wrk.format) to keep wrk's own CPU low.
local random = math.random
local tenants = tonumber(os.getenv("TENANTS") or "100")
local users = tonumber(os.getenv("USERS") or "10000")
local head, tenant_ids

function init(args)
  -- per-thread seed: the time plus this thread's table address
  math.randomseed(os.time() + tonumber(tostring({}):match("%x+$"), 16) % 1000003)
  local host = wrk.host .. (wrk.port and (":" .. wrk.port) or "")
  head = "GET " .. wrk.path .. " HTTP/1.1\r\nHost: " .. host .. "\r\nx-tenant-id: "
  tenant_ids = {}
  for i = 1, tenants do tenant_ids[i] = "t" .. i end
end

function request()
  return head .. tenant_ids[random(tenants)] .. "\r\nx-user-id: u" .. random(users) .. "\r\n\r\n"
end
