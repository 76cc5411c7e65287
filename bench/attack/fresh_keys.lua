-- wrk script for bench/attack-check.sh: every request carries an `x-junk` header never
-- sent before (thread number, counter and a per-run nonce); each thread stops after its
-- share of responses. Arguments after `--`: responses per thread, nonce.
local threads = 0

function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

function init(args)
  limit = tonumber(args[1]) or 0
  nonce = args[2] or "0"
  sent, done = 0, 0
end

function request()
  sent = sent + 1
  return wrk.format(nil, nil, { ["x-junk"] = nonce .. "-" .. tid .. "-" .. sent })
end

function response()
  done = done + 1
  if limit > 0 and done >= limit then
    wrk.thread:stop()
  end
end
