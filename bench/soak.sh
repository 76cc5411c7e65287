#!/usr/bin/env bash
# Soak test (minutes, not for CI): tollgate in front of an nginx upstream on 127.0.0.1 under
# wrk for DURATION seconds with key churn (bench/keys.lua with TENANTS=1000, USERS=1000000, so
# nearly every request brings a new user key), a SIGHUP every 10 s (alternating between two
# configs whose user tier differs, so each reload really swaps the policies), and tollgate's
# RSS (VmRSS in /proc/PID/status) and the tollgate_keys_tracked gauge sampled every 5 s. Tiers run user -> endpoint -> tenant and
# the tenant tier denies part of the load, so denials roll back freshly charged user keys.
#
#   sudo bench/soak.sh                        # builds tollgate with cargo build --release
#   TOLLGATE_BIN=path/to/tollgate DURATION=60 bench/soak.sh
#
# Env: DURATION (300, at least 60) seconds, THREADS (2), CONNS (64), KEEP_TMP=1 keeps configs and logs.
#
# Pass/fail (exit 1 on failure, 0 otherwise):
#   - RSS bound: the last sample must not exceed 1.5 x the sample taken at 25% of the run
#     (user keys idle after at most 6 s and are swept every second, so the key population
#     reaches its steady state within seconds; growth after that is a leak);
#   - tollgate must still run at the end, log one "configuration reloaded" per SIGHUP sent,
#     and log no refused reload and no panic.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

DURATION=${DURATION:-300} THREADS=${THREADS:-2} CONNS=${CONNS:-64}
[[ $DURATION -ge 60 ]] || die "DURATION must be at least 60 s (the 25% sample must be past the ramp-up)"

need_tools nginx=nginx-light wrk=wrk curl=curl
find_tollgate
make_workdir
start_upstream
free_port TG_PORT; free_port ADMIN_PORT

soak_config() { # USER_LIMIT
  cat <<EOF
[server]
listen = "127.0.0.1:$TG_PORT"
admin_listen = "127.0.0.1:$ADMIN_PORT"
access_log = false
drain_timeout = "1s"

[upstreams.up]
targets = ["http://127.0.0.1:$UPSTREAM_PORT"]

[policies.user]      # T = 6 s (or 5 s): each user key lives at most a few seconds
key = ["header:x-tenant-id", "header:x-user-id"]
limit = $1
period = "1m"
burst = 100

[policies.endpoint]
key = "route"
limit = 1_000_000
period = "1s"
burst = 1_000_000

[policies.tenant]    # 1000 tenants x 40/s: at more than 40,000 req/s the excess is denied
key = "header:x-tenant-id"
limit = 40
period = "1s"
burst = 80

[[routes]]
name = "search"
path = "/"
upstream = "up"
policies = ["user", "endpoint", "tenant"]
EOF
}
soak_config 10 >"$WORK/a.toml"
soak_config 12 >"$WORK/b.toml"
cp "$WORK/a.toml" "$WORK/tollgate.toml"
start_tollgate tollgate "$WORK/tollgate.toml" "$TG_PORT"
TG_PID=$LAST_PID

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$TG_PID/status" 2>/dev/null || echo 0; }
metrics() { curl -s -m 2 "http://127.0.0.1:$ADMIN_PORT/metrics" || true; }
keys() { metrics | awk '/^tollgate_keys_tracked / { print $2 }'; }
log "soak: ${DURATION}s, wrk -t$THREADS -c$CONNS, tollgate pid $TG_PID"
spawn wrk env TENANTS=1000 USERS=1000000 timeout $((DURATION + 30)) \
  wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" -s "$BENCH_DIR/keys.lua" "http://127.0.0.1:$TG_PORT/v1/search"
WRK_PID=$LAST_PID

SAMPLES=("0 $(rss_kb) $(keys)") HUPS=0
for ((t = 5; t <= DURATION; t += 5)); do
  sleep 5
  kill -0 "$TG_PID" 2>/dev/null || die "tollgate died at about ${t}s: $(tail -5 "$WORK/tollgate.log")"
  SAMPLES+=("$t $(rss_kb) $(keys)")
  if ((t % 10 == 0 && t < DURATION)); then
    if ((t / 10 % 2)); then cp "$WORK/b.toml" "$WORK/tollgate.toml"; else cp "$WORK/a.toml" "$WORK/tollgate.toml"; fi
    kill -HUP "$TG_PID"; HUPS=$((HUPS + 1))
  fi
done
wait "$WRK_PID" || true
sleep 1

# ---- report ----------------------------------------------------------------------------
printf '%s\n' "${SAMPLES[@]}" >"$WORK/rss"
read -r FIRST LAST MAX BASE < <(awk -v q=$((DURATION / 4)) '
  { rss[NR] = $2; if ($2 > max) max = $2; if (base == "" && $1 >= q) base = $2 }
  END { print rss[1], rss[NR], max, base }' "$WORK/rss")
RELOADS=$(grep -c 'configuration reloaded' "$WORK/tollgate.log" || true)
REFUSED=$(grep -c 'reload refused' "$WORK/tollgate.log" || true)
PANICS=$(grep -ci 'panic' "$WORK/tollgate.log" || true)
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }

echo "# tollgate soak: ${DURATION}s, key churn, SIGHUP every 10 s"
echo
echo "wrk: $(grep -E 'requests in|Requests/sec|Non-2xx|Socket errors' "$WORK/wrk.log" | sed 's/^ *//' | paste -sd ';' - | sed 's/;/; /g')"
echo
echo "tollgate at the end (metrics):"
echo
metrics | grep -E '^tollgate_(decisions_total|upstream_duration_seconds_count|config_reloads_total|store_errors_total)' |
  sed 's/^/    /' || true
echo
echo "| t (s) | RSS (MiB) | keys tracked |"
echo "|---:|---:|---:|"
awk '{ printf "| %d | %.1f | %s |\n", $1, $2 / 1024, $3 }' "$WORK/rss"
echo
echo "RSS first $(mib "$FIRST") MiB, at 25% $(mib "$BASE") MiB, last $(mib "$LAST") MiB, max $(mib "$MAX") MiB."
echo "SIGHUPs sent $HUPS, reloads logged $RELOADS, refused $REFUSED, panics $PANICS."

FAIL=0
if ((LAST * 2 > BASE * 3)); then echo "FAIL: RSS still growing: last > 1.5 x the value at 25% of the run"; FAIL=1; fi
kill -0 "$TG_PID" 2>/dev/null || { echo "FAIL: tollgate is not running at the end"; FAIL=1; }
((RELOADS >= HUPS && REFUSED == 0 && PANICS == 0)) || { echo "FAIL: reload or panic problem, see above"; FAIL=1; }
((FAIL == 0)) && echo "PASS"
exit "$FAIL"
