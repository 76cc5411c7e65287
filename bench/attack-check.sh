#!/usr/bin/env bash
# Hostile-client check: tollgate (header_read_timeout = "5s", one limited route) in front of
# `tollgate echo`, attacked on 127.0.0.1 by slowhttptest in slowloris mode (-H) and in slow-body
# mode (-B), while a probe measures one normal request per second; then a flood of connections
# that send no byte at all against a second gateway with a small max_connections; then h2load
# opens many HTTP/2 streams (h2c) at once. Prints a Markdown report on stdout, progress on stderr.
# See docs/security-checks.md.
#
#   sudo bench/attack-check.sh                       # builds tollgate with cargo build --release
#   TOLLGATE_BIN=path/to/tollgate DURATION=15 bench/attack-check.sh > attack.md
#
# Env: DURATION (30) seconds per slowhttptest attack; SLOW_RATE (100) new slowloris connections
# per second, for the whole DURATION (SLOW_RATE x DURATION in total); BODY_CONNS (500) slow-body
# connections, opened at SLOW_RATE per second and kept; SLOW_INTERVAL (2) seconds between
# follow-up bytes (below header_read_timeout, so only that timeout can end a slowloris
# connection); H2_CONNS (16), H2_STREAMS (100), H2_REQUESTS (100000), H2_THREADS (2) for h2load;
# IDLE_MAX (100) max_connections of the idle-flood gateway, IDLE_HOLD (20) seconds its
# IDLE_MAX + 20 silent connections are held; KEEP_TMP=1 keeps configs, logs and the raw tool output.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

DURATION=${DURATION:-30} SLOW_RATE=${SLOW_RATE:-100} BODY_CONNS=${BODY_CONNS:-500}
SLOW_INTERVAL=${SLOW_INTERVAL:-2}
H2_CONNS=${H2_CONNS:-16} H2_STREAMS=${H2_STREAMS:-100} H2_REQUESTS=${H2_REQUESTS:-100000}
H2_THREADS=${H2_THREADS:-2}
IDLE_MAX=${IDLE_MAX:-100} IDLE_HOLD=${IDLE_HOLD:-20}
PROBE_MAX=10       # seconds: curl -m for each probe
HEADER_TIMEOUT=5   # seconds: header_read_timeout in the config below

need_tools slowhttptest=slowhttptest h2load=nghttp2-client curl=curl
find_tollgate
make_workdir
mkdir -p "$WORK/res"

# ---- processes -------------------------------------------------------------------------
free_port ECHO_PORT; free_port TG_PORT; free_port ADMIN_PORT
spawn echo "$TOLLGATE" echo --listen "127.0.0.1:$ECHO_PORT"
wait_port "$ECHO_PORT" echo "$LAST_PID"

# One limited route. Attack traffic carries no x-tenant-id and shares one key ("shared");
# the probe and h2load have keys of their own, so the limiter never refuses them and what
# they measure is the gateway, not the policy. tenant "h2deny" measures the deny path.
cat >"$WORK/tollgate.toml" <<EOF
[server]
listen = "127.0.0.1:$TG_PORT"
admin_listen = "127.0.0.1:$ADMIN_PORT"
header_read_timeout = "${HEADER_TIMEOUT}s"
access_log = false
drain_timeout = "1s"

[upstreams.up]
targets = ["http://127.0.0.1:$ECHO_PORT"]

[policies.tenant]
key = "header:x-tenant-id"
limit = 100
period = "1s"
burst = 1000

[policies.tenant.overrides]
"h2load" = { limit = 10_000_000, burst = 10_000_000 }

[[routes]]
name = "api"
path = "/api"
upstream = "up"
policies = ["tenant"]
EOF
start_tollgate tollgate "$WORK/tollgate.toml" "$TG_PORT"
TG_PID=$LAST_PID
URL="http://127.0.0.1:$TG_PORT/api"

# ---- sanity ----------------------------------------------------------------------------
code=$(curl -s -o /dev/null -w '%{http_code}' -m 5 -H 'x-tenant-id: probe' "$URL") || true
[[ $code == 200 ]] || die "GET $URL: expected 200, got ${code:-no answer}"
curl -s -D - -o /dev/null -m 5 -H 'x-tenant-id: probe' "$URL" | grep -qi '^x-ratelimit-limit:' ||
  die "no X-RateLimit-Limit: is the route limited?"
code=$(curl -s -o /dev/null -w '%{http_code}' -m 5 --http2-prior-knowledge -H 'x-tenant-id: probe' "$URL") || true
[[ $code == 200 ]] || die "h2c GET $URL: expected 200, got ${code:-no answer}"

# ---- helpers ---------------------------------------------------------------------------
open_conns() {
  curl -s -m 2 "http://127.0.0.1:$ADMIN_PORT/metrics" 2>/dev/null |
    awk '$1 == "tollgate_open_connections" { printf "%d", $2 }' || true
}

# probe NAME SECONDS: one normal GET per second (each bounded by PROBE_MAX s) for SECONDS seconds;
# appends "unix-time http-code seconds open-connections" to $WORK/res/NAME.probe.
probe() {
  local out="$WORK/res/$1.probe" end=$((SECONDS + $2)) line
  while ((SECONDS < end)); do
    line=$(curl -s -o /dev/null -m "$PROBE_MAX" -w '%{http_code} %{time_total}' -H 'x-tenant-id: probe' "$URL" 2>/dev/null) || true
    echo "$(date +%s) ${line:-000 $PROBE_MAX} $(open_conns)" >>"$out"
    sleep 1
  done
}
start_probe() { probe "$@" & PIDS+=($!); PROBE_PID=$!; }

# probe_stats NAME: "n failures median_ms p90_ms max_ms peak_open_connections"
probe_stats() {
  awk '{ n++; if ($2 != 200) bad++; print $3 * 1000 > "/dev/stderr"; if ($4 > peak) peak = $4 }
       END { printf "%d %d %d", n, bad, peak }' "$WORK/res/$1.probe" 2>"$WORK/res/$1.ms" >"$WORK/res/$1.cnt"
  local pct
  pct=$(sort -g "$WORK/res/$1.ms" | awk '{ a[NR] = $1 }
        END { if (NR == 0) { print "n/a n/a n/a"; exit }
              printf "%.1f %.1f %.1f", a[int((NR + 1) / 2)], a[int(NR * 0.9 + 0.999)], a[NR] }')
  # shellcheck disable=SC2046,SC2086  # word splitting wanted
  set -- $(cat "$WORK/res/$1.cnt") $pct
  echo "$1 $2 $4 $5 $6 $3"
}

strip_ansi() { sed 's/\x1b\[[0-9;]*[A-Za-z]//g' "$@"; }

# slow NAME MODE-ARGS...: one slowhttptest run (bounded by DURATION + 60 s) with the probe
# running alongside; results in $WORK/res/NAME.{out,csv,probe}.
slow() {
  local name=$1; shift
  log "$name: slowhttptest $* for ${DURATION}s, probing $URL every second"
  start_probe "$name" $((DURATION + 2))
  timeout $((DURATION + 60)) slowhttptest "$@" -l "$DURATION" -i "$SLOW_INTERVAL" -p 3 \
    -g -o "$WORK/res/$name" -u "$URL" >"$WORK/res/$name.out" 2>&1 ||
    log "$name: slowhttptest exited with $? (its output: res/$name.out, kept with KEEP_TMP=1)"
  wait "$PROBE_PID" 2>/dev/null || true
  kill -0 "$TG_PID" 2>/dev/null || die "tollgate died during $name: $(tail -5 "$WORK/tollgate.log")"
  log "$name: $(slow_summary "$name")"
}

# slow_summary NAME: slowhttptest's own verdict, from its text output and CSV
slow_summary() {
  local txt="$WORK/res/$1.out" csv="$WORK/res/$1.csv" ended status avail peak down
  ended=$(strip_ansi "$txt" | grep -o 'Test ended on [0-9]*[a-z]* second' | tail -1 | sed 's/Test ended on //')
  status=$(strip_ansi "$txt" | sed -n 's/^Exit status: *//p' | tail -1)
  avail=$(strip_ansi "$txt" | sed -n 's/^service available: *//p' | tail -1)
  # CSV: Seconds,Closed,Pending,Connected,Service Available (0 = probe got no answer)
  peak=$(awk -F, 'NR > 1 && $4 > m { m = $4 } END { print m + 0 }' "$csv" 2>/dev/null || echo "?")
  down=$(awk -F, 'NR > 1 && $5 == 0 { d++ } END { print d + 0 }' "$csv" 2>/dev/null || echo "?")
  echo "ended ${ended:-?}; exit status: ${status:-?}; last 'service available': ${avail:-?};" \
    "peak connected: $peak; seconds unavailable: $down"
}

# ---- measurements ----------------------------------------------------------------------
log "baseline: 10 probes without attack"
probe baseline 10

slow slowloris -H -c $((SLOW_RATE * DURATION)) -r "$SLOW_RATE" -x 24
sleep $((HEADER_TIMEOUT + 2))   # let the last slowloris connections time out
slow slowbody -B -c "$BODY_CONNS" -r "$SLOW_RATE" -s 1048576 -x 24
log "slow-body connections open right after the attack: $(open_conns)"

# idle flood: connections that connect and then send no byte at all. docs/operations.md says no
# timeout covers them; a second gateway with max_connections = IDLE_MAX shows what that means.
free_port TG2_PORT; free_port ADMIN2_PORT
# shellcheck disable=SC2153  # ADMIN2_PORT is set by free_port
sed -e "s/127.0.0.1:$TG_PORT/127.0.0.1:$TG2_PORT/" -e "s/127.0.0.1:$ADMIN_PORT/127.0.0.1:$ADMIN2_PORT/" \
  -e "/^header_read_timeout/a max_connections = $IDLE_MAX" "$WORK/tollgate.toml" >"$WORK/idle.toml"
start_tollgate idlegw "$WORK/idle.toml" "$TG2_PORT"
IDLE_PID=$LAST_PID
IDLE_CONNS=$((IDLE_MAX + 20))
log "idle flood: $IDLE_CONNS connections that send nothing, against max_connections = $IDLE_MAX, for ${IDLE_HOLD}s"
# shellcheck disable=SC2016  # the inner script gets its values as arguments
spawn idleholder timeout "$IDLE_HOLD" bash -c '
  for _ in $(seq "$1"); do exec {fd}<>"/dev/tcp/127.0.0.1/$2" || exit 1; done
  echo "opened $1"; sleep "$3"' _ "$IDLE_CONNS" "$TG2_PORT" "$IDLE_HOLD"
HOLDER_PID=$LAST_PID
for _ in $(seq 100); do grep -q opened "$WORK/idleholder.log" 2>/dev/null && break; sleep 0.1; done
grep -q opened "$WORK/idleholder.log" || die "could not open $IDLE_CONNS idle connections: $(cat "$WORK/idleholder.log")"
sleep 1   # let the gateway's workers accept what they will (SO_REUSEPORT: one accept queue each)
URL_SAVE=$URL ADMIN_SAVE=$ADMIN_PORT
URL="http://127.0.0.1:$TG2_PORT/api" ADMIN_PORT=$ADMIN2_PORT PROBE_MAX=3
probe idleflood $((IDLE_HOLD - 5))
idle_open_end=$(open_conns)
wait "$HOLDER_PID" 2>/dev/null || true
sleep 1
idle_after=$(curl -s -o /dev/null -m 5 -w '%{http_code}' -H 'x-tenant-id: probe' "$URL") || true
URL=$URL_SAVE ADMIN_PORT=$ADMIN_SAVE PROBE_MAX=10
kill -0 "$IDLE_PID" 2>/dev/null || die "the idle-flood gateway died: $(tail -5 "$WORK/idlegw.log")"
log "idle flood: tollgate_open_connections $idle_open_end after $((IDLE_HOLD - 5))s; after the idle clients left: ${idle_after:-no answer}"

# h2load: many concurrent streams over h2c
run_h2() { # NAME TENANT REQUESTS
  local out="$WORK/res/$1.out"
  log "$1: h2load -t$H2_THREADS -c$H2_CONNS -m$H2_STREAMS -n$3, x-tenant-id: $2"
  timeout 300 h2load -t"$H2_THREADS" -c"$H2_CONNS" -m"$H2_STREAMS" -n"$3" \
    -H "x-tenant-id: $2" "$URL" >"$out" 2>&1 || log "$1: h2load exited with $?"
  # "req/s total succeeded failed errored timeout 2xx 4xx 5xx"
  awk '/^finished in/ { rps = $4 }
       /^requests:/ { total = $2; ok = $8; failed = $10; errored = $12; tmo = $14 }
       /^status codes:/ { s2 = $3; s4 = $7; s5 = $9 }
       END { printf "%.0f %d %d %d %d %d %d %d %d\n", rps, total, ok, failed, errored, tmo, s2, s4, s5 }' \
    "$out" >"$WORK/res/$1"
  log "$1: $(cat "$WORK/res/$1")  (req/s total succeeded failed errored timeout 2xx 4xx 5xx)"
  kill -0 "$TG_PID" 2>/dev/null || die "tollgate died during $1: $(tail -5 "$WORK/tollgate.log")"
}
run_h2 h2-allowed h2load "$H2_REQUESTS"
run_h2 h2-deny h2deny $((H2_REQUESTS / 5))

upstream_warn=$(grep -c 'upstream failed' "$WORK/tollgate.log" || true)
upstream_tmo=$(grep -c 'upstream failed.*no response from .* within' "$WORK/tollgate.log" || true)
upstream_abort=$(grep -c 'upstream failed.*client error (SendRequest)' "$WORK/tollgate.log" || true)
code=$(curl -s -o /dev/null -w '%{http_code}' -m 5 -H 'x-tenant-id: probe' "$URL") || true
panics=$(grep -ci 'panic' "$WORK/tollgate.log" || true)
rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$TG_PID/status" 2>/dev/null || echo "?")

# ---- report ----------------------------------------------------------------------------
row() { # NAME LABEL
  local s; s=$(probe_stats "$1")
  # shellcheck disable=SC2086  # word splitting wanted
  set -- "$2" $s
  echo "| $1 | $2 | $3 | $4 | $5 | $6 | $7 |"
}
cat <<EOF
# tollgate attack check

- $(date -u +'%F %T UTC'), $(nproc) CPUs, $(uname -sr), $("$TOLLGATE" --version),
  $(slowhttptest -h 2>&1 | grep -o 'version [0-9.]*' | head -1 | sed 's/^/slowhttptest /'), $(h2load --version | head -1)
- tollgate: header_read_timeout = "${HEADER_TIMEOUT}s", max_connections 10000 (default), one route \`/api\`
  with a \`tenant\` tier (header:x-tenant-id, 100/s, burst 1000), upstream \`tollgate echo\`.
  Attack traffic has no x-tenant-id (one shared key); the probe uses its own key.
- Probe: \`curl -m 10 -H 'x-tenant-id: probe' $URL\`, one per second during each attack.
  Load generators, gateway and upstream share the same $(nproc) cores.

## Normal request during slow-client attacks

| phase | probes | failed (non-200 or no answer) | median ms | p90 ms | max ms | peak tollgate_open_connections |
|---|---:|---:|---:|---:|---:|---:|
EOF
row baseline "no attack"
row slowloris "slowloris (-H): $SLOW_RATE new conn/s for ${DURATION}s, follow-up every ${SLOW_INTERVAL}s"
row slowbody "slow body (-B): $BODY_CONNS conns, Content-Length 1 MiB, follow-up every ${SLOW_INTERVAL}s"
row idleflood "idle flood: $IDLE_CONNS silent conns vs max_connections $IDLE_MAX (probe -m 3)"
cat <<EOF

## slowhttptest's own verdict

| attack | result |
|---|---|
| slowloris (-H) | $(slow_summary slowloris) |
| slow body (-B) | $(slow_summary slowbody) |

tollgate's log over all runs: ${upstream_warn:-0} \`upstream failed\` warnings: ${upstream_tmo:-0} for the upstream's
\`timeout\` (30 s; \`tollgate echo\` answers after the whole body, so a slow body keeps it waiting) and
${upstream_abort:-0} \`client error (SendRequest)\` (the slow client went away mid-body when slowhttptest stopped).

Idle flood (second gateway, same config with max_connections = $IDLE_MAX): $IDLE_CONNS connections that
connect and send no byte, held ${IDLE_HOLD}s. tollgate_open_connections after $((IDLE_HOLD - 5))s: ${idle_open_end:-?}
(header_read_timeout is ${HEADER_TIMEOUT}s); normal request once the idle clients had gone: ${idle_after:-no answer}.

## HTTP/2 (h2c) with many streams: h2load -t$H2_THREADS -c$H2_CONNS -m$H2_STREAMS

| run | req/s | requests | succeeded | failed | errored | timeout | 2xx | 4xx | 5xx |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|
EOF
for r in h2-allowed h2-deny; do
  label="allowed (own key, override 10M/s)"; [[ $r == h2-deny ]] && label="deny path (key limited to 100/s, burst 1000)"
  read -r rps total ok failed errored tmo s2 s4 s5 <"$WORK/res/$r"
  echo "| $label | $rps | $total | $ok | $failed | $errored | $tmo | $s2 | $s4 | $s5 |"
done
cat <<EOF

After all runs: tollgate running, normal request → ${code:-no answer}, RSS $rss kB, $panics log line(s) mentioning a panic.
EOF
