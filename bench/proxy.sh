#!/usr/bin/env bash
# Side-by-side proxy benchmark: upstream direct, nginx with 3 limit_req zones, tollgate with
# 3 tiers, tollgate with 0 tiers. All on 127.0.0.1; prints a Markdown report on stdout,
# progress on stderr. See bench/README.md.
#
#   sudo bench/proxy.sh                      # builds tollgate with cargo build --release
#   TOLLGATE_BIN=path/to/tollgate ROUNDS=1 DURATION=5 bench/proxy.sh
#
# Env: ROUNDS (3) alternating rounds, DURATION (10) seconds per wrk run, THREADS (2) and
# CONNS (64) for wrk, H2_REQUESTS (200000), H2_CONNS (32), H2_STREAMS (10) for h2load,
# NGINX_WORKERS (nproc: tollgate's tokio runtime has one worker thread per core), KEEP_TMP=1.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

ROUNDS=${ROUNDS:-3} DURATION=${DURATION:-10} THREADS=${THREADS:-2} CONNS=${CONNS:-64}
H2_REQUESTS=${H2_REQUESTS:-200000} H2_CONNS=${H2_CONNS:-32} H2_STREAMS=${H2_STREAMS:-10}
NGINX_WORKERS=${NGINX_WORKERS:-$(nproc)}
BIG=1000000   # rate and burst on the allowed path: every request is admitted

need_tools nginx=nginx-light wrk=wrk h2load=nghttp2-client curl=curl
find_tollgate
make_workdir
mkdir -p "$WORK/res"

# ---- processes -------------------------------------------------------------------------
start_upstream
free_port NGINX_PORT; free_port NGINX_H2_PORT; free_port TG3_PORT; free_port TG0_PORT

{ nginx_head nginx "$NGINX_WORKERS"
  echo "http {"; nginx_http_common; cat <<EOF
    limit_req_status 429;
    limit_req_log_level info;   # error_log is at warn: denials are not logged (tollgate: access_log = false)
    limit_req_zone \$http_x_tenant_id zone=tenant:16m rate=${BIG}r/s;
    limit_req_zone \$uri zone=endpoint:1m rate=${BIG}r/s;
    limit_req_zone "\$http_x_tenant_id:\$http_x_user_id" zone=user:128m rate=${BIG}r/s;
    limit_req_zone \$http_x_tenant_id zone=hot:1m rate=1r/m;
    upstream up { server 127.0.0.1:$UPSTREAM_PORT; keepalive 64; keepalive_requests 1000000; }
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    proxy_set_header Host \$http_host;   # tollgate also forwards Host unchanged and adds X-Forwarded-*
    proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
    proxy_set_header X-Forwarded-Proto \$scheme;
    proxy_set_header X-Forwarded-Host \$host;
    server {
        listen 127.0.0.1:$NGINX_PORT;
        listen 127.0.0.1:$NGINX_H2_PORT http2;   # nginx 1.22: h2c (prior knowledge) needs its own port
        location /v1/search {
            limit_req zone=tenant burst=$BIG nodelay;
            limit_req zone=endpoint burst=$BIG nodelay;
            limit_req zone=user burst=$BIG nodelay;
            proxy_pass http://up;
        }
        location /deny { limit_req zone=hot nodelay; proxy_pass http://up; }
    }
}
EOF
} >"$WORK/nginx.conf"
spawn nginx nginx -p "$WORK/" -c "$WORK/nginx.conf"
wait_port "$NGINX_PORT" nginx "$LAST_PID"

tollgate_head() { # PORT
  cat <<EOF
[server]
listen = "127.0.0.1:$1"
access_log = false
drain_timeout = "1s"

[store]
max_keys = 2_000_000

[upstreams.up]
targets = ["http://127.0.0.1:$UPSTREAM_PORT"]

EOF
}
policy() { printf '[policies.%s]\nkey = %s\nlimit = %s\nperiod = "%s"\nburst = %s\n\n' "$@"; }
route() { printf '[[routes]]\nname = "%s"\npath = "%s"\nupstream = "up"\npolicies = %s\n\n' "$@"; }
{ tollgate_head "$TG3_PORT"
  policy tenant '"header:x-tenant-id"' $BIG 1s $BIG
  policy endpoint '"route"' $BIG 1s $BIG
  policy user '["header:x-tenant-id", "header:x-user-id"]' $BIG 1s $BIG
  policy hot '"header:x-tenant-id"' 1 1h 1
  route search /v1/search '["tenant", "endpoint", "user"]'
  route deny /deny '["hot"]'
} >"$WORK/tg3.toml"
{ tollgate_head "$TG0_PORT"; route search /v1/search '[]'; } >"$WORK/tg0.toml"
start_tollgate tg3 "$WORK/tg3.toml" "$TG3_PORT"
start_tollgate tg0 "$WORK/tg0.toml" "$TG0_PORT"

# ---- sanity: the status codes each target must give -----------------------------------
status() { curl -s -o /dev/null -w '%{http_code}' -m 5 "$@"; }
expect() { # WANT WHAT CURL-ARGS...
  local want=$1 what=$2 got; shift 2
  got=$(status "$@") || true
  [[ $got == "$want" ]] || die "$what: expected $want, got ${got:-no answer}"
}
H=(-H 'x-tenant-id: t1' -H 'x-user-id: u1')
for p in "$UPSTREAM_PORT" "$NGINX_PORT" "$TG3_PORT" "$TG0_PORT"; do
  expect 200 "GET :$p/v1/search" "${H[@]}" "http://127.0.0.1:$p/v1/search"
done
expect 200 "h2c nginx" --http2-prior-knowledge "${H[@]}" "http://127.0.0.1:$NGINX_H2_PORT/v1/search"
expect 200 "h2c tollgate" --http2-prior-knowledge "${H[@]}" "http://127.0.0.1:$TG3_PORT/v1/search"
curl -s -D - -o /dev/null "${H[@]}" "http://127.0.0.1:$TG3_PORT/v1/search" | grep -qi '^x-ratelimit-limit:' ||
  die "tollgate 3 tiers sent no X-RateLimit-Limit: are the tiers applied?"
for p in "$NGINX_PORT" "$TG3_PORT"; do   # the first /deny request spends the only token
  status -H 'x-tenant-id: hot' "http://127.0.0.1:$p/deny" >/dev/null || true
  expect 429 "GET :$p/deny (hot key)" -H 'x-tenant-id: hot' "http://127.0.0.1:$p/deny"
done

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

declare -A URL=([direct]="http://127.0.0.1:$UPSTREAM_PORT/v1/search"
  [nginx]="http://127.0.0.1:$NGINX_PORT/v1/search"
  [tg3]="http://127.0.0.1:$TG3_PORT/v1/search" [tg0]="http://127.0.0.1:$TG0_PORT/v1/search")
ALLOWED=(direct nginx tg3 tg0)

log "warm-up: 2 s per target"
for t in "${ALLOWED[@]}"; do
  timeout 30 wrk -t"$THREADS" -c"$CONNS" -d2s -s "$BENCH_DIR/keys.lua" "${URL[$t]}" >/dev/null
done
for r in $(seq "$ROUNDS"); do
  log "round $r/$ROUNDS"
  for t in "${ALLOWED[@]}"; do run_wrk "$t" "${URL[$t]}" -s "$BENCH_DIR/keys.lua"; done
  for t in nginx tg3; do
    port=NGINX_PORT; [[ $t == tg3 ]] && port=TG3_PORT
    run_wrk "deny-$t" "http://127.0.0.1:${!port}/deny" -H 'x-tenant-id: hot'
  done
  run_h2 h2-nginx "$NGINX_H2_PORT"
  run_h2 h2-tg3 "$TG3_PORT"
done
for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null || die "a server (pid $pid) died during the run"; done

# ---- report ----------------------------------------------------------------------------
med() { awk -v c="$2" '{ print $c }' "$WORK/res/$1" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
sum() { awk -v c="$2" '{ s += $c } END { print s + 0 }' "$WORK/res/$1"; }
all() { awk '{ printf "%s%s", (NR > 1 ? ", " : ""), $1 }' "$WORK/res/$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf (b > 0 ? "%.2f" : "n/a"), a / (b > 0 ? b : 1) }'; }
declare -A LABEL=([direct]="upstream direct (nginx return 200)" [nginx]="nginx, 3 limit_req zones"
  [tg3]="tollgate, 3 tiers" [tg0]="tollgate, 0 tiers")

cat <<EOF
# tollgate proxy benchmark

- $(date -u +'%F %T UTC'), $(nproc) CPUs, $(uname -sr), $(nginx -v 2>&1 | sed 's/.*: //'), \
$(wrk -v 2>&1 | awk 'NR == 1 { print $1, $2 }'), $(h2load --version | head -1), $("$TOLLGATE" --version)
- nginx proxy: worker_processes $NGINX_WORKERS; tollgate: thread-per-core workers (one current-thread runtime and SO_REUSEPORT listener each), \
$(nproc) worker threads (\`[server] workers\`, default one per core). Upstream: nginx, 1 worker, \`return 200 "ok\\n"\`.
  Both proxies keep alive to the upstream (nginx: keepalive 64), log nothing per request.
- wrk -t$THREADS -c$CONNS -d${DURATION}s, $ROUNDS alternating round(s), medians shown.
  Load generator, proxies and upstream share the same $(nproc) cores.

## Allowed path: HTTP/1.1, 100 tenants x 10,000 users (bench/keys.lua), every request admitted

| target | req/s | p50 ms | p99 ms | req/s per round | non-2xx | socket errors |
|---|---:|---:|---:|---|---:|---:|
EOF
for t in "${ALLOWED[@]}"; do
  echo "| ${LABEL[$t]} | $(med "$t" 1) | $(med "$t" 2) | $(med "$t" 3) | $(all "$t") | $(sum "$t" 4) | $(sum "$t" 6) |"
done
cat <<EOF

Ratios: req/s above 1 means tollgate serves more; latency below 1 means tollgate answers faster.

| ratio | req/s | p50 | p99 |
|---|---:|---:|---:|
EOF
for pair in "tg3 nginx" "tg3 direct" "tg3 tg0"; do
  set -- $pair   # word splitting wanted: two target names
  echo "| ${LABEL[$1]} / ${LABEL[$2]} | $(ratio "$(med "$1" 1)" "$(med "$2" 1)") |" \
    "$(ratio "$(med "$1" 2)" "$(med "$2" 2)") | $(ratio "$(med "$1" 3)" "$(med "$2" 3)") |"
done
cat <<EOF

## Deny path: one hot key (x-tenant-id: hot), 1 request per hour (nginx: 1r/m), every request refused with 429

| target | req/s | p50 ms | p99 ms | req/s per round | non-2xx / total |
|---|---:|---:|---:|---|---:|
EOF
for t in nginx tg3; do
  echo "| ${LABEL[$t]} | $(med "deny-$t" 1) | $(med "deny-$t" 2) | $(med "deny-$t" 3) | $(all "deny-$t") |" \
    "$(sum "deny-$t" 4) / $(sum "deny-$t" 5) |"
done
echo "| tollgate / nginx | $(ratio "$(med deny-tg3 1)" "$(med deny-nginx 1)") | | | | |"
cat <<EOF

## HTTP/2 cleartext (h2c, prior knowledge): h2load -t$THREADS -c$H2_CONNS -m$H2_STREAMS -n$H2_REQUESTS, one fixed tenant and user

| target | req/s | req/s per round | 2xx / total |
|---|---:|---|---:|
| nginx, 3 limit_req zones | $(med h2-nginx 1) | $(all h2-nginx) | $(sum h2-nginx 2) / $(sum h2-nginx 3) |
| tollgate, 3 tiers | $(med h2-tg3 1) | $(all h2-tg3) | $(sum h2-tg3 2) / $(sum h2-tg3 3) |
| tollgate / nginx | $(ratio "$(med h2-tg3 1)" "$(med h2-nginx 1)") | | |
EOF
