#!/usr/bin/env bash
# Instructions per request, counted by valgrind's callgrind: tollgate with 3 tiers, with 0
# tiers and refusing, beside the bare-hyper floor forwarding and refusing, each with one
# worker in front of the same upstream. Instruction counts do not depend on what else the
# machine is doing, so a change to the request path can be judged on a busy 2-core box
# where req/s move by 20 %; bench/proxy.sh then tells what they are worth in req/s.
# Markdown report on stdout, progress on stderr.
#
#   sudo bench/instructions.sh
#   TOLLGATE_BIN=target/release/tollgate FLOOR_BIN=target/release/examples/floor bench/instructions.sh
#
# Env: DURATION (8) seconds of counted load per target, CONNS (4), ROUTES (10000: extra
# routes of the many-routes row), KEEP_TMP=1 (keeps the
# callgrind.out files: `callgrind_annotate --inclusive=yes FILE` shows where they go).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

DURATION=${DURATION:-8} CONNS=${CONNS:-4}

need_tools nginx=nginx-light wrk=wrk valgrind=valgrind callgrind_control=valgrind
find_tollgate
find_floor
make_workdir
start_upstream

free_port TG_PORT; free_port FLOOR_PORT
one_worker_toml "$TG_PORT" >"$WORK/tollgate.toml"
"$TOLLGATE" check --config "$WORK/tollgate.toml" >/dev/null || die "tollgate check rejected its config"
# The same without the top-keys sketches: what they cost a request.
sed 's/^workers = 1$/workers = 1\ntop_keys = false/' "$WORK/tollgate.toml" >"$WORK/tollgate-notop.toml"
grep -q '^top_keys = false' "$WORK/tollgate-notop.toml" || die "could not turn top_keys off"
# The same with telemetry on: sampling nothing (ratio 0: what every unsampled request
# pays) and everything (ratio 1: a span pair built and queued per request), exporting to
# a port nothing listens on (the export fails on its own task and is counted).
free_port DEAD_PORT
for ratio in 0 1; do
  { cat "$WORK/tollgate.toml"
    # No bound on sampled requests: ratio 1 is to sample every request counted.
    printf '[telemetry]\notlp_endpoint = "http://127.0.0.1:%s"\nsample_ratio = %s.0\nmax_sampled_per_second = 1000000000\n' "$DEAD_PORT" "$ratio"
  } >"$WORK/tollgate-tel$ratio.toml"
  "$TOLLGATE" check --config "$WORK/tollgate-tel$ratio.toml" >/dev/null || die "tollgate check rejected the telemetry config"
done
# The same with 10,000 more routes sharing the /v1/ prefix: what the number of routes costs.
ROUTES=${ROUTES:-10000}
{
  cat "$WORK/tollgate.toml"
  awk -v n="$ROUTES" 'BEGIN { for (i = 0; i < n; i++)
    printf "[[routes]]\nname = \"svc%d\"\npath = \"/v1/svc-%d/\"\nupstream = \"up\"\npolicies = [\"tenant\"]\n\n", i, i }'
} >"$WORK/tollgate-routes.toml"
"$TOLLGATE" check --config "$WORK/tollgate-routes.toml" >/dev/null || die "tollgate check rejected the many-routes config"

# count NAME PORT PATH [wrk args] -- COMMAND...: Ir per request of COMMAND under callgrind,
# counted over DURATION seconds of wrk after a warm-up that is not counted.
count() {
  local name=$1 port=$2 path=$3 wargs=() out pid n ir
  shift 3
  while [[ $1 != -- ]]; do wargs+=("$1"); shift; done
  shift
  out="$WORK/callgrind.out.$name"
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" "$@" \
    >"$WORK/$name.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  for _ in $(seq 300); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || die "$name exited at start-up: $(tail -5 "$WORK/$name.log")"
    sleep 0.2
  done
  url="http://127.0.0.1:$port$path"
  timeout 60 wrk -t1 -c"$CONNS" -d3s "${wargs[@]}" "$url" >/dev/null   # warm-up, not counted
  callgrind_control -i on "$pid" >/dev/null 2>&1
  timeout 60 wrk -t1 -c"$CONNS" -d2s "${wargs[@]}" "$url" >/dev/null   # warm-up, instrumented
  callgrind_control -z "$pid" >/dev/null 2>&1
  n=$(timeout $((DURATION + 60)) wrk -t1 -c"$CONNS" -d"${DURATION}s" "${wargs[@]}" "$url" |
    awk '/ requests in / { print $1 }')
  callgrind_control -d "$pid" >/dev/null 2>&1
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  ir=$(callgrind_annotate "$out".1 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
  [[ -n $ir && ${n:-0} -gt 0 ]] || die "no count for $name"
  echo "$name $n $ir" >>"$WORK/counts"
  log "$name: $((ir / n)) instructions per request ($n requests)"
}

: >"$WORK/counts"
H=(-H 'x-tenant-id: t1' -H 'x-user-id: u1')
count tg3 "$TG_PORT" /v1/search -s "$BENCH_DIR/keys.lua" -- "$TOLLGATE" run --config "$WORK/tollgate.toml"
count tg0 "$TG_PORT" /v1/open "${H[@]}" -- "$TOLLGATE" run --config "$WORK/tollgate.toml"
count tgdeny "$TG_PORT" /deny -H 'x-tenant-id: hot' -- "$TOLLGATE" run --config "$WORK/tollgate.toml"
count tg3off "$TG_PORT" /v1/search -s "$BENCH_DIR/keys.lua" -- "$TOLLGATE" run --config "$WORK/tollgate-notop.toml"
count tgdenyoff "$TG_PORT" /deny -H 'x-tenant-id: hot' -- "$TOLLGATE" run --config "$WORK/tollgate-notop.toml"
count tg3tel0 "$TG_PORT" /v1/search -s "$BENCH_DIR/keys.lua" -- "$TOLLGATE" run --config "$WORK/tollgate-tel0.toml"
count tg3tel1 "$TG_PORT" /v1/search -s "$BENCH_DIR/keys.lua" -- "$TOLLGATE" run --config "$WORK/tollgate-tel1.toml"
count tg3routes "$TG_PORT" /v1/search -s "$BENCH_DIR/keys.lua" -- "$TOLLGATE" run --config "$WORK/tollgate-routes.toml"
count floor "$FLOOR_PORT" /v1/search "${H[@]}" -- "$FLOOR" forward --listen "127.0.0.1:$FLOOR_PORT" \
  --upstream "127.0.0.1:$UPSTREAM_PORT" --workers 1
count floordeny "$FLOOR_PORT" /deny -H 'x-tenant-id: hot' -- "$FLOOR" deny --listen "127.0.0.1:$FLOOR_PORT" --workers 1

per() { awk -v t="$1" '$1 == t { printf "%.0f", $3 / $2 }' "$WORK/counts"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
cat <<EOF
## Instructions per request (callgrind, one worker, wrk -t1 -c$CONNS, ${DURATION}s counted)

- $(date -u +'%F %T UTC'), $(valgrind --version), $("$TOLLGATE" --version); user-space instructions
  of the proxy process only (the kernel's work on the sockets is the same for all).

| target | instructions / request | / floor |
|---|---:|---:|
| floor: bare hyper, dedicated upstream connection | $(per floor) | 1.00 |
| tollgate, 0 tiers | $(per tg0) | $(ratio "$(per tg0)" "$(per floor)") |
| tollgate, 3 tiers (100 tenants x 10,000 users) | $(per tg3) | $(ratio "$(per tg3)" "$(per floor)") |
| floor: static 429 | $(per floordeny) | 1.00 |
| tollgate, refusing (one tier) | $(per tgdeny) | $(ratio "$(per tgdeny)" "$(per floordeny)") |

| top keys (\`[server] top_keys\`) | 3 tiers | refusing |
|---|---:|---:|
| off | $(per tg3off) | $(per tgdenyoff) |
| on (the default) | $(per tg3) | $(per tgdeny) |
| on / off | $(ratio "$(per tg3)" "$(per tg3off)") | $(ratio "$(per tgdeny)" "$(per tgdenyoff)") |

| telemetry (\`[telemetry]\`) | 3 tiers, instructions / request | / off |
|---|---:|---:|
| off | $(per tg3) | 1.000 |
| on, ratio 0 (unsampled) | $(per tg3tel0) | $(awk -v a="$(per tg3tel0)" -v b="$(per tg3)" 'BEGIN { printf "%.3f", a / b }') |
| on, ratio 1 (every request sampled) | $(per tg3tel1) | $(awk -v a="$(per tg3tel1)" -v b="$(per tg3)" 'BEGIN { printf "%.3f", a / b }') |

| routes in the config | 3 tiers, instructions / request |
|---:|---:|
| 4 | $(per tg3) |
| $((ROUTES + 4)) (all under \`/v1/\`) | $(per tg3routes) |
| ratio | $(ratio "$(per tg3routes)" "$(per tg3)") |
EOF
