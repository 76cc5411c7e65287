#!/usr/bin/env bash
# Hostile-client check, in two parts. Prints a Markdown report on stdout, progress on stderr.
# See docs/security-checks.md.
#
# Part 1: tollgate (header_read_timeout = "5s", one limited route) in front of `tollgate echo`,
# attacked on 127.0.0.1 by slowhttptest in slowloris mode (-H) and in slow-body mode (-B), while
# a probe measures one normal request per second; then a flood of connections that send no byte
# at all against a second gateway with a small max_connections; then h2load opens many HTTP/2
# streams (h2c) at once.
#
# Part 2, resource exhaustion at scale: each attack against a fresh gateway whose send_timeout,
# idle_timeout, tunnel_idle_timeout and header_read_timeout are R2_TIMEOUT seconds, while a
# sampler records, once a second, the gateway's RSS (VmRSS), its open descriptors
# (/proc/PID/fd), tollgate_open_connections, its connections to the upstream, the kernel's TCP
# buffer memory (whole machine) and the latency of /healthz on the admin port. The upstream is bench/attack/upstream.py (BIG_MIB MiB on /big, a
# WebSocket on /ws that answers 101 and then stays silent) or `tollgate echo`. The attacks:
#   slow readers      SLOW_READERS HTTP/1.1 connections ask for /big and never read
#   zero window       ZW_CONNS h2c connections x ZW_STREAMS streams to /big, initial window 0,
#                     never a WINDOW_UPDATE
#   idle HTTP/2       IDLE_H2 connections that finish the preface and SETTINGS, ping and answer
#                     pings but open no stream; HALF_PREFACE that send half the preface
#   idle tunnels      TUNNELS WebSocket upgrades, then silence, against max_connections = TUNNEL_MAX
#   fresh-key flood   [store] max_keys = FLOOD_MAX_KEYS; one client owes an hour on a strict
#                     policy, then FLOOD_KEYS requests (wrk) each with a key never seen before
#   Redis refusals    (when redis-server is installed) REDIS_FLOOD requests (h2load) for a key
#                     already refused, backend redis with on_error = "deny", while HONEST other
#                     clients send one request each
# The clients are the Python scripts in bench/attack/ (the `h2` package for HTTP/2).
#
#   sudo bench/attack-check.sh                       # builds tollgate with cargo build --release
#   TOLLGATE_BIN=path/to/tollgate DURATION=15 bench/attack-check.sh > attack.md
#   TOLLGATE_BIN=target/release/tollgate PARTS=2 bench/attack-check.sh > exhaustion.md
#
# Env: PARTS ("1 2") the parts to run.
# Part 1: DURATION (30) seconds per slowhttptest attack; SLOW_RATE (100) new slowloris
# connections per second, for the whole DURATION (SLOW_RATE x DURATION in total); BODY_CONNS
# (500) slow-body connections, opened at SLOW_RATE per second and kept; SLOW_INTERVAL (2) seconds
# between follow-up bytes (below header_read_timeout, so only that timeout can end a slowloris
# connection); H2_CONNS (16), H2_STREAMS (100), H2_REQUESTS (100000), H2_THREADS (2) for h2load;
# IDLE_MAX (100) max_connections of the idle-flood gateway, IDLE_HOLD (20) seconds its
# IDLE_MAX + 20 silent connections are held.
# Part 2: R2_TIMEOUT (5) seconds, the gateways' timeouts above; R2_WAIT (60) seconds an attack
# waits at most for the gateway to close everything; BIG_MIB (8); SLOW_READERS (200);
# ZW_CONNS (20), ZW_STREAMS (100); IDLE_H2 (500), HALF_PREFACE (500); TUNNELS (300), TUNNEL_MAX
# (200); FLOOD_KEYS (200000), FLOOD_MAX_KEYS (20000); REDIS_FLOOD (50000), HONEST (30), REDIS (1;
# 0 skips the Redis attack).
# KEEP_TMP=1 keeps configs, logs and the raw tool output.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

DURATION=${DURATION:-30} SLOW_RATE=${SLOW_RATE:-100} BODY_CONNS=${BODY_CONNS:-500}
SLOW_INTERVAL=${SLOW_INTERVAL:-2}
H2_CONNS=${H2_CONNS:-16} H2_STREAMS=${H2_STREAMS:-100} H2_REQUESTS=${H2_REQUESTS:-100000}
H2_THREADS=${H2_THREADS:-2}
IDLE_MAX=${IDLE_MAX:-100} IDLE_HOLD=${IDLE_HOLD:-20}
PARTS=${PARTS:-1 2}
R2_TIMEOUT=${R2_TIMEOUT:-5} R2_WAIT=${R2_WAIT:-60} BIG_MIB=${BIG_MIB:-8}
SLOW_READERS=${SLOW_READERS:-200} ZW_CONNS=${ZW_CONNS:-20} ZW_STREAMS=${ZW_STREAMS:-100}
IDLE_H2=${IDLE_H2:-500} HALF_PREFACE=${HALF_PREFACE:-500}
TUNNELS=${TUNNELS:-300} TUNNEL_MAX=${TUNNEL_MAX:-200}
FLOOD_KEYS=${FLOOD_KEYS:-200000} FLOOD_MAX_KEYS=${FLOOD_MAX_KEYS:-20000}
REDIS_FLOOD=${REDIS_FLOOD:-50000} HONEST=${HONEST:-30} REDIS=${REDIS:-1}
PROBE_MAX=10       # seconds: curl -m for each probe
HEADER_TIMEOUT=5   # seconds: header_read_timeout in the config below

part() { [[ " $PARTS " == *" $1 "* ]]; }
need_tools h2load=nghttp2-client curl=curl
if part 1; then need_tools slowhttptest=slowhttptest; fi
if part 2; then
  need_tools python3=python3 wrk=wrk ss=iproute2
  # The interpreter itself, not a wrapper script: the cleanup signals it directly.
  PY=$(python3 -c 'import sys; print(sys.executable)')
  if ! "$PY" -c 'import h2' 2>/dev/null; then
    [[ $EUID -eq 0 ]] || die "python3 lacks the h2 package: run as root to install it, or pip install h2"
    log "installing the h2 package (pip)"
    "$PY" -m pip install -q h2 >&2 || die "cannot install the h2 package"
  fi
fi
find_tollgate
make_workdir
mkdir -p "$WORK/res"

# ---- processes -------------------------------------------------------------------------
free_port ECHO_PORT; free_port TG_PORT; free_port ADMIN_PORT
spawn echo "$TOLLGATE" echo --listen "127.0.0.1:$ECHO_PORT"
wait_port "$ECHO_PORT" echo "$LAST_PID"

if part 1; then
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

  # ---- sanity --------------------------------------------------------------------------
  code=$(curl -s -o /dev/null -w '%{http_code}' -m 5 -H 'x-tenant-id: probe' "$URL") || true
  [[ $code == 200 ]] || die "GET $URL: expected 200, got ${code:-no answer}"
  curl -s -D - -o /dev/null -m 5 -H 'x-tenant-id: probe' "$URL" | grep -qi '^x-ratelimit-limit:' ||
    die "no X-RateLimit-Limit: is the route limited?"
  code=$(curl -s -o /dev/null -w '%{http_code}' -m 5 --http2-prior-knowledge -H 'x-tenant-id: probe' "$URL") || true
  [[ $code == 200 ]] || die "h2c GET $URL: expected 200, got ${code:-no answer}"
fi

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

if part 1; then
  # ---- measurements --------------------------------------------------------------------
  log "baseline: 10 probes without attack"
  probe baseline 10

  slow slowloris -H -c $((SLOW_RATE * DURATION)) -r "$SLOW_RATE" -x 24
  sleep $((HEADER_TIMEOUT + 2))   # let the last slowloris connections time out
  slow slowbody -B -c "$BODY_CONNS" -r "$SLOW_RATE" -s 1048576 -x 24
  log "slow-body connections open right after the attack: $(open_conns)"

  # idle flood: connections that connect and then send no byte at all; header_read_timeout
  # cuts them (docs/tuning.md, hostile traffic). A second gateway with max_connections = IDLE_MAX
  # shows that the cap holds meanwhile.
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
fi

# ---- part 2: resource exhaustion -------------------------------------------------------
# Each attack gets a fresh gateway (GW_*) with the round-two timeouts. A sampler records the
# gateway's state once a second; `settle` waits for its connections and descriptors to return
# to the baseline taken just before the attack.
ATTACK_DIR=$BENCH_DIR/attack

now_ms() { local t=${EPOCHREALTIME//[.,]/}; echo $((t / 1000)); }
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || true; }
fd_count() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }
# established TCP connections whose server side is 127.0.0.1:PORT (the gateway's to its upstream)
conns_to() { ss -Htn state established "( sport = :$1 )" 2>/dev/null | wc -l; }
# metric ADMIN NAME: the value of the sample printed as NAME, labels included; empty if none
metric() {
  curl -s -m 2 "http://127.0.0.1:$1/metrics" 2>/dev/null |
    awk -v m="$2" '$1 == m { v = $2 } END { if (v != "") printf "%d", v }' || true
}
# kv FILE KEY: KEY's value in the last key=value result line a bench/attack client printed
kv() {
  grep -E '^[a-z_0-9]+=' "$1" 2>/dev/null | tail -1 |
    awk -v k="$2" '{ for (i = 1; i <= NF; i++) if (index($i, k "=") == 1) print substr($i, length(k) + 2) }'
}
# forget PID: drop it from the processes the cleanup signals (it has been reaped)
forget() {
  local keep=() p
  for p in "${PIDS[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
  PIDS=("${keep[@]}")
}
# stop_proc PID: SIGTERM, up to 5 s, then SIGKILL
stop_proc() {
  kill -TERM "$1" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  forget "$1"
}

# r2_gateway NAME UPSTREAM-URL SERVER-LINES REST: starts a gateway with the round-two timeouts;
# sets GW_PID, GW_PORT, GW_ADMIN. REST: [store], policies and routes.
r2_gateway() {
  free_port GW_PORT; free_port GW_ADMIN
  # shellcheck disable=SC2153  # GW_ADMIN is set by free_port
  cat >"$WORK/$1.toml" <<EOF
[server]
listen = "127.0.0.1:$GW_PORT"
admin_listen = "127.0.0.1:$GW_ADMIN"
header_read_timeout = "${R2_TIMEOUT}s"
send_timeout = "${R2_TIMEOUT}s"
idle_timeout = "${R2_TIMEOUT}s"
tunnel_idle_timeout = "${R2_TIMEOUT}s"
access_log = false
drain_timeout = "1s"
$3

[upstreams.up]
targets = ["$2"]

$4
EOF
  start_tollgate "$1" "$WORK/$1.toml" "$GW_PORT"
  GW_PID=$LAST_PID
  wait_port "$GW_ADMIN" "$1" "$GW_PID"
}
OPEN_ROUTE='[[routes]]
name = "open"
path = "/"
upstream = "up"'

# kernel memory in TCP socket buffers, whole machine (clients' included), in kB
tcp_mem_kb() { awk '$1 == "TCP:" { for (i = 2; i < NF; i++) if ($i == "mem") print $(i + 1) * 4 }' /proc/net/sockstat; }
# sampler NAME [METRIC]: once a second until $WORK/res/NAME.stop exists (300 s at most), appends
# "unix-ms rss-kB descriptors open-connections upstream-conns healthz-code healthz-s
# tcp-mem-kB METRIC" to NAME.samples
sampler() {
  local out="$WORK/res/$1.samples" end=$((SECONDS + 300)) hz rss fds open up x
  while ((SECONDS < end)) && [[ ! -e $WORK/res/$1.stop ]]; do
    hz=$(curl -s -o /dev/null -m 5 -w '%{http_code} %{time_total}' "http://127.0.0.1:$GW_ADMIN/healthz" 2>/dev/null) || true
    rss=$(rss_kb "$GW_PID"); fds=$(fd_count "$GW_PID"); up=$(conns_to "$UP_PORT")
    open=$(metric "$GW_ADMIN" tollgate_open_connections)
    x=; [[ -n ${2:-} ]] && x=$(metric "$GW_ADMIN" "$2")
    echo "$(now_ms) ${rss:-0} $fds ${open:--1} $up ${hz:-000 5} $(tcp_mem_kb) ${x:--1}" >>"$out"
    sleep 1
  done
}
# state: "rss-kB descriptors open-connections upstream-conns tcp-mem-kB" of the gateway now
state() {
  local open; open=$(metric "$GW_ADMIN" tollgate_open_connections)
  echo "$(rss_kb "$GW_PID") $(fd_count "$GW_PID") ${open:--1} $(conns_to "$UP_PORT") $(tcp_mem_kb)"
}
# begin NAME [METRIC]: starts the sampler, takes the baseline, marks the attack's start
begin() {
  sampler "$@" &
  PIDS+=($!); SAMPLER_PID=$!
  sleep 2
  state >"$WORK/res/$1.base"
  now_ms >"$WORK/res/$1.t0"
}
# settle NAME: polls twice a second (R2_WAIT s at most from the start) until open connections
# and descriptors, once risen above the baseline, are back at it; writes the seconds each
# took to NAME.back ("no": not back in time; "none": never rose above it while the client ran).
settle() {
  local t0 b_fds b_open o f now rose_o=0 rose_f=0 back_o=no back_f=no done=0
  read -r _ b_fds b_open _ <"$WORK/res/$1.base"
  t0=$(<"$WORK/res/$1.t0")
  while :; do
    now=$(now_ms)
    ((now - t0 <= R2_WAIT * 1000)) || break
    kill -0 "$CLIENT_PID" 2>/dev/null || done=1
    o=$(metric "$GW_ADMIN" tollgate_open_connections); o=${o:-0}
    f=$(fd_count "$GW_PID")
    if [[ $back_o == no ]]; then
      ((o > b_open)) && rose_o=1
      ((rose_o && o <= b_open)) && back_o=$(awk -v ms=$((now - t0)) 'BEGIN { printf "%.1f", ms / 1000 }')
      ((!rose_o && done)) && back_o=none
    fi
    if [[ $back_f == no ]]; then
      ((f > b_fds)) && rose_f=1
      ((rose_f && f <= b_fds)) && back_f=$(awk -v ms=$((now - t0)) 'BEGIN { printf "%.1f", ms / 1000 }')
      ((!rose_f && done)) && back_f=none
    fi
    [[ $back_o != no && $back_f != no ]] && break
    kill -0 "$GW_PID" 2>/dev/null || break
    sleep 0.5
  done
  echo "$back_o $back_f" >"$WORK/res/$1.back"
}
# finish NAME: the gateway's state 2 s after the attack; stops the sampler and the gateway
finish() {
  sleep 2
  if kill -0 "$GW_PID" 2>/dev/null; then
    state >"$WORK/res/$1.after"
  else
    log "$1: tollgate DIED: $(tail -3 "$WORK/$1.log")"
    echo "died" >"$WORK/res/$1.after"
  fi
  touch "$WORK/res/$1.stop"
  wait "$SAMPLER_PID" 2>/dev/null || true
  forget "$SAMPLER_PID"
  stop_proc "$GW_PID"
  # "warnings errors panics" in the gateway's log
  echo "$(grep -c ' WARN ' "$WORK/$1.log" || true) $(grep -c ' ERROR ' "$WORK/$1.log" || true)" \
    "$(grep -ci 'panic' "$WORK/$1.log" || true)" >"$WORK/res/$1.logs"
}
# client NAME TIME-LIMIT CMD...: a bench/attack client in the background, output to NAME-client.log
client() {
  local name=$1 limit=$2; shift 2
  spawn "$name-client" timeout "$limit" "$@"
  CLIENT_PID=$LAST_PID
}
wait_client() {
  wait "$CLIENT_PID" || log "$1: the client exited with $? (its log: $1-client.log, kept with KEEP_TMP=1)"
  forget "$CLIENT_PID"
  log "$1: $(grep -E '^[a-z_0-9]+=' "$WORK/$1-client.log" | tail -1)"
}
# warm_big: one whole /big over HTTP/1.1 and one over h2c, so allocator pools are warm
warm_big() {
  local code
  for v in --http1.1 --http2-prior-knowledge; do
    code=$(curl -s -o /dev/null -m 60 "$v" -w '%{http_code}' "http://127.0.0.1:$GW_PORT/big") || true
    [[ $code == 200 ]] || die "GET /big ($v) through the gateway: expected 200, got ${code:-no answer}"
  done
}

r2_slow_readers() {
  local n=slowreaders
  log "$n: $SLOW_READERS HTTP/1.1 connections ask for ${BIG_MIB} MiB and never read (send_timeout ${R2_TIMEOUT}s)"
  r2_gateway $n "$PYUP_URL" "" "$OPEN_ROUTE"
  warm_big
  begin $n
  client $n $((R2_WAIT + 60)) "$PY" "$ATTACK_DIR/slow_readers.py" --port "$GW_PORT" \
    --conns "$SLOW_READERS" --stop-file "$WORK/res/$n.release" --max-hold "$R2_WAIT" --drain 30
  settle $n
  touch "$WORK/res/$n.release"
  wait_client $n
  finish $n
}

r2_zero_window() {
  local n=zerowindow
  log "$n: $ZW_CONNS h2c connections x $ZW_STREAMS streams to ${BIG_MIB} MiB, initial window 0"
  r2_gateway $n "$PYUP_URL" "" "$OPEN_ROUTE"
  warm_big
  begin $n
  client $n $((R2_WAIT + 30)) "$PY" "$ATTACK_DIR/h2_zero_window.py" --port "$GW_PORT" \
    --conns "$ZW_CONNS" --streams "$ZW_STREAMS" --max-seconds "$R2_WAIT"
  settle $n
  wait_client $n
  finish $n
}

r2_idle_h2() {
  local n=idleh2
  log "$n: $IDLE_H2 idle h2c connections (pinging) and $HALF_PREFACE with half the preface"
  r2_gateway $n "$PYUP_URL" "" "$OPEN_ROUTE"
  begin $n
  client $n $((R2_WAIT + 30)) "$PY" "$ATTACK_DIR/h2_idle.py" --port "$GW_PORT" \
    --full "$IDLE_H2" --half "$HALF_PREFACE" --max-seconds "$R2_WAIT"
  settle $n
  wait_client $n
  finish $n
}

r2_tunnels() {
  local n=tunnels
  log "$n: $TUNNELS silent WebSocket tunnels against max_connections = $TUNNEL_MAX"
  r2_gateway $n "$PYUP_URL" "max_connections = $TUNNEL_MAX" "$OPEN_ROUTE"
  begin $n
  client $n $((R2_WAIT + 30)) "$PY" "$ATTACK_DIR/idle_tunnels.py" --port "$GW_PORT" \
    --conns "$TUNNELS" --concurrency 20 --answer-timeout 20 --max-seconds "$R2_WAIT"
  settle $n
  wait_client $n
  finish $n
}

r2_fresh_keys() {
  local n=freshkeys url
  log "$n: max_keys = $FLOOD_MAX_KEYS, one client owing an hour, then $FLOOD_KEYS requests with fresh keys"
  r2_gateway $n "http://127.0.0.1:$ECHO_PORT" "" "[store]
max_keys = $FLOOD_MAX_KEYS

# one request an hour
[policies.strict]
key = \"header:x-user\"
limit = 1
period = \"1h\"
burst = 1

# one request a minute: every fresh key owes a minute, longer than the flood lasts
[policies.junk]
key = \"header:x-junk\"
limit = 1
period = \"1m\"
burst = 1

[[routes]]
name = \"strict\"
path = \"/strict\"
upstream = \"up\"
policies = [\"strict\"]

[[routes]]
name = \"junk\"
path = \"/junk\"
upstream = \"up\"
policies = [\"junk\"]"
  url="http://127.0.0.1:$GW_PORT"
  st() { curl -s -o /dev/null -m 5 -w '%{http_code}' "$@" || true; }
  echo "$(st -H 'x-user: eve' "$url/strict") $(st -H 'x-user: eve' "$url/strict")" >"$WORK/res/$n.eve-before"
  begin $n tollgate_keys_tracked
  local t0 threads=2 wrk_pid decided
  t0=$(now_ms)
  # Each wrk thread stops sending after its share, but wrk itself waits for -d; SIGINT makes it
  # print its summary and exit once the gateway has decided all the requests.
  wrk -t$threads -c32 -d300s --timeout 10s -s "$ATTACK_DIR/fresh_keys.lua" "$url/junk" \
    -- $((FLOOD_KEYS / threads)) "$RANDOM$RANDOM" >"$WORK/res/$n.wrk" 2>&1 &
  wrk_pid=$!
  PIDS+=("$wrk_pid")
  for _ in $(seq 1500); do   # 300 s at most
    kill -0 "$wrk_pid" 2>/dev/null || break
    decided=$(curl -s -m 2 "http://127.0.0.1:$GW_ADMIN/metrics" 2>/dev/null | awk '
      $1 == "tollgate_decisions_total{route=\"junk\",policy=\"junk\",outcome=\"admitted\"}" ||
      $1 == "tollgate_decisions_total{route=\"junk\",policy=\"junk\",outcome=\"denied\"}" { s += $2 }
      END { print s + 0 }') || true
    ((${decided:-0} >= FLOOD_KEYS / threads * threads)) && break
    sleep 0.2
  done
  echo $(($(now_ms) - t0)) >"$WORK/res/$n.ms"
  kill -INT "$wrk_pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$wrk_pid" 2>/dev/null || break; sleep 0.1; done
  stop_proc "$wrk_pid"
  log "$n: wrk: $(grep -E 'requests in|Non-2xx|Socket errors' "$WORK/res/$n.wrk" | tr -s ' \n' ' ')"
  curl -s -D - -o /dev/null -m 5 -H 'x-user: eve' "$url/strict" |
    awk 'NR == 1 { code = $2 } tolower($1) == "retry-after:" { ra = $2 + 0 } END { print code + 0, ra + 0 }' \
    >"$WORK/res/$n.eve-after" || true
  echo "$(st -H 'x-user: alice' "$url/strict") $(st -H "x-junk: late-$RANDOM$RANDOM" "$url/junk")" >"$WORK/res/$n.newcomers"
  local p o
  for p in strict junk; do
    for o in admitted denied overflow; do
      echo "$p $o $(metric "$GW_ADMIN" "tollgate_decisions_total{route=\"$p\",policy=\"$p\",outcome=\"$o\"}")"
    done
  done >"$WORK/res/$n.decisions"
  metric "$GW_ADMIN" tollgate_keys_tracked >"$WORK/res/$n.keys"
  log "$n: eve before $(<"$WORK/res/$n.eve-before"), after (code, retry-after) $(<"$WORK/res/$n.eve-after");" \
    "decisions: $(tr '\n' ';' <"$WORK/res/$n.decisions") keys tracked $(<"$WORK/res/$n.keys")"
  finish $n
}

r2_redis() {
  local n=redis rport out t0 t1 before after i
  free_port rport
  spawn redis-server redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no
  local redis_pid=$LAST_PID
  wait_port "$rport" redis-server "$redis_pid"
  log "$n: backend redis (on_error = \"deny\"), $REDIS_FLOOD requests for a refused key, $HONEST honest clients"
  r2_gateway $n "http://127.0.0.1:$ECHO_PORT" "" "[store]
backend = \"redis\"
url = \"redis://127.0.0.1:$rport\"
on_error = \"deny\"

# two at once, then one an hour
[policies.user]
key = \"header:x-user\"
limit = 1
period = \"1h\"
burst = 2

[[routes]]
name = \"api\"
path = \"/api\"
upstream = \"up\"
policies = [\"user\"]"
  local url="http://127.0.0.1:$GW_PORT/api"
  for i in 1 2 3; do
    curl -s -o /dev/null -m 5 -w '%{http_code}\n' -H 'x-user: mallory' "$url" || true
  done | paste -sd' ' >"$WORK/res/$n.mallory"
  script_calls() {
    redis-cli -p "$rport" INFO commandstats 2>/dev/null |
      awk -F'[:=,]' '$1 == "cmdstat_evalsha" || $1 == "cmdstat_eval" { s += $3 } END { print s + 0 }'
  }
  begin $n tollgate_store_breaker_open
  before=$(script_calls)
  out="$WORK/res/$n.honest"
  t0=$(now_ms)
  { timeout 300 h2load -t2 -c16 -m10 -n"$REDIS_FLOOD" -H 'x-user: mallory' "$url" >"$WORK/res/$n.h2load" 2>&1 ||
      log "$n: h2load exited with $?"
    now_ms >"$WORK/res/$n.t1"; } &
  local flood_pid=$!
  PIDS+=("$flood_pid")
  sleep 0.05
  # the honest clients, one new user each, one after the other while the flood runs
  for i in $(seq "$HONEST"); do
    echo "$(now_ms) $(curl -s -o /dev/null -m 5 -w '%{http_code}' -H "x-user: honest-$i" "$url" || true)"
  done >"$out"
  wait "$flood_pid" || true
  forget "$flood_pid"
  t1=$(cat "$WORK/res/$n.t1" 2>/dev/null || now_ms)
  after=$(script_calls)
  echo "$t0 $t1 $before $after $(metric "$GW_ADMIN" tollgate_store_breaker_open)" >"$WORK/res/$n.calls"
  curl -s -m 2 "http://127.0.0.1:$GW_ADMIN/metrics" | awk '$1 ~ /^tollgate_store_errors_total/ { s += $2 } END { print s + 0 }' \
    >"$WORK/res/$n.errors" || true
  log "$n: h2load: $(grep -E '^requests:|^status codes:' "$WORK/res/$n.h2load" | tr -s ' \n' ' ');" \
    "script calls $before -> $after; honest: $(awk '{ print $2 }' "$out" | sort | uniq -c | tr -s ' \n' ' ')"
  finish $n
  stop_proc "$redis_pid"
}

if part 2; then
  # part 1's gateways would share the echo upstream's connection count
  for pid in ${TG_PID:-} ${IDLE_PID:-}; do stop_proc "$pid"; done
  free_port PYUP_PORT
  spawn pyupstream "$PY" "$ATTACK_DIR/upstream.py" --port "$PYUP_PORT" --big-mib "$BIG_MIB"
  wait_port "$PYUP_PORT" pyupstream "$LAST_PID"
  PYUP_URL="http://127.0.0.1:$PYUP_PORT"
  UP_PORT=$PYUP_PORT
  r2_slow_readers
  r2_zero_window
  r2_idle_h2
  r2_tunnels
  UP_PORT=$ECHO_PORT
  r2_fresh_keys
  if [[ $REDIS == 1 ]] && command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
    r2_redis
  else
    log "redis: skipped (REDIS=$REDIS; redis-server and redis-cli are needed)"
  fi
fi

# ---- report ----------------------------------------------------------------------------
row() { # NAME LABEL
  local s; s=$(probe_stats "$1")
  # shellcheck disable=SC2086  # word splitting wanted
  set -- "$2" $s
  echo "| $1 | $2 | $3 | $4 | $5 | $6 | $7 |"
}
# (slowhttptest -h and wrk -v exit non-zero)
versions="$("$TOLLGATE" --version), $(h2load --version | head -1)"
if part 1; then
  versions+=", $( (slowhttptest -h 2>&1 || true) | grep -o 'version [0-9.]*' | head -1 | sed 's/^/slowhttptest /')"
fi
if part 2; then
  versions+=", $( (wrk -v 2>&1 || true) | head -1 | awk '{ print $1, $2 }')"
  versions+=", Python $("$PY" -c 'import sys, h2; print(sys.version.split()[0], "with h2", h2.__version__)')"
fi
cat <<EOF
# tollgate attack check

- $(date -u +'%F %T UTC'), $(nproc) CPUs, $(uname -sr), $versions.
  Load generators, gateways and upstreams share the same $(nproc) cores.
EOF
if part 1; then
  cat <<EOF
- tollgate: header_read_timeout = "${HEADER_TIMEOUT}s", max_connections 10000 (default), one route \`/api\`
  with a \`tenant\` tier (header:x-tenant-id, 100/s, burst 1000), upstream \`tollgate echo\`.
  Attack traffic has no x-tenant-id (one shared key); the probe uses its own key.
- Probe: \`curl -m 10 -H 'x-tenant-id: probe' $URL\`, one per second during each attack.

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
fi
if part 2; then
  # samples_summary NAME: over the samples from the attack's start: "rss-peak fds-peak
  # open-peak upstream-peak samples healthz-failed healthz-median-ms healthz-max-ms
  # tcp-mem-peak-kB metric-peak"
  samples_summary() {
    awk -v t0="$(<"$WORK/res/$1.t0")" '$1 >= t0 {
        n++; if ($2 > rss) rss = $2; if ($3 > fds) fds = $3; if ($4 > open) open = $4
        if ($5 > up) up = $5; if ($6 != 200) bad++; ms[n] = $7 * 1000; if ($8 > tcp) tcp = $8
        if ($9 > x) x = $9 }
      END {
        for (i = 2; i <= n; i++) { v = ms[i]; for (j = i - 1; j >= 1 && ms[j] > v; j--) ms[j + 1] = ms[j]; ms[j + 1] = v }
        printf "%d %d %d %d %d %d %.1f %.1f %d %d\n", rss, fds, open, up, n, bad,
          n ? ms[int((n + 1) / 2)] : 0, n ? ms[n] : 0, tcp, x }' "$WORK/res/$1.samples"
  }
  mb() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
  r2_row() { # NAME LABEL [UNITS UNIT]: UNITS > 0 adds the RSS growth per UNIT
    [[ -e $WORK/res/$1.t0 ]] || return 0
    local b_rss b_fds b_open b_up b_tcp a_rss a_fds a_open a_up a_tcp back_o=n/a back_f=n/a growth
    local p_rss p_fds p_open p_up n bad med max p_tcp
    read -r b_rss b_fds b_open b_up b_tcp <"$WORK/res/$1.base"
    read -r a_rss a_fds a_open a_up a_tcp <"$WORK/res/$1.after"
    [[ -e $WORK/res/$1.back ]] && read -r back_o back_f <"$WORK/res/$1.back"
    read -r p_rss p_fds p_open p_up n bad med max p_tcp _ < <(samples_summary "$1")
    growth="+$(mb $((p_rss - b_rss)))"
    ((${3:-0} > 0)) && growth+=" ($(awk -v d=$((p_rss - b_rss)) -v u="$3" 'BEGIN { printf "%.0f", d / u }') KiB per $4)"
    if [[ $a_rss == died ]]; then
      echo "| $2 | $(mb "$b_rss") → $(mb "$p_rss") → **died** | $growth | | | | | | |"
      return
    fi
    echo "| $2 | $(mb "$b_rss") → $(mb "$p_rss") → $(mb "$a_rss") | $growth | $b_fds → $p_fds → $a_fds |" \
      "$b_up → $p_up → $a_up | $b_open → $p_open → $a_open | $back_o / $back_f | $(mb "$b_tcp") → $(mb "$p_tcp") → $(mb "$a_tcp") |" \
      "$med / $max ($bad of $n) |"
  }
  zw_streams=$((ZW_CONNS * ZW_STREAMS))
  cat <<EOF

## Resource exhaustion (part 2)

- Every attack runs against a fresh gateway with \`send_timeout\`, \`idle_timeout\`, \`tunnel_idle_timeout\`
  and \`header_read_timeout\` = "${R2_TIMEOUT}s", access log off, other settings at their defaults
  (max_streams 100, upstream max_connections 1024, $(nproc) workers) unless said. Upstream: bench/attack/upstream.py
  (${BIG_MIB} MiB on \`/big\`, a silent WebSocket on \`/ws\`), or \`tollgate echo\` for the two floods.
- Sampled once a second from the attack's start: VmRSS, entries in /proc/PID/fd, tollgate_open_connections,
  established connections to the upstream's port, the kernel's TCP buffer memory (/proc/net/sockstat, whole
  machine: clients' buffers included), and \`curl -m 5\` of /healthz on the admin port.
  "Before" = just before the attack; "after" = 2 s after it ended. "Back" = seconds from the attack's start
  until open connections / descriptors, having risen, were at their value before again (polled twice a
  second; "no" = not within ${R2_WAIT} s; "none" = never rose; n/a = not waited for).

| attack | RSS MiB: before → peak → after | RSS growth, MiB | descriptors: before → peak → after | upstream conns: before → peak → after | open conns: before → peak → after | back (s): conns / fds | kernel TCP MiB: before → peak → after | /healthz ms: median / max (failed of samples) |
|---|---|---|---|---|---|---|---|---|
EOF
  r2_row slowreaders "slow readers: $SLOW_READERS × GET ${BIG_MIB} MiB, never read" "$SLOW_READERS" "connection"
  r2_row zerowindow "zero window: $ZW_CONNS h2c conns × $ZW_STREAMS streams" "$zw_streams" "stream"
  r2_row idleh2 "idle HTTP/2: $IDLE_H2 after SETTINGS + $HALF_PREFACE half preface" "$((IDLE_H2 + HALF_PREFACE))" "connection"
  r2_row tunnels "idle tunnels: $TUNNELS upgrades, max_connections $TUNNEL_MAX" "$TUNNELS" "attempt"
  r2_row freshkeys "fresh-key flood: $FLOOD_KEYS keys, max_keys $FLOOD_MAX_KEYS"
  r2_row redis "refused flood against Redis: $REDIS_FLOOD requests"

  echo
  echo "What the clients saw:"
  echo
  f=$WORK/slowreaders-client.log
  [[ -e $f ]] && echo "- **Slow readers**: $(kv "$f" opened) connections sent \`GET /big\`, $(kv "$f" status200) got a 200 head." \
    "Read after the gateway had let go, each had been sent $(kv "$f" kib_median) KiB (median; min $(kv "$f" kib_min)," \
    "max $(kv "$f" kib_max)) of $((BIG_MIB * 1024)) KiB, then: end of stream $(kv "$f" eof), reset $(kv "$f" reset)," \
    "still open $(kv "$f" open)."
  f=$WORK/zerowindow-client.log
  [[ -e $f ]] && echo "- **Zero window**: $(kv "$f" streams) streams on $(kv "$f" conns) connections; response heads by status" \
    "$(kv "$f" statuses); resets received $(kv "$f" resets) ($(kv "$f" reset_n) streams), $(kv "$f" reset_min) to" \
    "$(kv "$f" reset_max) s after the requests (median $(kv "$f" reset_median)); DATA bytes received $(kv "$f" data_bytes);" \
    "whole bodies $(kv "$f" ended). GOAWAY on $(kv "$f" goaway) connections (median $(kv "$f" goaway_median) s);" \
    "closed by the gateway $(kv "$f" closed) (median $(kv "$f" closed_median) s, max $(kv "$f" closed_max) s);" \
    "still open at ${R2_WAIT} s: $(kv "$f" still_open)."
  f=$WORK/idleh2-client.log
  [[ -e $f ]] && echo "- **Idle HTTP/2**: $(kv "$f" full) connections after SETTINGS ($(kv "$f" full_failed) failed to" \
    "connect): $(kv "$f" full_goaway) got GOAWAY, $(kv "$f" full_closed) closed $(kv "$f" full_min) to $(kv "$f" full_max) s" \
    "after their preface (median $(kv "$f" full_median)), $(kv "$f" full_pings_acked) of their PINGs answered before;" \
    "still open $(kv "$f" full_open). $(kv "$f" half) half prefaces: $(kv "$f" half_closed) closed $(kv "$f" half_min)" \
    "to $(kv "$f" half_max) s after (median $(kv "$f" half_median)); still open $(kv "$f" half_open)."
  f=$WORK/tunnels-client.log
  [[ -e $f ]] && echo "- **Idle tunnels**: $(kv "$f" attempts) upgrade requests (20 at a time), answers $(kv "$f" statuses)" \
    "($(kv "$f" late) answered more than 1 s after the request); $(kv "$f" closed) tunnels closed by the gateway" \
    "$(kv "$f" closed_min) to $(kv "$f" closed_max) s after their 101 (median $(kv "$f" closed_median));" \
    "still open $(kv "$f" still_open). tollgate_open_connections does not count a tunnel once upgraded; the descriptors do."
  if [[ -e $WORK/res/freshkeys.decisions ]]; then
    dec() { awk -v p="$1" -v o="$2" '$1 == p && $2 == o { print ($3 == "" ? "?" : $3) }' "$WORK/res/freshkeys.decisions"; }
    read -r eb1 eb2 <"$WORK/res/freshkeys.eve-before"
    read -r ea era <"$WORK/res/freshkeys.eve-after"
    read -r alice late <"$WORK/res/freshkeys.newcomers"
    wrk_total=$(awk '/requests in/ { print $1 }' "$WORK/res/freshkeys.wrk")
    wrk_non2xx=$(awk '/Non-2xx/ { print $NF }' "$WORK/res/freshkeys.wrk")
    wrk_rps=$(awk '/^Requests\/sec/ { printf "%.0f", $2 }' "$WORK/res/freshkeys.wrk")
    echo "- **Fresh-key flood**: \`eve\` on \`strict\` (1 an hour): $eb1, then $eb2. wrk -t2 -c32 sent ${wrk_total:-?}" \
      "requests with a new \`x-junk\` each (policy \`junk\`: 1 a minute) in $(awk -v ms="$(<"$WORK/res/freshkeys.ms")" \
      'BEGIN { printf "%.1f", ms / 1000 }') s (${wrk_rps:-?} req/s), ${wrk_non2xx:-0} not 2xx. Decisions on \`junk\`:" \
      "admitted $(dec junk admitted), denied $(dec junk denied), of them on the overflow key $(dec junk overflow);" \
      "keys tracked after: $(<"$WORK/res/freshkeys.keys"). Then \`eve\`: **$ea**, Retry-After $era s; a new" \
      "user on \`strict\`: $alice; one more fresh key on \`junk\`: $late."
  fi
  if [[ -e $WORK/res/redis.calls ]]; then
    read -r t0 t1 before after breaker <"$WORK/res/redis.calls"
    calls=$((after - before))
    h2l=$(awk '/^finished in/ { rps = $4 } /^requests:/ { total = $2; errored = $12 }
               /^status codes:/ { s2 = $3; s4 = $7; s5 = $9 }
               END { printf "%d requests at %.0f req/s: %d 2xx, %d 4xx, %d 5xx, %d errored", total, rps, s2, s4, s5, errored }' \
      "$WORK/res/redis.h2load")
    honest_ok=$(awk '$2 == 200 { n++ } END { print n + 0 }' "$WORK/res/redis.honest")
    honest_in=$(awk -v a="$t0" -v b="$t1" '$1 >= a && $1 <= b { n++ } END { print n + 0 }' "$WORK/res/redis.honest")
    breaker_peak=$(samples_summary redis | awk '{ print $10 }')
    echo "- **Refused flood against Redis**: \`mallory\` (2 at once, then 1 an hour): $(<"$WORK/res/redis.mallory")." \
      "h2load -c16 -m10: $h2l, in $(awk -v ms=$((t1 - t0)) 'BEGIN { printf "%.1f", ms / 1000 }') s." \
      "Redis script calls (EVALSHA + EVAL, INFO commandstats) meanwhile: $calls, i.e." \
      "$(awk -v c="$calls" -v n="$REDIS_FLOOD" 'BEGIN { printf "%.4f", c / n }') per flooded request, the $HONEST honest" \
      "requests included. Honest clients (one new \`x-user\` each): $honest_ok of $HONEST got 200 ($honest_in of them sent" \
      "while h2load ran). tollgate_store_breaker_open: peak ${breaker_peak:-?} over the samples, ${breaker:-?} at the end;" \
      "tollgate_store_errors_total: $(<"$WORK/res/redis.errors")."
  fi
  echo
  logs=""
  for r in slowreaders zerowindow idleh2 tunnels freshkeys redis; do
    [[ -e $WORK/res/$r.logs ]] || continue
    read -r w e p <"$WORK/res/$r.logs"
    logs+="$r $w/$e/$p, "
  done
  echo "Gateway logs (warnings/errors/panic lines): ${logs%, }."
fi
