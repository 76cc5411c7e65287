#!/usr/bin/env bash
# The rate limit service beside Kuadrant/limitador (a Rust RLS server), under the same gRPC
# load: CPU per ShouldRateLimit call (h2load, CONNS x STREAMS in flight) with one and three
# descriptors, in memory and on Redis; then the over-admission of each with two server
# processes on one Redis: RACE calls of one key, all at once over both, against a limit of
# LIMIT, counted from the answers' overall_code. Medians of ROUNDS alternating rounds;
# markdown on stdout.
#
#   sudo bench/rls-peers.sh
#   TOLLGATE_BIN=target/release/tollgate LIMITADOR_BIN=…/limitador-server bench/rls-peers.sh
#
# Without LIMITADOR_BIN, limitador is built from its repository (LIMITADOR_REPO, at
# LIMITADOR_COMMIT) into ~/.cache/tollgate-bench/limitador: it needs protoc, pkg-config,
# libssl-dev and libclang-dev (installed here when missing) and takes a while (about 17
# minutes on 2 cores: rocksdb is C++).
# Env: ROUNDS (3), DURATION (5), CONNS (4), STREAMS (50), RACE (1000), LIMIT (100).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

ROUNDS=${ROUNDS:-3} DURATION=${DURATION:-5} CONNS=${CONNS:-4} STREAMS=${STREAMS:-50}
RACE=${RACE:-1000} LIMIT=${LIMIT:-100}
LIMITADOR_REPO=${LIMITADOR_REPO:-https://github.com/Kuadrant/limitador}
LIMITADOR_COMMIT=${LIMITADOR_COMMIT:-2981b2b}

need_tools h2load=nghttp2-client redis-server=redis-server python3=python3
python3 -c 'import grpc' 2>/dev/null || python3 -m pip install --quiet grpcio ||
  python3 -m pip install --quiet --break-system-packages grpcio
find_tollgate
if [[ -n ${LIMITADOR_BIN:-} ]]; then
  LIMITADOR=$LIMITADOR_BIN
else
  need_tools protoc=protobuf-compiler pkg-config=pkg-config git=git
  # Libraries its build links or generates bindings from (rocksdb through bindgen).
  for pkg in libssl-dev libclang-dev; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need_tools "absent-$pkg=$pkg"
  done
  src=$HOME/.cache/tollgate-bench/limitador
  [[ -d $src ]] || git clone -q "$LIMITADOR_REPO" "$src"
  (cd "$src" && git checkout -q "$LIMITADOR_COMMIT" && cargo build --release -p limitador-server --locked >&2) ||
    die "building limitador failed"
  LIMITADOR=$src/target/release/limitador-server
fi
[[ -x $LIMITADOR ]] || die "no limitador-server at $LIMITADOR"
make_workdir
mkdir -p "$WORK/res"

free_port REDIS_PORT
spawn redis redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no
wait_port "$REDIS_PORT" redis "$LAST_PID"
REDIS_URL=redis://127.0.0.1:$REDIS_PORT

# The same limits for both: `tenant`, `search` (tenant, path = /v1/search) and `user`, large
# enough that every call is admitted; `race`: LIMIT an hour.
tollgate_toml() { # PORT RLS_PORT STORE
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
$(toml_policy race '"header:x-tenant"' "$LIMIT" 1h "$LIMIT")
[rls]
listen = "127.0.0.1:$2"
$(rls_rules)
EOF
}
# One-descriptor calls have a domain of their own: limitador panics on a call whose
# descriptors a limit's condition indexes past (descriptors[1] of a one-descriptor call).
cat >"$WORK/limits.yaml" <<EOF
---
- namespace: one
  max_value: 1000000000
  seconds: 1
  conditions: []
  variables: ["descriptors[0]['tenant']"]
- namespace: edge
  max_value: 1000000000
  seconds: 1
  conditions: []
  variables: ["descriptors[0]['tenant']"]
- namespace: edge
  max_value: 1000000000
  seconds: 1
  conditions: ["descriptors[1]['path'] == '/v1/search'"]
  variables: ["descriptors[1]['tenant']"]
- namespace: edge
  max_value: 1000000000
  seconds: 1
  conditions: []
  variables: ["descriptors[2]['user']"]
- namespace: race
  max_value: $LIMIT
  seconds: 3600
  conditions: []
  variables: ["descriptors[0]['tenant']"]
EOF

# start_limitador NAME RLS_PORT STORAGE…: one limitador-server.
start_limitador() {
  local name=$1 port=$2 http; shift 2
  free_port http
  spawn "$name" "$LIMITADOR" --rls-ip 127.0.0.1 --rls-port "$port" --http-ip 127.0.0.1 \
    --http-port "$http" "$WORK/limits.yaml" "$@"
  wait_port "$port" "$name" "$LAST_PID"
}
free_port TG_MEM; free_port TG_MEM_RLS; free_port TG_R1; free_port TG_R1_RLS; free_port TG_R2; free_port TG_R2_RLS
free_port LI_MEM; free_port LI_R1; free_port LI_R2
tollgate_toml "$TG_MEM" "$TG_MEM_RLS" 'backend = "memory"' >"$WORK/tg_mem.toml"
tollgate_toml "$TG_R1" "$TG_R1_RLS" "backend = \"redis\"
url = \"$REDIS_URL\"" >"$WORK/tg_r1.toml"
tollgate_toml "$TG_R2" "$TG_R2_RLS" "backend = \"redis\"
url = \"$REDIS_URL\"" >"$WORK/tg_r2.toml"
start_tollgate tg_mem "$WORK/tg_mem.toml" "$TG_MEM_RLS"; TG_MEM_PID=$LAST_PID
start_tollgate tg_r1 "$WORK/tg_r1.toml" "$TG_R1_RLS"; TG_R1_PID=$LAST_PID
start_tollgate tg_r2 "$WORK/tg_r2.toml" "$TG_R2_RLS"
start_limitador li_mem "$LI_MEM" memory; LI_MEM_PID=$LAST_PID
start_limitador li_r1 "$LI_R1" redis "$REDIS_URL"; LI_R1_PID=$LAST_PID
start_limitador li_r2 "$LI_R2" redis "$REDIS_URL"

# The calls, framed, and a client that counts answers by overall_code.
rls_calls "$WORK"
cat >"$WORK/race.py" <<'PY'
# RACE calls at once over the servers given, each `race.msg`; prints how many were OK.
import asyncio, sys, grpc
path = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
async def main(n, msg, addrs):
    chans = [grpc.aio.insecure_channel(a) for a in addrs]
    calls = [c.unary_unary(path) for c in chans]
    async def one(i):
        reply = await calls[i % len(calls)](msg)
        return len(reply) >= 2 and reply[0] == 0x08 and reply[1] == 1   # overall_code = OK
    oks = await asyncio.gather(*(one(i) for i in range(n)))
    print(sum(oks))
n, msg = int(sys.argv[1]), open(sys.argv[2], "rb").read()
asyncio.run(main(n, msg, sys.argv[3:]))
PY

CASES=(tg_mem_one li_mem_one tg_mem_three li_mem_three tg_r_one li_r_one tg_r_three li_r_three)
run() {
  case $1 in
    tg_mem_one) rls_load "$1" "$TG_MEM_PID" "$TG_MEM_RLS" one.bin ;;
    li_mem_one) rls_load "$1" "$LI_MEM_PID" "$LI_MEM" one.bin ;;
    tg_mem_three) rls_load "$1" "$TG_MEM_PID" "$TG_MEM_RLS" three.bin ;;
    li_mem_three) rls_load "$1" "$LI_MEM_PID" "$LI_MEM" three.bin ;;
    tg_r_one) rls_load "$1" "$TG_R1_PID" "$TG_R1_RLS" one.bin ;;
    li_r_one) rls_load "$1" "$LI_R1_PID" "$LI_R1" one.bin ;;
    tg_r_three) rls_load "$1" "$TG_R1_PID" "$TG_R1_RLS" three.bin ;;
    li_r_three) rls_load "$1" "$LI_R1_PID" "$LI_R1" three.bin ;;
  esac
}
for ((r = 0; r < ROUNDS; r++)); do
  log "round $((r + 1))/$ROUNDS"
  for ((i = 0; i < ${#CASES[@]}; i++)); do run "${CASES[(i + r) % ${#CASES[@]}]}"; done
done

log "the race: $RACE calls of one key over two processes on one Redis, limit $LIMIT"
TG_RACE=$(python3 "$WORK/race.py" "$RACE" "$WORK/race.msg" "127.0.0.1:$TG_R1_RLS" "127.0.0.1:$TG_R2_RLS")
LI_RACE=$(python3 "$WORK/race.py" "$RACE" "$WORK/race.msg" "127.0.0.1:$LI_R1" "127.0.0.1:$LI_R2")

tot() { awk -v u="$(rls_med "$1" 1)" -v s="$(rls_med "$1" 2)" 'BEGIN { print u + s }'; }
row() { # LABEL TOLLGATE LIMITADOR
  awk -v l="$1" -v t="$(tot "$2")" -v li="$(tot "$3")" -v tr="$(rls_med "$2" 3)" -v lr="$(rls_med "$3" 3)" \
    'BEGIN { printf "| %s | %.1f | %.1f | **%.2f** | %.0f | %.0f |\n", l, t, li, t / li, tr, lr }'
}
cat <<EOF
## The rate limit service beside Kuadrant/limitador ($ROUNDS rounds, medians)

- $(date -u +'%F %T UTC'), $(nproc) CPUs, $("$TOLLGATE" --version), limitador-server $("$LIMITADOR" --version 2>/dev/null | head -1).
  h2load -t1 -c$CONNS -m$STREAMS, ${DURATION}s counted per case; CPU (user + system, /proc) of the
  server process; Redis's own CPU not counted.

| case | tollgate µs / call | limitador µs / call | ratio | tollgate calls/s | limitador calls/s |
|---|---:|---:|---:|---:|---:|
$(row "memory, 1 descriptor" tg_mem_one li_mem_one)
$(row "memory, 3 descriptors" tg_mem_three li_mem_three)
$(row "Redis, 1 descriptor" tg_r_one li_r_one)
$(row "Redis, 3 descriptors" tg_r_three li_r_three)

Over-admission, two processes on one Redis, $RACE calls of one key at once, limit $LIMIT:
tollgate admitted **$TG_RACE**, limitador admitted **$LI_RACE**.
EOF
