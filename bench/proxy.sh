#!/usr/bin/env bash
# Side-by-side proxy benchmark, one run, every figure a ratio against systems measured in the
# same run: nginx with 3 limit_req zones, HAProxy with 3 stick-table counters, tollgate with
# 3 tiers and with 0, and the bare-hyper floor built from this repository (bench/floor.rs:
# the same thread-per-core layout, a dedicated upstream connection per client connection,
# the same 429). All on 127.0.0.1; Markdown report on stdout, progress on stderr.
#
#   sudo bench/proxy.sh                      # builds tollgate and the floor with cargo --release
#   TOLLGATE_BIN=path/to/tollgate FLOOR_BIN=path/to/floor ROUNDS=1 DURATION=5 bench/proxy.sh
#
# Env: ROUNDS (5) alternating rounds, DURATION (10) seconds per run, THREADS (1) and CONNS
# (64) for wrk, H2_REQUESTS (200000), H2_CONNS (32), H2_STREAMS (10) for h2load, WORKERS
# (nproc: nginx worker_processes, HAProxy nbthread, tollgate and floor workers),
# LOAD_SHARE (70: percent of nginx's saturation offered in the latency runs), KEEP_TMP=1.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

ROUNDS=${ROUNDS:-5} DURATION=${DURATION:-10} THREADS=${THREADS:-1} CONNS=${CONNS:-64}
H2_REQUESTS=${H2_REQUESTS:-200000} H2_CONNS=${H2_CONNS:-32} H2_STREAMS=${H2_STREAMS:-10}
WORKERS=${WORKERS:-$(nproc)} LOAD_SHARE=${LOAD_SHARE:-70}
BIG=1000000   # rate and burst on the allowed path: every request is admitted

need_tools nginx=nginx-light haproxy=haproxy wrk=wrk h2load=nghttp2-client curl=curl
command -v oha >/dev/null || die "oha is missing: cargo install oha --locked"
find_tollgate
find_floor
make_workdir
mkdir -p "$WORK/res"

# ---- processes -------------------------------------------------------------------------
start_upstream
free_port NGINX_PORT; free_port NGINX_H2_PORT; free_port HAP_PORT; free_port TG3_PORT
free_port TG0_PORT; free_port FLOOR_FWD_PORT; free_port FLOOR_DENY_PORT

peer_nginx_conf nginx "$WORKERS" "$NGINX_PORT" "$NGINX_H2_PORT" >"$WORK/nginx.conf"
spawn nginx nginx -p "$WORK/" -c "$WORK/nginx.conf"
wait_port "$NGINX_PORT" nginx "$LAST_PID"

peer_haproxy_cfg "$WORKERS" "$HAP_PORT" >"$WORK/haproxy.cfg"
haproxy -c -q -f "$WORK/haproxy.cfg" || die "haproxy rejected its config"
spawn haproxy haproxy -db -f "$WORK/haproxy.cfg"
wait_port "$HAP_PORT" haproxy "$LAST_PID"

tollgate_head() { # PORT
  cat <<EOF
[server]
listen = "127.0.0.1:$1"
access_log = false
drain_timeout = "1s"
workers = $WORKERS

[store]
max_keys = 2_000_000

[upstreams.up]
targets = ["http://127.0.0.1:$UPSTREAM_PORT"]

EOF
}
{ tollgate_head "$TG3_PORT"
  toml_policy tenant '"header:x-tenant-id"' $BIG 1s $BIG
  toml_policy endpoint '"route"' $BIG 1s $BIG
  toml_policy user '["header:x-tenant-id", "header:x-user-id"]' $BIG 1s $BIG
  toml_policy hot '"header:x-tenant-id"' 1 1h 1
  toml_route search /v1/search up '["tenant", "endpoint", "user"]'
  toml_route deny /deny up '["hot"]'
} >"$WORK/tg3.toml"
{ tollgate_head "$TG0_PORT"; toml_route search /v1/search up '[]'; } >"$WORK/tg0.toml"
start_tollgate tg3 "$WORK/tg3.toml" "$TG3_PORT"
start_tollgate tg0 "$WORK/tg0.toml" "$TG0_PORT"
spawn floor-fwd "$FLOOR" forward --listen "127.0.0.1:$FLOOR_FWD_PORT" \
  --upstream "127.0.0.1:$UPSTREAM_PORT" --workers "$WORKERS"
wait_port "$FLOOR_FWD_PORT" floor-fwd "$LAST_PID"
spawn floor-deny "$FLOOR" deny --listen "127.0.0.1:$FLOOR_DENY_PORT" --workers "$WORKERS"
wait_port "$FLOOR_DENY_PORT" floor-deny "$LAST_PID"

# ---- sanity: the status codes each target must give -----------------------------------
status() { curl -s -o /dev/null -w '%{http_code}' -m 5 "$@"; }
expect() { # WANT WHAT CURL-ARGS...
  local want=$1 what=$2 got; shift 2
  got=$(status "$@") || true
  [[ $got == "$want" ]] || die "$what: expected $want, got ${got:-no answer}"
}
H=(-H 'x-tenant-id: t1' -H 'x-user-id: u1')
for p in "$UPSTREAM_PORT" "$NGINX_PORT" "$HAP_PORT" "$TG3_PORT" "$TG0_PORT" "$FLOOR_FWD_PORT"; do
  expect 200 "GET :$p/v1/search" "${H[@]}" "http://127.0.0.1:$p/v1/search"
done
expect 200 "h2c nginx" --http2-prior-knowledge "${H[@]}" "http://127.0.0.1:$NGINX_H2_PORT/v1/search"
expect 200 "h2c tollgate" --http2-prior-knowledge "${H[@]}" "http://127.0.0.1:$TG3_PORT/v1/search"
curl -s -D - -o /dev/null "${H[@]}" "http://127.0.0.1:$TG3_PORT/v1/search" | grep -qi '^x-ratelimit-limit:' ||
  die "tollgate 3 tiers sent no X-RateLimit-Limit: are the tiers applied?"
for p in "$NGINX_PORT" "$HAP_PORT" "$TG3_PORT"; do   # the first /deny request spends the only token
  status -H 'x-tenant-id: hot' "http://127.0.0.1:$p/deny" >/dev/null || true
  expect 429 "GET :$p/deny (hot key)" -H 'x-tenant-id: hot' "http://127.0.0.1:$p/deny"
done
expect 429 "floor deny" "http://127.0.0.1:$FLOOR_DENY_PORT/deny"

# ---- measurements ----------------------------------------------------------------------
# run_wrk NAME URL [wrk args]: one wrk run; appends "req/s p50ms p99ms non2xx total errors".
run_wrk() {
  local name=$1 url=$2 out="$WORK/wrk.out"; shift 2
  timeout $((DURATION + 30)) wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency "$@" "$url" >"$out" ||
    die "wrk against $name failed: $(cat "$out")"
  awk 'function ms(v) { return v ~ /us$/ ? v / 1000 : v ~ /ms$/ ? v + 0 : v * 1000 }
       $1 == "50%" { p50 = ms($2) } $1 == "99%" { p99 = ms($2) }
       /^Requests\/sec:/ { rps = $2 } / requests in / { total = $1 }
       /Non-2xx or 3xx responses:/ { bad = $NF }
       /Socket errors:/ { gsub(/[^0-9 ]/, ""); split($0, e, " "); err = e[1] + e[2] + e[3] + e[4] }
       END { printf "%.0f %.3f %.3f %d %d %d\n", rps, p50, p99, bad, total, err }' "$out" >>"$WORK/res/$name"
  log "$name: $(tail -1 "$WORK/res/$name")  (req/s p50ms p99ms non-2xx total socket-errors)"
}
# run_h2 NAME PORT: one h2load run; appends "req/s 2xx total".
run_h2() {
  local out="$WORK/h2.out"
  timeout 300 h2load -t"$THREADS" -c"$H2_CONNS" -m"$H2_STREAMS" -n"$H2_REQUESTS" "${H[@]}" \
    "http://127.0.0.1:$2/v1/search" >"$out" || die "h2load against $1 failed: $(tail -5 "$out")"
  awk '/^finished in/ { rps = $4 } /^requests:/ { total = $2 } /^status codes:/ { ok = $3 }
       END { printf "%.0f %d %d\n", rps, ok, total }' "$out" >>"$WORK/res/$1"
  log "$1: $(tail -1 "$WORK/res/$1")  (req/s 2xx total)"
}
# run_oha NAME URL RATE: a fixed offered load; appends "p50ms p99ms p99.9ms 2xx total".
run_oha() {
  local out="$WORK/oha.json"
  timeout $((DURATION + 60)) oha --no-tui --output-format json -z "${DURATION}s" -c "$CONNS" \
    -q "$3" --latency-correction "${H[@]}" "$2" >"$out" 2>"$WORK/oha.err" ||
    die "oha against $1 failed: $(tail -5 "$WORK/oha.err")"
  python3 - "$out" >>"$WORK/res/$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
p = r["latencyPercentiles"]
codes = r.get("statusCodeDistribution", {})
ok = sum(v for k, v in codes.items() if k.startswith("2"))
total = sum(codes.values())
print(f'{p["p50"] * 1e3:.3f} {p["p99"] * 1e3:.3f} {p["p99.9"] * 1e3:.3f} {ok} {total}')
PY
  log "$1: $(tail -1 "$WORK/res/$1")  (p50ms p99ms p99.9ms 2xx total)"
}

declare -A URL=([direct]="http://127.0.0.1:$UPSTREAM_PORT/v1/search"
  [nginx]="http://127.0.0.1:$NGINX_PORT/v1/search" [haproxy]="http://127.0.0.1:$HAP_PORT/v1/search"
  [tg3]="http://127.0.0.1:$TG3_PORT/v1/search" [tg0]="http://127.0.0.1:$TG0_PORT/v1/search"
  [floor]="http://127.0.0.1:$FLOOR_FWD_PORT/v1/search")
declare -A DENY=([nginx]="http://127.0.0.1:$NGINX_PORT/deny" [haproxy]="http://127.0.0.1:$HAP_PORT/deny"
  [tg3]="http://127.0.0.1:$TG3_PORT/deny" [floor]="http://127.0.0.1:$FLOOR_DENY_PORT/deny")
ALLOWED=(direct nginx haproxy tg3 tg0 floor)
DENIED=(nginx haproxy tg3 floor)

log "warm-up: 2 s per target"
for t in "${ALLOWED[@]}"; do
  timeout 30 wrk -t"$THREADS" -c"$CONNS" -d2s -s "$BENCH_DIR/keys.lua" "${URL[$t]}" >/dev/null
done
for r in $(seq "$ROUNDS"); do
  log "round $r/$ROUNDS"
  # Each round starts with a different system, so none always runs first or last.
  for i in $(seq 0 $((${#ALLOWED[@]} - 1))); do
    t=${ALLOWED[$(((i + r) % ${#ALLOWED[@]}))]}
    run_wrk "$t" "${URL[$t]}" -s "$BENCH_DIR/keys.lua"
  done
  for i in $(seq 0 $((${#DENIED[@]} - 1))); do
    t=${DENIED[$(((i + r) % ${#DENIED[@]}))]}
    run_wrk "deny-$t" "${DENY[$t]}" -H 'x-tenant-id: hot'
  done
done

# ---- report helpers --------------------------------------------------------------------
med() { awk -v c="$2" '{ print $c }' "$WORK/res/$1" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
sum() { awk -v c="$2" '{ s += $c } END { print s + 0 }' "$WORK/res/$1"; }
all() { awk '{ printf "%s%s", (NR > 1 ? ", " : ""), $1 }' "$WORK/res/$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf (b > 0 ? "%.2f" : "n/a"), a / (b > 0 ? b : 1) }'; }

# Latency at a fixed offered load: LOAD_SHARE % of nginx's saturation rate, measured with
# oha itself (unpaced), since oha spends more CPU per request than wrk on the same cores.
for r in $(seq "$ROUNDS"); do
  timeout $((DURATION + 60)) oha --no-tui --output-format json -z "${DURATION}s" -c "$CONNS" "${H[@]}" \
    "${URL[nginx]}" 2>"$WORK/oha.err" | python3 -c 'import json, sys; print("%.0f" % json.load(sys.stdin)["summary"]["requestsPerSec"])' \
    >>"$WORK/res/oha-sat-nginx" || die "oha against nginx failed: $(tail -5 "$WORK/oha.err")"
  log "oha-sat-nginx: $(tail -1 "$WORK/res/oha-sat-nginx") req/s"
done
RATE=$(awk -v r="$(med oha-sat-nginx 1)" -v s="$LOAD_SHARE" 'BEGIN { printf "%d", r * s / 100 }')
log "fixed load: $RATE req/s ($LOAD_SHARE % of nginx's saturation under oha)"
LATENCY=(nginx haproxy tg3)
for r in $(seq "$ROUNDS"); do
  for i in $(seq 0 $((${#LATENCY[@]} - 1))); do
    t=${LATENCY[$(((i + r) % ${#LATENCY[@]}))]}
    run_oha "fixed-$t" "${URL[$t]}" "$RATE"
  done
done
for r in $(seq "$ROUNDS"); do
  run_h2 h2-nginx "$NGINX_H2_PORT"
  run_h2 h2-tg3 "$TG3_PORT"
done
for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null || die "a server (pid $pid) died during the run"; done

# ---- report ----------------------------------------------------------------------------
declare -A LABEL=([direct]="upstream direct (nginx return 200)" [nginx]="nginx, 3 limit_req zones"
  [haproxy]="HAProxy, 3 stick counters" [tg3]="tollgate, 3 tiers" [tg0]="tollgate, 0 tiers"
  [floor]="floor: bare hyper, dedicated upstream connection")
declare -A DENY_LABEL=([nginx]="nginx limit_req" [haproxy]="HAProxy deny_status 429"
  [tg3]="tollgate" [floor]="floor: bare hyper, static 429")
verdict() { awk -v v="$1" -v t="$2" 'BEGIN { print (v >= t ? "met" : "not met") }'; }
lat_verdict() { awk -v v="$1" -v a="$2" -v b="$3" 'BEGIN { print (v <= a && v <= b ? "met" : "not met") }'; }

cat <<EOF
# tollgate proxy benchmark

- $(date -u +'%F %T UTC'), $(nproc) CPUs, $(uname -sr), $(nginx -v 2>&1 | sed 's/.*: //'), \
$(haproxy -v | awk 'NR == 1 { print "HAProxy", $3 }'), $(wrk -v 2>&1 | awk 'NR == 1 { print $1, $2 }'), \
$(oha --version), $(h2load --version | head -1), $("$TOLLGATE" --version)
- $WORKERS workers everywhere: nginx worker_processes, HAProxy nbthread, tollgate and floor
  worker threads (one current-thread runtime and SO_REUSEPORT listener each). No CPU pinning.
  Upstream: nginx, 1 worker, \`return 200 "ok\\n"\`. Every proxy keeps alive to it and logs nothing per request.
- wrk -t$THREADS -c$CONNS -d${DURATION}s, $ROUNDS alternating rounds (each round starts with the next system), medians shown.
  Load generator, proxies and upstream share the same $(nproc) cores: quote the ratios, not the absolute figures.

## Allowed path: HTTP/1.1, 100 tenants x 10,000 users (bench/keys.lua), every request admitted

| target | req/s | p50 ms | p99 ms | req/s per round | non-2xx | socket errors |
|---|---:|---:|---:|---|---:|---:|
EOF
for t in "${ALLOWED[@]}"; do
  echo "| ${LABEL[$t]} | $(med "$t" 1) | $(med "$t" 2) | $(med "$t" 3) | $(all "$t") | $(sum "$t" 4) | $(sum "$t" 6) |"
done
cat <<EOF

## Deny path: one hot key (x-tenant-id: hot), 1 request per hour (nginx: 1r/m), every request refused with 429

| target | req/s | p50 ms | p99 ms | req/s per round | non-2xx / total |
|---|---:|---:|---:|---|---:|
EOF
for t in "${DENIED[@]}"; do
  echo "| ${DENY_LABEL[$t]} | $(med "deny-$t" 1) | $(med "deny-$t" 2) | $(med "deny-$t" 3) | $(all "deny-$t") |" \
    "$(sum "deny-$t" 4) / $(sum "deny-$t" 5) |"
done
cat <<EOF

## Latency at a fixed load: oha -q $RATE (${LOAD_SHARE} % of nginx's saturation under oha, $(med oha-sat-nginx 1) req/s), -c $CONNS, one tenant and user, latency-corrected

| target | p50 ms | p99 ms | p99.9 ms | 2xx / total |
|---|---:|---:|---:|---:|
EOF
for t in "${LATENCY[@]}"; do
  echo "| ${LABEL[$t]} | $(med "fixed-$t" 1) | $(med "fixed-$t" 2) | $(med "fixed-$t" 3) | $(sum "fixed-$t" 4) / $(sum "fixed-$t" 5) |"
done
cat <<EOF

## HTTP/2 cleartext (h2c, prior knowledge): h2load -t$THREADS -c$H2_CONNS -m$H2_STREAMS -n$H2_REQUESTS, one fixed tenant and user

| target | req/s | req/s per round | 2xx / total |
|---|---:|---|---:|
| nginx, 3 limit_req zones | $(med h2-nginx 1) | $(all h2-nginx) | $(sum h2-nginx 2) / $(sum h2-nginx 3) |
| tollgate, 3 tiers | $(med h2-tg3 1) | $(all h2-tg3) | $(sum h2-tg3 2) / $(sum h2-tg3 3) |

## Ratios and targets

| ratio (medians of this run) | value | target | |
|---|---:|---:|---|
EOF
row() { # LABEL VALUE TARGET
  echo "| $1 | $2 | $3 | $(verdict "$2" "${3#≥ }") |"
}
row "allowed, 3 tiers: tollgate / nginx" "$(ratio "$(med tg3 1)" "$(med nginx 1)")" "≥ 1.10"
row "allowed, 3 tiers: tollgate / HAProxy" "$(ratio "$(med tg3 1)" "$(med haproxy 1)")" "≥ 1.10"
row "allowed, no tiers: tollgate / floor" "$(ratio "$(med tg0 1)" "$(med floor 1)")" "≥ 0.95"
row "deny: tollgate / floor" "$(ratio "$(med deny-tg3 1)" "$(med deny-floor 1)")" "≥ 0.97"
echo "| allowed: floor / nginx (the distance the stack allows) | $(ratio "$(med floor 1)" "$(med nginx 1)") | | |"
echo "| allowed, 3 tiers: tollgate / tollgate 0 tiers (cost of 3 tiers) | $(ratio "$(med tg3 1)" "$(med tg0 1)") | | |"
echo "| deny: tollgate / nginx | $(ratio "$(med deny-tg3 1)" "$(med deny-nginx 1)") | | |"
echo "| deny: tollgate / HAProxy | $(ratio "$(med deny-tg3 1)" "$(med deny-haproxy 1)") | | |"
echo "| h2c: tollgate / nginx | $(ratio "$(med h2-tg3 1)" "$(med h2-nginx 1)") | | |"
P99=$(med fixed-tg3 2)
echo "| p99 at $LOAD_SHARE % load: tollgate / nginx, tollgate / HAProxy | $(ratio "$P99" "$(med fixed-nginx 2)"), $(ratio "$P99" "$(med fixed-haproxy 2)") | ≤ 1, ≤ 1 | $(lat_verdict "$P99" "$(med fixed-nginx 2)" "$(med fixed-haproxy 2)") |"
