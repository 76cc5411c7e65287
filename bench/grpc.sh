#!/usr/bin/env bash
# gRPC and HTTP/2 upstreams, CPU per call. Part one: unary gRPC calls (test.Echo/Say)
# from h2load at fixed concurrency through tollgate (protocol = "h2c", one worker, with
# and without a per-tenant tier) and nginx (grpc_pass, one worker) in front of the same
# tonic server (bench/grpc_echo.rs): calls/s and user + system µs per call of the proxy,
# from /proc/PID/stat. Part two: the REST bench's unlimited route (wrk) through
# tollgate's HTTP/1.1 pool and through protocol = "h2c" to the same nginx upstream
# (HTTP/2 on a second port): CPU per request, and system calls per request when strace
# is installed. Medians of ROUNDS alternating rounds; markdown on stdout.
#
#   sudo bench/grpc.sh
#   TOLLGATE_BIN=target/release/tollgate GRPC_ECHO_BIN=target/release/examples/grpc_echo bench/grpc.sh
#
# Env: ROUNDS (3), DURATION (5) seconds counted per target, CONNS (4) client connections
# and STREAMS (50) calls in flight on each (200 at once), REST_CONNS (32).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

ROUNDS=${ROUNDS:-3} DURATION=${DURATION:-5} CONNS=${CONNS:-4} STREAMS=${STREAMS:-50}
REST_CONNS=${REST_CONNS:-32}

need_tools nginx=nginx-light h2load=nghttp2-client nghttp=nghttp2-client wrk=wrk
find_tollgate
if [[ -n ${GRPC_ECHO_BIN:-} ]]; then
  GRPC_ECHO=$GRPC_ECHO_BIN
else
  log "building the gRPC upstream (cargo build --release --example grpc_echo)"
  (cd "$REPO_DIR" && cargo build --release --example grpc_echo >&2) || die "cargo build failed"
  GRPC_ECHO=$REPO_DIR/target/release/examples/grpc_echo
fi
[[ -x $GRPC_ECHO ]] || die "no grpc_echo binary at $GRPC_ECHO"
make_workdir
mkdir -p "$WORK/res"

free_port GRPC_PORT; free_port UPSTREAM_PORT; free_port UPSTREAM_H2_PORT
free_port TG_PORT; free_port TG1_PORT; free_port NGINX_PORT
spawn grpc_echo "$GRPC_ECHO" "127.0.0.1:$GRPC_PORT"
wait_port "$GRPC_PORT" grpc_echo "$LAST_PID"

# The REST upstream: `200 ok`, HTTP/1.1 on one port, h2c on another (nginx 1.22 needs
# a port of its own for prior-knowledge HTTP/2).
{ nginx_head upstream 1
  echo "http {"; nginx_http_common; cat <<EOF
    http2_max_requests 1000000;
    server { listen 127.0.0.1:$UPSTREAM_PORT; location / { return 200 "ok\\n"; } }
    server { listen 127.0.0.1:$UPSTREAM_H2_PORT http2; location / { return 200 "ok\\n"; } }
}
EOF
} >"$WORK/upstream.conf"
spawn upstream nginx -p "$WORK/" -c "$WORK/upstream.conf"
wait_port "$UPSTREAM_H2_PORT" upstream "$LAST_PID"

# tollgate_toml PORT ROUTES: one worker in front of the gRPC and REST upstreams.
tollgate_toml() {
  cat <<EOF
[server]
listen = "127.0.0.1:$1"
access_log = false
drain_timeout = "1s"
workers = 1

[upstreams.grpc]
targets = ["http://127.0.0.1:$GRPC_PORT"]
protocol = "h2c"

[upstreams.rest]
targets = ["http://127.0.0.1:$UPSTREAM_PORT"]

[upstreams.rest_h2c]
targets = ["http://127.0.0.1:$UPSTREAM_H2_PORT"]
protocol = "h2c"

$(toml_policy tenant '"header:x-tenant-id"' 1000000 1s 1000000)
$2
EOF
}
tollgate_toml "$TG_PORT" "$(toml_route grpc /test.Echo/ grpc '[]')
$(toml_route open_h2c /v1/h2c rest_h2c '[]')
$(toml_route open /v1/open rest '[]')" >"$WORK/tollgate.toml"
start_tollgate tollgate "$WORK/tollgate.toml" "$TG_PORT"
TG_PID=$LAST_PID
tollgate_toml "$TG1_PORT" "$(toml_route grpc /test.Echo/ grpc '["tenant"]')" >"$WORK/tollgate1.toml"
start_tollgate tollgate1 "$WORK/tollgate1.toml" "$TG1_PORT"
TG1_PID=$LAST_PID

{ nginx_head nginx 1
  echo "http {"; nginx_http_common; cat <<EOF
    http2_max_requests 1000000;
    upstream grpc_up { server 127.0.0.1:$GRPC_PORT; keepalive 64; }
    server {
        listen 127.0.0.1:$NGINX_PORT http2;
        location / { grpc_pass grpc://grpc_up; }
    }
}
EOF
} >"$WORK/nginx.conf"
spawn nginx nginx -p "$WORK/" -c "$WORK/nginx.conf"
wait_port "$NGINX_PORT" nginx "$LAST_PID"
NGINX_PID=$(pgrep -P "$LAST_PID" | head -1)
[[ -n $NGINX_PID ]] || die "no nginx worker process"

# One unary call's message: a gRPC frame (uncompressed, 7 bytes) holding Msg{text: "bench"}.
printf '\x00\x00\x00\x00\x07\x0a\x05bench' >"$WORK/call.bin"
GRPC_H=(-H 'content-type: application/grpc' -H 'te: trailers' -H 'x-tenant-id: t1')

# check_call NAME URL: one call through NAME answers grpc-status 0 with the echo.
check_call() {
  local out
  out=$(nghttp -v "${GRPC_H[@]}" -d "$WORK/call.bin" "$2" 2>&1) || die "$1: nghttp failed: $out"
  grep -q 'grpc-status: 0' <<<"$out" || die "$1 did not answer grpc-status 0: $out"
  grep -q 'hello bench' <<<"$out" || die "$1 did not carry the reply: $out"
}
check_call tollgate "http://127.0.0.1:$TG_PORT/test.Echo/Say"
check_call tollgate1 "http://127.0.0.1:$TG1_PORT/test.Echo/Say"
check_call nginx "http://127.0.0.1:$NGINX_PORT/test.Echo/Say"

TICK=$(getconf CLK_TCK)
cpu() { awk '{ print $14, $15 }' "/proc/$1/stat"; }
# record NAME PID N U0 S0: appends "user_us system_us calls_per_s" to res/NAME.
record() {
  local name=$1 pid=$2 n=$3 u0=$4 s0=$5 u1 s1
  read -r u1 s1 < <(cpu "$pid")
  [[ ${n:-0} -gt 0 ]] || die "no calls answered by $name"
  awk -v n="$n" -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v t="$TICK" -v d="$DURATION" \
    'BEGIN { printf "%.2f %.2f %.0f\n", u / t / n * 1e6, s / t / n * 1e6, n / d }' >>"$WORK/res/$name"
  log "$name: $(tail -1 "$WORK/res/$name") (user, system µs per call; calls/s)"
}
# grpc_load NAME PID URL: h2load's unary calls, CONNS x STREAMS in flight.
grpc_load() {
  local u0 s0 n args=(-t1 -c"$CONNS" -m"$STREAMS" "${GRPC_H[@]}" -d "$WORK/call.bin")
  timeout 60 h2load "${args[@]}" -D 2 "$3" >/dev/null   # warm-up, not counted
  read -r u0 s0 < <(cpu "$2")
  n=$(timeout $((DURATION + 60)) h2load "${args[@]}" -D "$DURATION" "$3" |
    awk '/^status codes:/ { print $3 }')
  record "$1" "$2" "$n" "$u0" "$s0"
}
# rest_load NAME PID URL: wrk, as bench/cpu.sh.
rest_load() {
  local u0 s0 n
  timeout 60 wrk -t1 -c"$REST_CONNS" -d2s "$3" >/dev/null
  read -r u0 s0 < <(cpu "$2")
  n=$(timeout $((DURATION + 60)) wrk -t1 -c"$REST_CONNS" -d"${DURATION}s" "$3" |
    awk '/ requests in / { print $1 }')
  record "$1" "$2" "$n" "$u0" "$s0"
}

TARGETS=(tg_grpc tg_grpc1 nginx_grpc tg_rest tg_rest_h2c)
run() {
  case $1 in
    tg_grpc) grpc_load tg_grpc "$TG_PID" "http://127.0.0.1:$TG_PORT/test.Echo/Say" ;;
    tg_grpc1) grpc_load tg_grpc1 "$TG1_PID" "http://127.0.0.1:$TG1_PORT/test.Echo/Say" ;;
    nginx_grpc) grpc_load nginx_grpc "$NGINX_PID" "http://127.0.0.1:$NGINX_PORT/test.Echo/Say" ;;
    tg_rest) rest_load tg_rest "$TG_PID" "http://127.0.0.1:$TG_PORT/v1/open" ;;
    tg_rest_h2c) rest_load tg_rest_h2c "$TG_PID" "http://127.0.0.1:$TG_PORT/v1/h2c" ;;
  esac
}
for ((r = 0; r < ROUNDS; r++)); do
  log "round $((r + 1))/$ROUNDS"
  for ((i = 0; i < ${#TARGETS[@]}; i++)); do
    run "${TARGETS[(i + r) % ${#TARGETS[@]}]}"
  done
done

# System calls per request of tollgate's REST paths (strace -c over a fixed run).
syscalls() { # URL
  command -v strace >/dev/null || { echo "-"; return; }
  local n
  strace -c -f -p "$TG_PID" -o "$WORK/strace.out" 2>/dev/null &
  local spid=$!
  sleep 1
  n=$(timeout 60 wrk -t1 -c"$REST_CONNS" -d3s "$1" | awk '/ requests in / { print $1 }')
  kill -INT "$spid"; wait "$spid" 2>/dev/null || true
  awk -v n="$n" '/^100.00|total/ { calls = $4 } END { printf "%.2f", calls / n }' "$WORK/strace.out"
}
SYS_H1=$(syscalls "http://127.0.0.1:$TG_PORT/v1/open")
SYS_H2C=$(syscalls "http://127.0.0.1:$TG_PORT/v1/h2c")

med() { sort -n -k"$2" "$WORK/res/$1" | awk -v c="$2" '{ v[NR] = $c } END { print v[int((NR + 1) / 2)] }'; }
total() { awk -v u="$(med "$1" 1)" -v s="$(med "$1" 2)" 'BEGIN { print u + s }'; }
row() { # NAME LABEL BASE
  awk -v l="$2" -v u="$(med "$1" 1)" -v s="$(med "$1" 2)" -v r="$(med "$1" 3)" -v b="$(total "$3")" \
    'BEGIN { printf "| %s | %.0f | %.1f | %.1f | %.1f | %.2f |\n", l, r, u, s, u + s, (u + s) / b }'
}
cat <<EOF
## gRPC and HTTP/2 upstreams: CPU per call (one worker each, $ROUNDS rounds, medians)

- $(date -u +'%F %T UTC'), $(nproc) CPUs, $("$TOLLGATE" --version), $(nginx -v 2>&1).
  gRPC: h2load -t1 -c$CONNS -m$STREAMS ($((CONNS * STREAMS)) unary calls in flight), ${DURATION}s
  counted, to a tonic server; REST: wrk -t1 -c$REST_CONNS to nginx \`return 200\`.

| target | calls/s | user µs / call | system µs / call | total | / nginx grpc_pass |
|---|---:|---:|---:|---:|---:|
$(row nginx_grpc "nginx grpc_pass" nginx_grpc)
$(row tg_grpc "tollgate, h2c upstream, no tiers" nginx_grpc)
$(row tg_grpc1 "tollgate, h2c upstream, one tier" nginx_grpc)

| REST path, tollgate | requests/s | user µs / request | system µs / request | total | / HTTP/1.1 pool |
|---|---:|---:|---:|---:|---:|
$(row tg_rest "HTTP/1.1 pool" tg_rest)
$(row tg_rest_h2c "protocol = \"h2c\"" tg_rest)

System calls per request (strace -c, tollgate): HTTP/1.1 pool $SYS_H1, h2c $SYS_H2C.
EOF
