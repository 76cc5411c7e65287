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

[rls]
listen = "127.0.0.1:$2"

[[rls.rules]]
domain = "edge"
descriptor = ["tenant"]
policy = "tenant"

[[rls.rules]]
domain = "edge"
descriptor = ["tenant", { path = "/v1/search" }]
policy = "search"

[[rls.rules]]
domain = "edge"
descriptor = ["user"]
policy = "user"

[[rls.rules]]
domain = "closed"
descriptor = ["tenant"]
policy = "closed"
EOF
}
rls_toml "$MEM_PORT" "$MEM_RLS" 'backend = "memory"' >"$WORK/mem.toml"
rls_toml "$REDIS_TG_PORT" "$REDIS_RLS" "backend = \"redis\"
url = \"redis://127.0.0.1:$REDIS_PORT\"" >"$WORK/redis.toml"
start_tollgate mem "$WORK/mem.toml" "$MEM_RLS"
MEM_PID=$LAST_PID
start_tollgate redis_tg "$WORK/redis.toml" "$REDIS_RLS"
REDIS_PID=$LAST_PID

# The calls, framed: RateLimitRequest{domain, descriptors} written out field by field.
python3 - "$WORK" <<'PY'
import sys
def field(tag, payload):
    return bytes([tag << 3 | 2, len(payload)]) + payload
def entry(k, v):
    return field(1, field(1, k.encode()) + field(2, v.encode()))
def call(domain, descriptors):
    msg = field(1, domain.encode()) + b"".join(field(2, b"".join(entry(k, v) for k, v in d)) for d in descriptors)
    return b"\x00" + len(msg).to_bytes(4, "big") + msg
work = sys.argv[1]
open(f"{work}/one.bin", "wb").write(call("edge", [[("tenant", "acme")]]))
open(f"{work}/three.bin", "wb").write(call("edge", [[("tenant", "acme")], [("tenant", "acme"), ("path", "/v1/search")], [("user", "ann")]]))
open(f"{work}/refused.bin", "wb").write(call("closed", [[("tenant", "acme")]]))
PY
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

TICK=$(getconf CLK_TCK)
cpu() { awk '{ print $14, $15 }' "/proc/$1/stat"; }
# load NAME PID PORT BODY: h2load's calls; appends "user_us system_us calls_per_s".
load() {
  local u0 s0 u1 s1 n args=(-t1 -c"$CONNS" -m"$STREAMS" "${GRPC_H[@]}" -d "$WORK/$4")
  local url="http://127.0.0.1:$3$URL_PATH"
  timeout 60 h2load "${args[@]}" -D 2 "$url" >/dev/null   # warm-up, not counted
  read -r u0 s0 < <(cpu "$2")
  n=$(timeout $((DURATION + 60)) h2load "${args[@]}" -D "$DURATION" "$url" |
    awk '/^status codes:/ { print $3 }')
  read -r u1 s1 < <(cpu "$2")
  [[ ${n:-0} -gt 0 ]] || die "no calls answered in $1"
  awk -v n="$n" -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v t="$TICK" -v d="$DURATION" \
    'BEGIN { printf "%.2f %.2f %.0f\n", u / t / n * 1e6, s / t / n * 1e6, n / d }' >>"$WORK/res/$1"
  log "$1: $(tail -1 "$WORK/res/$1") (user, system µs per call; calls/s)"
}

CASES=(mem_one mem_three mem_refused redis_one redis_three)
run() {
  case $1 in
    mem_one) load mem_one "$MEM_PID" "$MEM_RLS" one.bin ;;
    mem_three) load mem_three "$MEM_PID" "$MEM_RLS" three.bin ;;
    mem_refused) load mem_refused "$MEM_PID" "$MEM_RLS" refused.bin ;;
    redis_one) load redis_one "$REDIS_PID" "$REDIS_RLS" one.bin ;;
    redis_three) load redis_three "$REDIS_PID" "$REDIS_RLS" three.bin ;;
  esac
}
for ((r = 0; r < ROUNDS; r++)); do
  log "round $((r + 1))/$ROUNDS"
  for ((i = 0; i < ${#CASES[@]}; i++)); do
    run "${CASES[(i + r) % ${#CASES[@]}]}"
  done
done

med() { sort -n -k"$2" "$WORK/res/$1" | awk -v c="$2" '{ v[NR] = $c } END { print v[int((NR + 1) / 2)] }'; }
row() { # NAME LABEL
  awk -v l="$2" -v u="$(med "$1" 1)" -v s="$(med "$1" 2)" -v r="$(med "$1" 3)" \
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
