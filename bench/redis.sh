#!/usr/bin/env bash
# Redis backend versus memory backend, side by side: the same tollgate config (three tiers:
# tenant, tenant+user, endpoint) in front of the same upstream, once with the embedded store
# and once with a local redis-server. Reports req/s of each, the ratio redis/memory, and the
# Redis round trips per request (EVALSHA calls counted by the server / requests served).
#
#   sudo bench/redis.sh
#   TOLLGATE_BIN=path/to/tollgate ROUNDS=1 DURATION=5 bench/redis.sh
#
# Env: ROUNDS (3), DURATION (10), THREADS (2), CONNS (64), KEEP_TMP=1.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

ROUNDS=${ROUNDS:-3} DURATION=${DURATION:-10} THREADS=${THREADS:-2} CONNS=${CONNS:-64}
BIG=1000000

need_tools nginx=nginx-light wrk=wrk redis-server=redis-server redis-cli=redis-tools curl=curl
find_tollgate
make_workdir

start_upstream
free_port REDIS_PORT; free_port MEM_PORT; free_port RED_PORT
spawn redis redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no --dir "$WORK"
wait_port "$REDIS_PORT" redis "$LAST_PID"

config() { # PORT STORE_BLOCK
  cat <<EOF
[server]
listen = "127.0.0.1:$1"
access_log = false
drain_timeout = "1s"

$2

[upstreams.up]
targets = ["http://127.0.0.1:$UPSTREAM_PORT"]

[policies.tenant]
key = "header:x-tenant-id"
limit = $BIG
period = "1s"
burst = $BIG

[policies.user]
key = ["header:x-tenant-id", "header:x-user-id"]
limit = $BIG
period = "1s"
burst = $BIG

[policies.endpoint]
key = "route"
limit = $BIG
period = "1s"
burst = $BIG

[[routes]]
name = "search"
path = "/v1/search"
upstream = "up"
policies = ["tenant", "user", "endpoint"]

[[routes]]
name = "one_slot"
path = "/v1/one"
upstream = "up"
policies = ["tenant", "user"]
EOF
}
config "$MEM_PORT" $'[store]\nbackend = "memory"' >"$WORK/memory.toml"
config "$RED_PORT" "$(printf '[store]\nbackend = "redis"\nurl = "redis://127.0.0.1:%s"\ntimeout = "200ms"\non_error = "deny"' "$REDIS_PORT")" >"$WORK/redis.toml"
start_tollgate memory "$WORK/memory.toml" "$MEM_PORT"
start_tollgate redis "$WORK/redis.toml" "$RED_PORT"

curl -sf -o /dev/null -H 'x-tenant-id: t' -H 'x-user-id: u' "http://127.0.0.1:$RED_PORT/v1/search" ||
  die "tollgate with redis does not answer 200"

rps() { # URL -> req/s
  timeout $((DURATION + 30)) wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" -s "$(dirname "$0")/keys.lua" "$1" |
    awk '/Requests\/sec/ { print $2 } /Non-2xx/ { bad = $NF } END { if (bad) print "non-2xx: " bad > "/dev/stderr" }'
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

: >"$WORK/mem"; : >"$WORK/red"
for round in $(seq "$ROUNDS"); do
  log "round $round/$ROUNDS"
  rps "http://127.0.0.1:$MEM_PORT/v1/search" >>"$WORK/mem"
  rps "http://127.0.0.1:$RED_PORT/v1/search" >>"$WORK/red"
done

# Round trips: EVALSHA calls per request, for three tiers over two hash tags and for two
# tiers sharing one (a fixed number of requests each, counted by Redis itself).
trips() { # PATH
  redis-cli -p "$REDIS_PORT" CONFIG RESETSTAT >/dev/null
  for i in $(seq 200); do curl -s -o /dev/null -H "x-tenant-id: t$i" -H "x-user-id: u$i" "http://127.0.0.1:$RED_PORT$1"; done
  redis-cli -p "$REDIS_PORT" INFO commandstats | tr -d '\r' | awk -F'[=,:]' '/cmdstat_evalsha/ { print $3 / 200 }'
}
mem=$(median <"$WORK/mem"); red=$(median <"$WORK/red")
cat <<EOF
## Redis backend versus memory backend (same config: 3 tiers, ${ROUNDS} alternating rounds of ${DURATION}s, wrk -t$THREADS -c$CONNS, 100 tenants x 10,000 users)

| store | req/s (median) | per round |
|---|---:|---|
| memory | $mem | $(paste -sd' ' "$WORK/mem") |
| redis (one local redis-server) | $red | $(paste -sd' ' "$WORK/red") |
| redis / memory | $(awk -v a="$red" -v b="$mem" 'BEGIN { printf "%.2f", a / b }') | |

| route | tiers | Redis round trips per request |
|---|---|---:|
| /v1/search | tenant, tenant+user (one hash tag), endpoint (another) | $(trips /v1/search) |
| /v1/one | tenant, tenant+user (one hash tag) | $(trips /v1/one) |
EOF
