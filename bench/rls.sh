#!/usr/bin/env bash
# The rate limit service (RLS v3), CPU per ShouldRateLimit call: h2load sends unary calls
# (CONNS connections x STREAMS in flight, as an Envoy fleet's filters would) to tollgate's
# [rls] listener; user + system µs per call of the tollgate process, from /proc/PID/stat.
# Cases: one descriptor and three (three policies decided as one), memory and Redis
# (a local redis-server), admitted; and one descriptor refused (memory). Medians of
# ROUNDS alternating rounds; markdown on stdout.
#
#   sudo bench/rls.sh
#   TOLLGATE_BIN=target/release/tollgate bench/rls.sh
#
# Env: ROUNDS (3), DURATION (5) seconds counted per case, CONNS (4), STREAMS (50).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

ROUNDS=${ROUNDS:-3} DURATION=${DURATION:-5} CONNS=${CONNS:-4} STREAMS=${STREAMS:-50}

need_tools h2load=nghttp2-client nghttp=nghttp2-client redis-server=redis-server python3=python3
find_tollgate
make_workdir
mkdir -p "$WORK/res"

free_port REDIS_PORT; free_port MEM_PORT; free_port MEM_RLS; free_port REDIS_TG_PORT; free_port REDIS_RLS
spawn redis redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no
wait_port "$REDIS_PORT" redis "$LAST_PID"

# rls_toml PORT RLS_PORT STORE: policies large enough that every call is admitted, but
# `closed`, which refuses (one an hour), and three rules on one call's descriptors.
rls_toml() {
  cat <<EOF
[server]
listen = "127.0.0.1:$1"
access_log = false
drain_timeout = "1s"
workers = 1

[store]
$3

$(toml_policy tenant '"header:x-tenant"' 1000000000 1s 1000000000)
$(toml_policy search '"header:x-tenant"' 1000000000 1s 1000000000)
$(toml_policy user '"header:x-user"' 1000000000 1s 1000000000)
$(toml_policy closed '"header:x-tenant"' 1 1h 1)
$(toml_policy race '"header:x-tenant"' 1 1h 1)

[rls]
listen = "127.0.0.1:$2"
$(rls_rules)
EOF
}
rls_toml "$MEM_PORT" "$MEM_RLS" 'backend = "memory"' >"$WORK/mem.toml"
rls_toml "$REDIS_TG_PORT" "$REDIS_RLS" "backend = \"redis\"
url = \"redis://127.0.0.1:$REDIS_PORT\"" >"$WORK/redis.toml"
start_tollgate mem "$WORK/mem.toml" "$MEM_RLS"
MEM_PID=$LAST_PID
start_tollgate redis_tg "$WORK/redis.toml" "$REDIS_RLS"
REDIS_PID=$LAST_PID

rls_calls "$WORK"
GRPC_H=(-H 'content-type: application/grpc' -H 'te: trailers')
URL_PATH=/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit

# check_call PORT BODY: one call answers grpc-status 0.
check_call() {
  local out
  out=$(nghttp -v "${GRPC_H[@]}" -d "$WORK/$2" "http://127.0.0.1:$1$URL_PATH" 2>&1) || die "nghttp failed: $out"
  grep -q 'grpc-status: 0' <<<"$out" || die "no grpc-status 0 from port $1: $out"
}
check_call "$MEM_RLS" one.bin; check_call "$MEM_RLS" three.bin; check_call "$MEM_RLS" refused.bin
check_call "$REDIS_RLS" one.bin; check_call "$REDIS_RLS" three.bin

CASES=(mem_one mem_three mem_refused redis_one redis_three)
run() {
  case $1 in
    mem_one) rls_load mem_one "$MEM_PID" "$MEM_RLS" one.bin ;;
    mem_three) rls_load mem_three "$MEM_PID" "$MEM_RLS" three.bin ;;
    mem_refused) rls_load mem_refused "$MEM_PID" "$MEM_RLS" refused.bin ;;
    redis_one) rls_load redis_one "$REDIS_PID" "$REDIS_RLS" one.bin ;;
    redis_three) rls_load redis_three "$REDIS_PID" "$REDIS_RLS" three.bin ;;
  esac
}
for ((r = 0; r < ROUNDS; r++)); do
  log "round $((r + 1))/$ROUNDS"
  for ((i = 0; i < ${#CASES[@]}; i++)); do
    run "${CASES[(i + r) % ${#CASES[@]}]}"
  done
done

row() { # NAME LABEL
  awk -v l="$2" -v u="$(rls_med "$1" 1)" -v s="$(rls_med "$1" 2)" -v r="$(rls_med "$1" 3)" \
    'BEGIN { printf "| %s | %.0f | %.1f | %.1f | %.1f |\n", l, r, u, s, u + s }'
}
cat <<EOF
## The rate limit service: CPU per ShouldRateLimit call ($ROUNDS rounds, medians)

- $(date -u +'%F %T UTC'), $(nproc) CPUs, $("$TOLLGATE" --version). h2load -t1 -c$CONNS -m$STREAMS
  ($((CONNS * STREAMS)) calls in flight), ${DURATION}s counted per case; CPU of the tollgate process
  (user + system, /proc), Redis's own CPU not counted.

| case | calls/s | user µs / call | system µs / call | total µs / call |
|---|---:|---:|---:|---:|
$(row mem_one "memory, 1 descriptor, admitted")
$(row mem_three "memory, 3 descriptors (3 policies), admitted")
$(row mem_refused "memory, 1 descriptor, refused")
$(row redis_one "Redis, 1 descriptor, admitted")
$(row redis_three "Redis, 3 descriptors (one script call), admitted")
EOF
