#!/usr/bin/env bash
# What metering bytes as they stream costs: 1 MiB downloads through tollgate (one worker,
# memory store) on a route whose tier settles on `response_bytes` — every chunk drawn from
# the key before it passes — beside the same downloads on a route without limits, in front
# of one nginx serving the file. Alternating rounds; req/s and tollgate's CPU per download
# (user + system, /proc/PID/stat), and the ratio metered / plain. Markdown on stdout.
#
#   sudo bench/bytes.sh
#   TOLLGATE_BIN=target/release/tollgate bench/bytes.sh
#
# Env: ROUNDS (3), DURATION (8) seconds per target and round, CONNS (8), SIZE (1048576).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

ROUNDS=${ROUNDS:-3} DURATION=${DURATION:-8} CONNS=${CONNS:-8} SIZE=${SIZE:-1048576}

need_tools nginx=nginx-light wrk=wrk
find_tollgate
make_workdir
mkdir -p "$WORK/res" "$WORK/www"
head -c "$SIZE" /dev/zero >"$WORK/www/file"

free_port UPSTREAM_PORT
{ nginx_head upstream 1
  echo "http {"; nginx_http_common
  echo "    server { listen 127.0.0.1:$UPSTREAM_PORT; root $WORK/www; }"
  echo "}"; } >"$WORK/upstream.conf"
spawn upstream nginx -p "$WORK/" -c "$WORK/upstream.conf"
wait_port "$UPSTREAM_PORT" upstream "$LAST_PID"

free_port TG_PORT
# Budgets in KiB, 512 KiB at once (so a download draws 64 KiB at a time: 16 draws per MiB),
# refilling far faster than the test moves; 1,000 tenants, one picked per download.
cat >"$WORK/tollgate.toml" <<EOF
[server]
listen = "127.0.0.1:$TG_PORT"
access_log = false
drain_timeout = "1s"
workers = 1

[upstreams.up]
targets = ["http://127.0.0.1:$UPSTREAM_PORT"]

[policies.bytes]
key = "header:x-tenant-id"
limit = 1000000000
period = "1s"
burst = 512
settle = "response_bytes"
settle_unit = 1024
max_delay = "1s"

[[routes]]
name = "metered"
path = "/metered/"
upstream = "up"
policies = ["bytes"]

[[routes]]
name = "plain"
path = "/"
upstream = "up"
policies = []
EOF
# nginx serves /file; tollgate's /metered/file reaches it as /metered/file: give nginx both.
mkdir -p "$WORK/www/metered" && ln "$WORK/www/file" "$WORK/www/metered/file"
start_tollgate tollgate "$WORK/tollgate.toml" "$TG_PORT"
TG_PID=$LAST_PID
TICK=$(getconf CLK_TCK)

# measure NAME URL: appends "req/s cpu_us_per_request" to res/NAME.
measure() {
  local name=$1 url=$2 u0 s0 u1 s1 out n rps
  TENANTS=1000 USERS=1 timeout 60 wrk -t1 -c"$CONNS" -d2s -s "$BENCH_DIR/keys.lua" "$url" >/dev/null
  read -r u0 s0 < <(awk '{ print $14, $15 }' "/proc/$TG_PID/stat")
  out=$(TENANTS=1000 USERS=1 timeout $((DURATION + 60)) wrk -t1 -c"$CONNS" -d"${DURATION}s" -s "$BENCH_DIR/keys.lua" "$url")
  read -r u1 s1 < <(awk '{ print $14, $15 }' "/proc/$TG_PID/stat")
  n=$(awk '/ requests in / { print $1 }' <<<"$out")
  rps=$(awk '/^Requests\/sec/ { print $2 }' <<<"$out")
  [[ ${n:-0} -gt 0 ]] || die "no downloads through $name"
  awk -v n="$n" -v r="$rps" -v c=$((u1 - u0 + s1 - s0)) -v t="$TICK" \
    'BEGIN { printf "%.1f %.1f\n", r, c / t / n * 1e6 }' >>"$WORK/res/$name"
  log "$name: $(tail -1 "$WORK/res/$name") (req/s, CPU µs per download)"
}

for ((r = 0; r < ROUNDS; r++)); do
  log "round $((r + 1))/$ROUNDS"
  if ((r % 2 == 0)); then
    measure plain "http://127.0.0.1:$TG_PORT/file"
    measure metered "http://127.0.0.1:$TG_PORT/metered/file"
  else
    measure metered "http://127.0.0.1:$TG_PORT/metered/file"
    measure plain "http://127.0.0.1:$TG_PORT/file"
  fi
done

med() { sort -n -k"$2" "$WORK/res/$1" | awk -v c="$2" '{ v[NR] = $c } END { print v[int((NR + 1) / 2)] }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
cat <<EOF
## Bytes metered as they stream ($((SIZE / 1024)) KiB downloads, one worker, wrk -t1 -c$CONNS, ${DURATION}s, $ROUNDS rounds, medians)

- $(date -u +'%F %T UTC'), $(nproc) CPUs, $("$TOLLGATE" --version)

| route | downloads / s | tollgate CPU µs / download |
|---|---:|---:|
| plain (no limits) | $(med plain 1) | $(med plain 2) |
| metered (\`response_bytes\`) | $(med metered 1) | $(med metered 2) |
| metered / plain | $(ratio "$(med metered 1)" "$(med plain 1)") | $(ratio "$(med metered 2)" "$(med plain 2)") |
EOF
