#!/usr/bin/env bash
# Redis backend versus memory backend, side by side: the same tollgate config (three tiers:
# tenant, tenant+user, endpoint) in front of the same upstream, with the embedded store, with
# a local redis-server (sync = "exact"), and with the same Redis and every policy leased
# (sync = "lease"). Reports req/s of each, the ratios to memory, and the Redis round trips
# per request (EVALSHA calls counted by the server / requests served), for all three tiers
# and for a route of hot keys only (tenant and endpoint).
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
free_port REDIS_PORT; free_port MEM_PORT; free_port RED_PORT; free_port LEASE_PORT
spawn redis redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no --dir "$WORK"
wait_port "$REDIS_PORT" redis "$LAST_PID"

config() { # PORT STORE_BLOCK [SYNC_LINE]
  local sync=${3:-}
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
$sync

[policies.user]
key = ["header:x-tenant-id", "header:x-user-id"]
limit = $BIG
period = "1s"
burst = $BIG
$sync

[policies.endpoint]
key = "route"
limit = $BIG
period = "1s"
burst = $BIG
$sync

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

[[routes]]
name = "hot"
path = "/v1/hot"
upstream = "up"
policies = ["tenant", "endpoint"]
EOF
}
config "$MEM_PORT" $'[store]\nbackend = "memory"' >"$WORK/memory.toml"
config "$RED_PORT" "$(printf '[store]\nbackend = "redis"\nurl = "redis://127.0.0.1:%s"\ntimeout = "200ms"\non_error = "deny"' "$REDIS_PORT")" >"$WORK/redis.toml"
config "$LEASE_PORT" "$(printf '[store]\nbackend = "redis"\nurl = "redis://127.0.0.1:%s"\ntimeout = "200ms"\non_error = "deny"' "$REDIS_PORT")" 'sync = "lease"' >"$WORK/lease.toml"
start_tollgate memory "$WORK/memory.toml" "$MEM_PORT"
start_tollgate redis "$WORK/redis.toml" "$RED_PORT"
start_tollgate lease "$WORK/lease.toml" "$LEASE_PORT"

curl -sf -o /dev/null -H 'x-tenant-id: t' -H 'x-user-id: u' "http://127.0.0.1:$RED_PORT/v1/search" ||
  die "tollgate with redis does not answer 200"

rps() { # URL -> req/s
  timeout $((DURATION + 30)) wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" -s "$(dirname "$0")/keys.lua" "$1" |
    awk '/Requests\/sec/ { print $2 } /Non-2xx/ { bad = $NF } END { if (bad) print "non-2xx: " bad > "/dev/stderr" }'
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

: >"$WORK/mem"; : >"$WORK/red"; : >"$WORK/lease"; : >"$WORK/memhot"; : >"$WORK/redhot"; : >"$WORK/leasehot"
for round in $(seq "$ROUNDS"); do
  log "round $round/$ROUNDS"
  rps "http://127.0.0.1:$MEM_PORT/v1/search" >>"$WORK/mem"
  rps "http://127.0.0.1:$RED_PORT/v1/search" >>"$WORK/red"
  rps "http://127.0.0.1:$LEASE_PORT/v1/search" >>"$WORK/lease"
  rps "http://127.0.0.1:$MEM_PORT/v1/hot" >>"$WORK/memhot"
  rps "http://127.0.0.1:$RED_PORT/v1/hot" >>"$WORK/redhot"
  rps "http://127.0.0.1:$LEASE_PORT/v1/hot" >>"$WORK/leasehot"
done

# Round trips: EVALSHA calls per request, for three tiers over two hash tags and for two
# tiers sharing one (a fixed number of requests each, counted by Redis itself).
trips() { # PATH [PORT]
  redis-cli -p "$REDIS_PORT" CONFIG RESETSTAT >/dev/null
  for i in $(seq 200); do curl -s -o /dev/null -H "x-tenant-id: t$i" -H "x-user-id: u$i" "http://127.0.0.1:${2:-$RED_PORT}$1"; done
  redis-cli -p "$REDIS_PORT" INFO commandstats | tr -d '\r' | awk -F'[=,:]' '/cmdstat_evalsha/ { print $3 / 200 }'
}
# Under load: EVALSHA calls per request served, for a run of wrk at full speed.
loaded_trips() { # URL
  redis-cli -p "$REDIS_PORT" CONFIG RESETSTAT >/dev/null
  local served
  served=$(timeout $((DURATION + 30)) wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" -s "$(dirname "$0")/keys.lua" "$1" |
    awk '/requests in/ { print $1 }')
  redis-cli -p "$REDIS_PORT" INFO commandstats | tr -d '\r' |
    awk -F'[=,:]' -v n="$served" '/cmdstat_evalsha/ { printf "%.3f", $3 / n }'
}
mem=$(median <"$WORK/mem"); red=$(median <"$WORK/red"); lease=$(median <"$WORK/lease")
memhot=$(median <"$WORK/memhot"); redhot=$(median <"$WORK/redhot"); leasehot=$(median <"$WORK/leasehot")
cat <<EOF
## Redis backend versus memory backend (same config: 3 tiers, ${ROUNDS} alternating rounds of ${DURATION}s, wrk -t$THREADS -c$CONNS, 100 tenants x 10,000 users)

| store | req/s (median) | per round |
|---|---:|---|
| memory | $mem | $(paste -sd' ' "$WORK/mem") |
| redis (one local redis-server) | $red | $(paste -sd' ' "$WORK/red") |
| redis, sync = "lease" | $lease | $(paste -sd' ' "$WORK/lease") |
| redis / memory | $(awk -v a="$red" -v b="$mem" 'BEGIN { printf "%.2f", a / b }') | |
| lease / memory | $(awk -v a="$lease" -v b="$mem" 'BEGIN { printf "%.2f", a / b }') | |

Hot keys only (route /v1/hot: tenant, endpoint):

| store | req/s (median) | per round | / memory |
|---|---:|---|---:|
| memory | $memhot | $(paste -sd' ' "$WORK/memhot") | 1.00 |
| redis, exact | $redhot | $(paste -sd' ' "$WORK/redhot") | $(awk -v a="$redhot" -v b="$memhot" 'BEGIN { printf "%.2f", a / b }') |
| redis, lease | $leasehot | $(paste -sd' ' "$WORK/leasehot") | $(awk -v a="$leasehot" -v b="$memhot" 'BEGIN { printf "%.2f", a / b }') |

Redis calls per request under load (wrk, ${DURATION}s): exact /v1/hot $(loaded_trips "http://127.0.0.1:$RED_PORT/v1/hot"), lease /v1/hot $(loaded_trips "http://127.0.0.1:$LEASE_PORT/v1/hot"), lease /v1/search (its tenant+user tier is cold: a call per new user) $(loaded_trips "http://127.0.0.1:$LEASE_PORT/v1/search").

| route | tiers | Redis round trips per request |
|---|---|---:|
| /v1/search | tenant, tenant+user (one hash tag), endpoint (another) | $(trips /v1/search) |
| /v1/one | tenant, tenant+user (one hash tag) | $(trips /v1/one) |
EOF
