#!/usr/bin/env bash
# CPU per request, split into user and kernel (system) time: tollgate with 3 tiers, with 0
# tiers and refusing, beside nginx (3 limit_req zones keyed like the tiers, one worker),
# HAProxy (3 stick counters, one thread), a Pingora-based peer (bench/pingora-peer:
# pingora-proxy with 3 pingora-limits Rate tiers, one thread), Envoy (the local rate limit
# filter with 3 per-value descriptors, --concurrency 1) and the bare-hyper floor
# forwarding and refusing, one worker each in front of the same upstream, the same load
# and keys. The kernel's share is what no proxy on this stack can save (the same socket
# calls for all); the user share is what tollgate adds. Read from
# /proc/PID/stat around each wrk run. Markdown report on stdout, progress on stderr.
#
#   sudo bench/cpu.sh
#   TOLLGATE_BIN=target/release/tollgate FLOOR_BIN=target/release/examples/floor \
#     PINGORA_BIN=target/pingora-peer/release/pingora-peer ENVOY_BIN=/path/to/envoy bench/cpu.sh
#
# Env: ROUNDS (3) alternating rounds, DURATION (5) seconds of counted load per target,
# CONNS (32). RATE (unset): offer a fixed load of RATE requests a second in all (h2load
# --h1 --rps, open loop) instead of wrk's closed loop, so that every target sees the same
# request timing; a target that cannot keep up is reported as such. h2load sends the same
# headers on every request, so in this mode the 3-tier paths decide one tenant and user.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

ROUNDS=${ROUNDS:-3} DURATION=${DURATION:-5} CONNS=${CONNS:-32}
BIG=1000000   # the peers' rate and burst on the allowed path: every request is admitted

need_tools nginx=nginx-light haproxy=haproxy wrk=wrk h2load=nghttp2-client curl=curl
find_tollgate
find_floor
find_pingora
find_envoy
make_workdir
mkdir -p "$WORK/res"
start_upstream

start_one_worker_peers
start_envoy_peer

TICK=$(getconf CLK_TCK)
H=(-H 'x-tenant-id: t1' -H 'x-user-id: u1')
# load SECONDS URL [wrk args]: drives URL for SECONDS and prints the requests answered —
# with wrk (closed loop), or with RATE set at RATE requests a second in all (h2load, open
# loop), which takes wrk's -H headers but not its -s script (h2load has none).
load() {
  local seconds=$1 url=$2 headers=()
  shift 2
  if [[ -z ${RATE:-} ]]; then
    timeout $((seconds + 60)) wrk -t1 -c"$CONNS" -d"${seconds}s" "$@" "$url" |
      awk '/ requests in / { print $1 }'
    return
  fi
  while [[ $# -gt 0 ]]; do
    case $1 in
      -H) headers+=(-H "$2"); shift 2 ;;
      -s) shift 2 ;;
      *) shift ;;
    esac
  done
  [[ ${#headers[@]} -gt 0 ]] || headers=("${H[@]}")
  timeout $((seconds + 60)) h2load --h1 -c"$CONNS" -t1 --rps=$((RATE / CONNS)) -D "$seconds" \
    "${headers[@]}" "$url" | awk '/^requests:/ { print $6 }'
}
# measure NAME PID URL [wrk args]: appends "user_us system_us" per request to res/NAME.
measure() {
  local name=$1 pid=$2 url=$3 u0 s0 u1 s1 n
  shift 3
  load 2 "$url" "$@" >/dev/null   # warm-up, not counted
  read -r u0 s0 < <(awk '{ print $14, $15 }' "/proc/$pid/stat")
  n=$(load "$DURATION" "$url" "$@")
  read -r u1 s1 < <(awk '{ print $14, $15 }' "/proc/$pid/stat")
  [[ ${n:-0} -gt 0 ]] || die "no requests answered by $name"
  # Open loop: a target below 95 % of the offered load did not keep up, and its figure
  # would not be comparable.
  [[ -z ${RATE:-} || $n -ge $((RATE * DURATION * 95 / 100)) ]] ||
    log "$name answered $n of $((RATE * DURATION)) offered: below the rate"
  awk -v n="$n" -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v t="$TICK" \
    'BEGIN { printf "%.2f %.2f\n", u / t / n * 1e6, s / t / n * 1e6 }' >>"$WORK/res/$name"
  log "$name: $(tail -1 "$WORK/res/$name") (user, system µs per request; $n requests)"
}

TARGETS=(tg3 tg0 floor tgdeny floordeny nginx3 nginx0 nginxdeny hap3 hap0 hapdeny pin3 pin0 pindeny
  env3 env0 envdeny)
run() {
  case $1 in
    tg3) measure tg3 "$TG_PID" "http://127.0.0.1:$TG_PORT/v1/search" -s "$BENCH_DIR/keys.lua" ;;
    tg0) measure tg0 "$TG_PID" "http://127.0.0.1:$TG_PORT/v1/open" "${H[@]}" ;;
    floor) measure floor "$FLOOR_PID" "http://127.0.0.1:$FLOOR_PORT/v1/open" "${H[@]}" ;;
    tgdeny) measure tgdeny "$TG_PID" "http://127.0.0.1:$TG_PORT/deny" -H 'x-tenant-id: hot' ;;
    floordeny) measure floordeny "$FLOOR_DENY_PID" "http://127.0.0.1:$FLOOR_DENY_PORT/deny" -H 'x-tenant-id: hot' ;;
    nginx3) measure nginx3 "$NGINX_PID" "http://127.0.0.1:$NGINX_PORT/v1/search" -s "$BENCH_DIR/keys.lua" ;;
    nginx0) measure nginx0 "$NGINX_PID" "http://127.0.0.1:$NGINX_PORT/v1/open" "${H[@]}" ;;
    nginxdeny) measure nginxdeny "$NGINX_PID" "http://127.0.0.1:$NGINX_PORT/deny" -H 'x-tenant-id: hot' ;;
    hap3) measure hap3 "$HAP_PID" "http://127.0.0.1:$HAP_PORT/v1/search" -s "$BENCH_DIR/keys.lua" ;;
    hap0) measure hap0 "$HAP_PID" "http://127.0.0.1:$HAP_PORT/v1/open" "${H[@]}" ;;
    hapdeny) measure hapdeny "$HAP_PID" "http://127.0.0.1:$HAP_PORT/deny" -H 'x-tenant-id: hot' ;;
    pin3) measure pin3 "$PIN_PID" "http://127.0.0.1:$PIN_PORT/v1/search" -s "$BENCH_DIR/keys.lua" ;;
    pin0) measure pin0 "$PIN_PID" "http://127.0.0.1:$PIN_PORT/v1/open" "${H[@]}" ;;
    pindeny) measure pindeny "$PIN_PID" "http://127.0.0.1:$PIN_PORT/deny" -H 'x-tenant-id: hot' ;;
    env3) measure env3 "$ENVOY_PID" "http://127.0.0.1:$ENVOY_PORT/v1/search" -s "$BENCH_DIR/keys.lua" ;;
    env0) measure env0 "$ENVOY_PID" "http://127.0.0.1:$ENVOY_PORT/v1/open" "${H[@]}" ;;
    envdeny) measure envdeny "$ENVOY_PID" "http://127.0.0.1:$ENVOY_PORT/deny" -H 'x-tenant-id: hot' ;;
  esac
}
for ((r = 0; r < ROUNDS; r++)); do
  log "round $((r + 1))/$ROUNDS"
  for ((i = 0; i < ${#TARGETS[@]}; i++)); do
    run "${TARGETS[(i + r) % ${#TARGETS[@]}]}"
  done
done

# med NAME COLUMN: the median of one column over the rounds.
med() { sort -n -k"$2" "$WORK/res/$1" | awk -v c="$2" '{ v[NR] = $c } END { print v[int((NR + 1) / 2)] }'; }
row() { # NAME LABEL BASE
  local u s bu bs
  u=$(med "$1" 1) s=$(med "$1" 2) bu=$(med "$3" 1) bs=$(med "$3" 2)
  awk -v l="$2" -v u="$u" -v s="$s" -v bu="$bu" -v bs="$bs" \
    'BEGIN { printf "| %s | %.1f | %.1f | %.1f | %.2f |\n", l, u, s, u + s, (u + s) / (bu + bs) }'
}
total() { awk -v u="$(med "$1" 1)" -v s="$(med "$1" 2)" 'BEGIN { print u + s }'; }
versus() { # LABEL OURS FLOOR NGINX HAPROXY PINGORA ENVOY: the ratios of total CPU per request
  awk -v l="$1" -v t="$(total "$2")" -v f="$(total "$3")" -v n="$(total "$4")" \
    -v h="$(total "$5")" -v p="$(total "$6")" -v e="$(total "$7")" \
    'BEGIN { printf "| %s | %.2f | %.2f | %.2f | %.2f | %.2f |\n", l, t / f, t / n, t / h, t / p, t / e }'
}
if [[ -n ${RATE:-} ]]; then
  LOAD="h2load --h1 -c$CONNS -t1 at $RATE requests/s in all (open loop; one key on the 3-tier paths)"
else
  LOAD="wrk -t1 -c$CONNS (closed loop)"
fi
cat <<EOF
## CPU per request (one worker, $LOAD, ${DURATION}s counted, $ROUNDS rounds, medians)

- $(date -u +'%F %T UTC'), $(nproc) CPUs, $("$TOLLGATE" --version); user and system time of
  the proxy process from /proc/PID/stat over the requests answered.

| target | user µs / request | system µs / request | total | / floor |
|---|---:|---:|---:|---:|
$(row floor "floor: bare hyper, dedicated upstream connection" floor)
$(row tg0 "tollgate, 0 tiers" floor)
$(row tg3 "tollgate, 3 tiers (100 tenants x 10,000 users)" floor)
$(row floordeny "floor: static 429" floordeny)
$(row tgdeny "tollgate, refusing (one tier)" floordeny)
$(row nginx3 "nginx, 3 limit_req zones" floor)
$(row nginx0 "nginx, no limits" floor)
$(row nginxdeny "nginx, refusing (limit_req)" floordeny)
$(row hap3 "HAProxy, 3 stick counters" floor)
$(row hap0 "HAProxy, no counters" floor)
$(row hapdeny "HAProxy, refusing (deny_status 429)" floordeny)
$(row pin3 "Pingora peer, 3 pingora-limits tiers" floor)
$(row pin0 "Pingora peer, no limits" floor)
$(row pindeny "Pingora peer, refusing" floordeny)
$(row env3 "Envoy 1.40, 3 local rate limit descriptors" floor)
$(row env0 "Envoy 1.40, no limits" floor)
$(row envdeny "Envoy 1.40, refusing (local rate limit)" floordeny)

| path | tollgate / floor | / nginx | / HAProxy | / Pingora | / Envoy |
|---|---:|---:|---:|---:|---:|
$(versus "3 tiers" tg3 floor nginx3 hap3 pin3 env3)
$(versus "no limits" tg0 floor nginx0 hap0 pin0 env0)
$(versus "refusing" tgdeny floordeny nginxdeny hapdeny pindeny envdeny)
EOF
