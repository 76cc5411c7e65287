#!/usr/bin/env bash
# CPU per request of a key read from the JSON body against the same key from a header,
# end to end: one tollgate worker in front of one upstream, POSTs of a ~1 KiB chat
# request, one tier keyed `json:/model` on one route and `header:x-model` on another (the
# same model in both), and the same body through a route with no tier. Read from
# /proc/PID/stat around each wrk run, alternating rounds. Markdown on stdout.
#
#   sudo bench/spend.sh
#   TOLLGATE_BIN=target/release/tollgate bench/spend.sh
#
# Env: ROUNDS (5), DURATION (5) seconds per target, CONNS (32), SIZE (1024) body bytes.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

ROUNDS=${ROUNDS:-5} DURATION=${DURATION:-5} CONNS=${CONNS:-32} SIZE=${SIZE:-1024}

need_tools nginx=nginx-light wrk=wrk
find_tollgate
make_workdir
mkdir -p "$WORK/res"
start_upstream

free_port TG_PORT
{
  one_worker_head "$TG_PORT"
  toml_policy by_header '"header:x-model"' 1000000000 1s 1000000000
  toml_policy by_json '"json:/model"' 1000000000 1s 1000000000
  toml_route header /v1/header up '["by_header"]'
  toml_route json /v1/json up '["by_json"]'
  toml_route plain /v1/plain up '[]'
} >"$WORK/tollgate.toml"
start_tollgate tollgate "$WORK/tollgate.toml" "$TG_PORT"
TG_PID=$LAST_PID

# The body: a chat request of SIZE bytes, the model first.
filler=$(head -c $((SIZE * 2)) /dev/zero | tr '\0' 'a')
body="{\"model\":\"gpt-4o-mini\",\"max_tokens\":256,\"messages\":[{\"role\":\"user\",\"content\":\"${filler:0:$((SIZE - 110))}\"}]}"
cat >"$WORK/post.lua" <<EOF
wrk.method = "POST"
wrk.body = '$body'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["x-model"] = "gpt-4o-mini"
EOF

TICK=$(getconf CLK_TCK)
measure() { # NAME PATH
  local u0 s0 u1 s1 n
  wrk -t1 -c"$CONNS" -d2s -s "$WORK/post.lua" "http://127.0.0.1:$TG_PORT$2" >/dev/null
  read -r u0 s0 < <(awk '{ print $14, $15 }' "/proc/$TG_PID/stat")
  n=$(wrk -t1 -c"$CONNS" -d"${DURATION}s" -s "$WORK/post.lua" "http://127.0.0.1:$TG_PORT$2" |
    awk '/ requests in / { print $1 }')
  read -r u1 s1 < <(awk '{ print $14, $15 }' "/proc/$TG_PID/stat")
  [[ ${n:-0} -gt 0 ]] || die "no requests answered on $2"
  awk -v n="$n" -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v t="$TICK" \
    'BEGIN { printf "%.2f %.2f\n", u / t / n * 1e6, s / t / n * 1e6 }' >>"$WORK/res/$1"
  log "$1: $(tail -1 "$WORK/res/$1") (user, system µs per request; $n requests)"
}
TARGETS=(json header plain)
for ((r = 0; r < ROUNDS; r++)); do
  log "round $((r + 1))/$ROUNDS"
  for ((i = 0; i < ${#TARGETS[@]}; i++)); do
    t=${TARGETS[(i + r) % ${#TARGETS[@]}]}
    measure "$t" "/v1/$t"
  done
done
med() { sort -n -k"$2" "$WORK/res/$1" | awk -v c="$2" '{ v[NR] = $c } END { print v[int((NR + 1) / 2)] }'; }
total() { awk -v u="$(med "$1" 1)" -v s="$(med "$1" 2)" 'BEGIN { print u + s }'; }
echo "| route ($SIZE-byte POST, wrk -t1 -c$CONNS, medians of $ROUNDS rounds) | user µs | system µs | total µs | / header key |"
echo "|---|---:|---:|---:|---:|"
for t in json header plain; do
  awk -v l="$t" -v u="$(med "$t" 1)" -v s="$(med "$t" 2)" -v h="$(total header)" \
    'BEGIN { printf "| %s | %.2f | %.2f | %.2f | %.3f |\n", l, u, s, u + s, (u + s) / h }'
done
