#!/usr/bin/env bash
# A fleet of three gateways sharing one Redis, side by side with the same three gateways on
# their own memory stores: throughput and Redis calls per request with sync = "exact" and
# sync = "lease", on a hot key and on 100 tenants x 10,000 users; then the fleet under
# steady over-limit load, its admissions against the exact GCRA bound. All on 127.0.0.1;
# Markdown report on stdout, progress on stderr.
#
#   sudo bench/fleet.sh
#   TOLLGATE_BIN=target/release/tollgate ROUNDS=1 DURATION=5 BOUND_DURATION=20 bench/fleet.sh
#
# Env: ROUNDS (3) alternating rounds, DURATION (10) seconds per run, CONNS (32 per gateway),
# WORKERS (1 per gateway: three gateways on the machine's cores), BOUND_DURATION (60),
# BOUND_RATE (1000 a second), BOUND_BURST (100), KEEP_TMP=1.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

ROUNDS=${ROUNDS:-3} DURATION=${DURATION:-10} CONNS=${CONNS:-32} WORKERS=${WORKERS:-1}
BOUND_DURATION=${BOUND_DURATION:-60} BOUND_RATE=${BOUND_RATE:-1000} BOUND_BURST=${BOUND_BURST:-100}
BIG=1000000   # rate and burst of the throughput runs: every request is admitted

need_tools nginx=nginx-light wrk=wrk redis-server=redis-server redis-cli=redis-tools curl=curl
find_tollgate
make_workdir

start_upstream
free_port REDIS_PORT
spawn redis redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no --dir "$WORK"
wait_port "$REDIS_PORT" redis "$LAST_PID"

# config PORT ADMIN STORE SYNC RATE BURST
config() {
  local store
  case $3 in
    memory) store=$'[store]\nbackend = "memory"' ;;
    *) store=$(printf '[store]\nbackend = "redis"\nurl = "redis://127.0.0.1:%s"\ntimeout = "200ms"\non_error = "deny"' "$REDIS_PORT") ;;
  esac
  local sync=""
  [[ $4 == lease ]] && sync='sync = "lease"'
  cat <<EOF
[server]
listen = "127.0.0.1:$1"
admin_listen = "127.0.0.1:$2"
access_log = false
drain_timeout = "1s"
workers = $WORKERS

$store

[upstreams.up]
targets = ["http://127.0.0.1:$UPSTREAM_PORT"]

EOF
  toml_policy tenant '"header:x-tenant-id"' "$5" 1s "$6" "$sync"
  toml_policy user '["header:x-tenant-id", "header:x-user-id"]' "$5" 1s "$6" "$sync"
  toml_policy endpoint '"route"' $BIG 1s $BIG "$sync"
  toml_route search /v1/search up '["tenant", "user", "endpoint"]'
  toml_route hot /v1/hot up '["tenant", "endpoint"]'
}

# fleet NAME STORE SYNC RATE BURST: three gateways of one kind; their ports in PORTS_<NAME>.
fleet() {
  local name=$1 ports=() i port admin
  for i in 1 2 3; do
    free_port port; free_port admin
    config "$port" "$admin" "$2" "$3" "$4" "$5" >"$WORK/$name-$i.toml"
    start_tollgate "$name-$i" "$WORK/$name-$i.toml" "$port"
    ports+=("$port")
  done
  printf -v "PORTS_$name" '%s' "${ports[*]}"
}
fleet memory memory exact $BIG $BIG
fleet exact redis exact $BIG $BIG
fleet lease redis lease $BIG $BIG

# The hot key: every request of the hot runs is tenant `big`'s.
cat >"$WORK/hot.lua" <<'EOF'
wrk.headers["x-tenant-id"] = "big"
EOF

# wrk_all PORTS PATH SCRIPT SECONDS OUT: one wrk -t1 per port, all at once, into OUT-1.out ….
wrk_all() {
  local i=0 port pids=() pid
  for port in $1; do
    i=$((i + 1))
    timeout $(($4 + 30)) wrk -t1 -c"$CONNS" -d"${4}s" -s "$3" "http://127.0.0.1:$port$2" >"$5-$i.out" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || die "wrk on $2 failed"; done
}

evalsha() { redis-cli -p "$REDIS_PORT" INFO commandstats | tr -d '\r' | awk -F'[=,:]' '/cmdstat_evalsha/ { print $3 }'; }

# run NAME PATH SCRIPT: wrk against the three gateways of NAME at once; appends
# "req/s calls-per-request non-2xx" (req/s summed over the three).
run() {
  local name=$1 path=$2 script=$3 ports before after
  ports=PORTS_$name
  redis-cli -p "$REDIS_PORT" CONFIG RESETSTAT >/dev/null
  before=$(evalsha); before=${before:-0}
  wrk_all "${!ports}" "$path" "$script" "$DURATION" "$WORK/wrk"
  after=$(evalsha); after=${after:-0}
  awk -v calls=$((after - before)) '
    /Requests\/sec/ { rps += $2 } / requests in / { n += $1 } /Non-2xx/ { bad += $NF }
    END { printf "%.0f %.4f %d\n", rps, (n > 0 ? calls / n : 0), bad }' "$WORK"/wrk-[123].out >>"$WORK/res-$name-${path//\//_}"
  log "$name $path: $(tail -1 "$WORK/res-$name-${path//\//_}")  (req/s calls/request non-2xx)"
}

log "warm-up"
for name in memory exact lease; do
  DURATION=2 run "$name" /v1/hot "$WORK/hot.lua" >/dev/null
  DURATION=2 run "$name" /v1/search "$BENCH_DIR/keys.lua" >/dev/null
done
rm -f "$WORK"/res-*
NAMES=(memory exact lease)
for r in $(seq "$ROUNDS"); do
  log "round $r/$ROUNDS"
  for i in 0 1 2; do
    name=${NAMES[$(((i + r) % 3))]}
    run "$name" /v1/hot "$WORK/hot.lua"
    run "$name" /v1/search "$BENCH_DIR/keys.lua"
  done
done

med() { awk -v c="$2" '{ print $c }' "$WORK/res-$1" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
all() { awk '{ printf "%s%s", (NR > 1 ? ", " : ""), $1 }' "$WORK/res-$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf (b > 0 ? "%.2f" : "n/a"), a / b }'; }

# ---- the bound: fresh fleets with a real limit, every gateway over it ---------------------
pkill_fleet() { # stop every gateway: the bound runs start fresh fleets with a real limit
  local pid
  for pid in "${PIDS[@]:2}"; do kill -TERM "$pid" 2>/dev/null || true; done
}
bound_run() { # NAME SYNC: a fresh fleet at BOUND_RATE/BOUND_BURST, all three over the limit
  local name=$1
  redis-cli -p "$REDIS_PORT" FLUSHALL >/dev/null
  fleet "$name" redis "$2" "$BOUND_RATE" "$BOUND_BURST"
  local ports=PORTS_$name start end
  redis-cli -p "$REDIS_PORT" CONFIG RESETSTAT >/dev/null
  start=$(date +%s.%N)
  wrk_all "${!ports}" /v1/hot "$WORK/hot.lua" "$BOUND_DURATION" "$WORK/bound"
  end=$(date +%s.%N)
  local calls; calls=$(evalsha)
  # Admitted = requests - non-2xx. Every admission happened between `start` (before the
  # first wrk started) and `end` (after the last one ended): exact GCRA admits at most
  # burst + rate x (end - start) in that span, a bound a few milliseconds generous.
  awk -v calls="${calls:-0}" -v rate="$BOUND_RATE" -v burst="$BOUND_BURST" -v d="$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')" '
    / requests in / { n += $1 } /Non-2xx/ { bad += $NF }
    END { ok = n - bad; b = burst + rate * d;
          printf "%d %d %.0f %.4f %.4f %.3f\n", n, ok, b, ok / b, (n > 0 ? calls / n : 0), d }' \
    "$WORK"/bound-[123].out >"$WORK/bound-$name"
  log "bound $name: $(cat "$WORK/bound-$name")  (requests admitted bound admitted/bound calls/request)"
}
pkill_fleet
sleep 2
bound_run bexact exact
bound_run blease lease

b() { awk -v c="$2" '{ print $c }' "$WORK/bound-$1"; }
cat <<EOF
# tollgate fleet benchmark: three gateways on one Redis

- $(date -u +'%F %T UTC'), $(nproc) CPUs, $(uname -sr), $(redis-server --version | awk '{ print "Redis", $3 }' | tr -d 'v='), $(wrk -v 2>&1 | awk 'NR == 1 { print $1, $2 }'), $("$TOLLGATE" --version)
- Three gateway processes of $WORKERS worker(s) each, one wrk -t1 -c$CONNS -d${DURATION}s per gateway at once,
  $ROUNDS alternating rounds, medians; req/s summed over the three. The memory fleet's gateways each
  keep their own limits (the speed a fleet could have without sharing); the Redis fleets share one
  local redis-server. Calls per request: EVALSHA calls counted by Redis / requests served.
  Everything shares the machine's $(nproc) cores: quote the ratios.

## Throughput (limits a million a second: everything admitted)

| route | memory req/s | exact req/s | lease req/s | exact / memory | lease / memory | calls/request exact | calls/request lease |
|---|---:|---:|---:|---:|---:|---:|---:|
| /v1/hot: one hot tenant + endpoint | $(med memory-_v1_hot 1) | $(med exact-_v1_hot 1) | $(med lease-_v1_hot 1) | $(ratio "$(med exact-_v1_hot 1)" "$(med memory-_v1_hot 1)") | $(ratio "$(med lease-_v1_hot 1)" "$(med memory-_v1_hot 1)") | $(med exact-_v1_hot 2) | $(med lease-_v1_hot 2) |
| /v1/search: 100 tenants x 10,000 users, 3 tiers | $(med memory-_v1_search 1) | $(med exact-_v1_search 1) | $(med lease-_v1_search 1) | $(ratio "$(med exact-_v1_search 1)" "$(med memory-_v1_search 1)") | $(ratio "$(med lease-_v1_search 1)" "$(med memory-_v1_search 1)") | $(med exact-_v1_search 2) | $(med lease-_v1_search 2) |

Per round (req/s): memory hot $(all memory-_v1_hot); exact hot $(all exact-_v1_hot); lease hot $(all lease-_v1_hot);
memory search $(all memory-_v1_search); exact search $(all exact-_v1_search); lease search $(all lease-_v1_search).

## The bound: one key at $BOUND_RATE a second, burst $BOUND_BURST, all three gateways over the limit for ${BOUND_DURATION}s

The bound is exact GCRA's for the span from before the first wrk started to after the last
one ended (seconds in the last column): burst + rate x span.

| fleet | requests | admitted | exact bound | admitted / bound | Redis calls per request | span s |
|---|---:|---:|---:|---:|---:|---:|
| exact | $(b bexact 1) | $(b bexact 2) | $(b bexact 3) | $(b bexact 4) | $(b bexact 5) | $(b bexact 6) |
| lease | $(b blease 1) | $(b blease 2) | $(b blease 3) | $(b blease 4) | $(b blease 5) | $(b blease 6) |
EOF
