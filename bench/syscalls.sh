#!/usr/bin/env bash
# System calls per request, counted by `strace -c`: tollgate (3 tiers, 0 tiers, refusing)
# beside nginx (one worker, 3 limit_req zones), HAProxy (one thread, 3 stick counters),
# the Pingora peer (bench/pingora-peer, one thread) and the bare-hyper floor, the same
# upstream and load as bench/cpu.sh. strace slows the traced process, so only the counts
# are read, never the times: calls per request answered while it was attached. Markdown
# report on stdout, progress on stderr.
#
#   sudo bench/syscalls.sh
#   TOLLGATE_BIN=target/release/tollgate FLOOR_BIN=target/release/examples/floor \
#     PINGORA_BIN=target/pingora-peer/release/pingora-peer bench/syscalls.sh
#
# Env: DURATION (5) seconds traced per target, CONNS (32).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

DURATION=${DURATION:-5} CONNS=${CONNS:-32}
BIG=1000000   # the peers' rate and burst on the allowed path: every request is admitted

need_tools nginx=nginx-light haproxy=haproxy wrk=wrk strace=strace
find_tollgate
find_floor
find_pingora
make_workdir
start_upstream

start_one_worker_peers

H=(-H 'x-tenant-id: t1' -H 'x-user-id: u1')
# trace NAME PID URL [wrk args]: strace -c over a wrk run; writes res.NAME ("calls
# syscall" lines per request) after a warm-up that is not traced.
trace() {
  local name=$1 pid=$2 url=$3 n spid
  shift 3
  timeout 60 wrk -t1 -c"$CONNS" -d2s "$@" "$url" >/dev/null   # warm-up, not traced
  strace -c -f -q -p "$pid" -o "$WORK/strace.$name" &
  spid=$!
  sleep 0.5   # attached to every thread before the counted run
  n=$(timeout $((DURATION + 60)) wrk -t1 -c"$CONNS" -d"${DURATION}s" "$@" "$url" |
    awk '/ requests in / { print $1 }')
  kill -INT "$spid"
  wait "$spid" 2>/dev/null || true
  [[ ${n:-0} -gt 0 ]] || die "no requests answered by $name"
  # strace -c: "% time seconds usecs/call calls [errors] syscall"; the total line last.
  awk -v n="$n" '$NF != "total" && $4 ~ /^[0-9]+$/ { printf "%.2f %s\n", $4 / n, $NF }' \
    "$WORK/strace.$name" | sort -rn >"$WORK/res.$name"
  log "$name: $(awk '{ s += $1 } END { printf "%.2f", s }' "$WORK/res.$name") system calls per request ($n requests)"
}

trace tg3 "$TG_PID" "http://127.0.0.1:$TG_PORT/v1/search" -s "$BENCH_DIR/keys.lua"
trace tg0 "$TG_PID" "http://127.0.0.1:$TG_PORT/v1/open" "${H[@]}"
trace tgdeny "$TG_PID" "http://127.0.0.1:$TG_PORT/deny" -H 'x-tenant-id: hot'
trace floor "$FLOOR_PID" "http://127.0.0.1:$FLOOR_PORT/v1/open" "${H[@]}"
trace floordeny "$FLOOR_DENY_PID" "http://127.0.0.1:$FLOOR_DENY_PORT/deny" -H 'x-tenant-id: hot'
trace nginx3 "$NGINX_PID" "http://127.0.0.1:$NGINX_PORT/v1/search" -s "$BENCH_DIR/keys.lua"
trace nginx0 "$NGINX_PID" "http://127.0.0.1:$NGINX_PORT/v1/open" "${H[@]}"
trace nginxdeny "$NGINX_PID" "http://127.0.0.1:$NGINX_PORT/deny" -H 'x-tenant-id: hot'
trace hap3 "$HAP_PID" "http://127.0.0.1:$HAP_PORT/v1/search" -s "$BENCH_DIR/keys.lua"
trace hap0 "$HAP_PID" "http://127.0.0.1:$HAP_PORT/v1/open" "${H[@]}"
trace hapdeny "$HAP_PID" "http://127.0.0.1:$HAP_PORT/deny" -H 'x-tenant-id: hot'
trace pin3 "$PIN_PID" "http://127.0.0.1:$PIN_PORT/v1/search" -s "$BENCH_DIR/keys.lua"
trace pin0 "$PIN_PID" "http://127.0.0.1:$PIN_PORT/v1/open" "${H[@]}"
trace pindeny "$PIN_PID" "http://127.0.0.1:$PIN_PORT/deny" -H 'x-tenant-id: hot'

# row NAME LABEL: total calls per request, then the calls above 0.05 a request.
row() {
  awk -v l="$2" '{ s += $1; if ($1 >= 0.05) d = d sprintf("%s%s %.2f", (d ? ", " : ""), $2, $1) }
    END { printf "| %s | %.2f | %s |\n", l, s, d }' "$WORK/res.$1"
}
cat <<EOF
## System calls per request (strace -c, one worker each, wrk -t1 -c$CONNS, ${DURATION}s traced)

- $(date -u +'%F %T UTC'), $(strace -V | head -1), $("$TOLLGATE" --version).

| target | calls / request | of which (≥ 0.05 a request) |
|---|---:|---|
$(row floor "floor: bare hyper, forwarding")
$(row tg0 "tollgate, 0 tiers")
$(row tg3 "tollgate, 3 tiers")
$(row nginx0 "nginx, no limits")
$(row nginx3 "nginx, 3 limit_req zones")
$(row hap0 "HAProxy, no counters")
$(row hap3 "HAProxy, 3 stick counters")
$(row pin0 "Pingora peer, no limits")
$(row pin3 "Pingora peer, 3 pingora-limits tiers")
$(row floordeny "floor: static 429")
$(row tgdeny "tollgate, refusing")
$(row nginxdeny "nginx, refusing")
$(row hapdeny "HAProxy, refusing")
$(row pindeny "Pingora peer, refusing")
EOF
