#!/usr/bin/env bash
# The fleet's bound under Redis faults: three gateways sharing a Redis Sentinel set (a master,
# one replica, three sentinels) or a single Redis, two keys driven far over their rate from
# all three gateways at once (a hot key, burst 20, and a deep key, burst 400, both 100 a
# second), one fault injected 5 s into each run, admissions counted against the exact GCRA
# bound of the run's span. Markdown report on stdout, progress on stderr. About 8 minutes.
#
#   sudo bench/faults.sh
#   TOLLGATE_BIN=target/release/tollgate MODES="exact" ON_ERROR=local bench/faults.sh
#
# Env: DURATION (20) seconds per run, MODES ("exact lease"), EXTRAS ("cluster ack local":
# the Cluster, replica_ack and on_error = "local" runs), ON_ERROR (deny), CONNS (4 per
# wrk), KEEP_TMP=1. docs/reliability.md explains the figures and records a run.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

DURATION=${DURATION:-20} MODES=${MODES-exact lease} EXTRAS=${EXTRAS-cluster ack local} ON_ERROR=${ON_ERROR:-deny} CONNS=${CONNS:-4}
RATE=100 HOT_BURST=20 DEEP_BURST=400 FAULT_AT=5

need_tools nginx=nginx-light wrk=wrk redis-server=redis-server redis-cli=redis-tools curl=curl
find_tollgate
make_workdir
start_upstream

# ---- Redis topologies ---------------------------------------------------------------------
# redis NAME PORT ARGS...: a redis-server on PORT; its pid in REDIS_PID_<NAME>.
redis() {
  local name=$1 port=$2; shift 2
  mkdir -p "$WORK/$name"
  spawn "redis-$name" redis-server --bind 127.0.0.1 --port "$port" --dir "$WORK/$name" --save "" "$@"
  wait_port "$port" "redis-$name" "$LAST_PID"
  printf -v "REDIS_PID_$name" '%s' "$LAST_PID"
}

sentinel_set() { # [REPLICAS]: a master, its replicas (1), three sentinels; SENTINELS is the TOML list
  free_port M_PORT; free_port R_PORT; R2_PORT=none
  redis master "$M_PORT" --appendonly no
  redis replica "$R_PORT" --appendonly no --replicaof 127.0.0.1 "$M_PORT"
  if [[ ${1:-1} == 2 ]]; then
    free_port R2_PORT
    redis replica2 "$R2_PORT" --appendonly no --replicaof 127.0.0.1 "$M_PORT"
  fi
  SENTINEL_PORTS=() SENTINELS=""
  local i port
  for i in 1 2 3; do
    free_port port
    cat >"$WORK/sentinel-$i.conf" <<EOF
port $port
bind 127.0.0.1
sentinel monitor mymaster 127.0.0.1 $M_PORT 2
sentinel down-after-milliseconds mymaster 1000
sentinel failover-timeout mymaster 5000
EOF
    spawn "sentinel-$i" redis-server "$WORK/sentinel-$i.conf" --sentinel
    wait_port "$port" "sentinel-$i" "$LAST_PID"
    SENTINEL_PORTS+=("$port")
    SENTINELS+="${SENTINELS:+, }\"redis://127.0.0.1:$port\""
  done
  until [[ $(redis-cli -p "$R_PORT" INFO replication | tr -d '\r' | awk -F: '/master_link_status/ { print $2 }') == up ]]; do sleep 0.2; done
}

# Before each Sentinel run: every Sentinel names the same master, which says it is one and
# has its replicas (at most 60 s), so each fault starts from a settled set.
settle_sentinels() {
  [[ -n ${SENTINEL_PORTS[0]:-} ]] || return 0
  local _ port ports m
  for _ in $(seq 300); do
    ports=""
    for port in "${SENTINEL_PORTS[@]}"; do
      ports+="$(redis-cli -p "$port" SENTINEL get-master-addr-by-name mymaster 2>/dev/null | sed -n 2p) "
    done
    m=${ports%% *}
    if [[ -n $m && $ports == "$m $m $m " ]] &&
       redis-cli -p "$m" INFO replication 2>/dev/null | tr -d '\r' | grep -q '^role:master' &&
       [[ $(redis-cli -p "$m" INFO replication | tr -d '\r' | awk -F: '/^connected_slaves/ { print $2 }') -ge 1 ]]; then
      return 0
    fi
    sleep 0.2
  done
  log "the Sentinel set did not settle within 60 s (masters named: $ports)"
}

master_port() { redis-cli -p "${SENTINEL_PORTS[0]}" SENTINEL get-master-addr-by-name mymaster | sed -n 2p; }

# ---- the fleet ----------------------------------------------------------------------------
# config PORT ADMIN SYNC STORE-LINES (EXTRA_STORE: more [store] lines, ON_ERROR as set)
config() {
  cat <<EOF
[server]
listen = "127.0.0.1:$1"
admin_listen = "127.0.0.1:$2"
access_log = false
drain_timeout = "1s"
workers = 1

[store]
backend = "redis"
timeout = "200ms"
on_error = "$ON_ERROR"
$4
${EXTRA_STORE:-}

[upstreams.up]
targets = ["http://127.0.0.1:$UPSTREAM_PORT"]

EOF
  local sync=""
  [[ $3 == lease ]] && sync='sync = "lease"'
  toml_policy hot '"header:x-key"' $RATE 1s $HOT_BURST "$sync"
  toml_policy deep '"header:x-key"' $RATE 1s $DEEP_BURST "$sync"
  toml_route hot /hot up '["hot"]'
  toml_route deep /deep up '["deep"]'
}

# fleet SYNC STORE-LINES: three gateways; GW_PORTS, GW_ADMINS, GW_PIDS, GW_CONFIGS.
fleet() {
  GW_PORTS=() GW_ADMINS=() GW_PIDS=() GW_CONFIGS=()
  local i port admin
  for i in 1 2 3; do
    free_port port; free_port admin
    config "$port" "$admin" "$1" "$2" >"$WORK/gw-$i.toml"
    start_tollgate "gw-$i" "$WORK/gw-$i.toml" "$port"
    GW_PORTS+=("$port") GW_ADMINS+=("$admin") GW_PIDS+=("$LAST_PID") GW_CONFIGS+=("$WORK/gw-$i.toml")
  done
  for admin in "${GW_ADMINS[@]}"; do
    until curl -fs "http://127.0.0.1:$admin/readyz" >/dev/null; do sleep 0.2; done
  done
}
stop_all() { # every gateway and Redis of the topology (not the upstream)
  local pid
  for pid in "${PIDS[@]:1}"; do kill -KILL "$pid" 2>/dev/null || true; done
  PIDS=("${PIDS[0]}")
  sleep 0.5
}
store_errors() { # summed over the fleet's /metrics
  local admin total=0 n
  for admin in "${GW_ADMINS[@]}"; do
    n=$(curl -fs "http://127.0.0.1:$admin/metrics" | awk '/^tollgate_store_errors_total/ { s += $NF } END { print s + 0 }' || echo 0)
    total=$((total + n))
  done
  echo "$total"
}

# ---- faults (each run 5 s into a run) --------------------------------------------------------
fault_none() { :; }
fault_failover() { redis-cli -p "${SENTINEL_PORTS[0]}" SENTINEL FAILOVER mymaster >/dev/null; }
fault_failover_cut() { # and one gateway's connection to the old master cut 0.5 s later
  local old; old=$(master_port)
  fault_failover
  sleep 0.5
  # A gateway's connection: not redis-cli's own, not a Sentinel's (they name theirs).
  local id; id=$(redis-cli -p "$old" CLIENT LIST TYPE normal | awk '$0 !~ /cmd=client/ && $0 !~ /name=sentinel/ { sub("id=", "", $1); print $1; exit }')
  [[ -n $id ]] && redis-cli -p "$old" CLIENT KILL ID "$id" >/dev/null || true
}
fault_kill_master() { local port pid; port=$(master_port); pid=$(pid_of_port "$port"); kill -KILL "$pid"; }
fault_freeze() { local pid; pid=$(pid_of_port "$(master_port)"); kill -STOP "$pid"; sleep 3; kill -CONT "$pid"; }
fault_gateway_kill() { kill -KILL "${GW_PIDS[2]}"; sleep 2; start_tollgate gw-3b "${GW_CONFIGS[2]}" "${GW_PORTS[2]}"; GW_PIDS[2]=$LAST_PID; }
fault_gateway_pause() { kill -STOP "${GW_PIDS[2]}"; sleep 3; kill -CONT "${GW_PIDS[2]}"; }
# A Redis Cluster of three masters (REPLICAS 1: each with a replica), node timeout 2 s;
# CLUSTER_PORTS and CLUSTER_URLS (the TOML list). ARGS: more redis-server arguments.
cluster_set() {
  local replicas=$1; shift
  local n=$((3 * (replicas + 1))) i port nodes=()
  CLUSTER_PORTS=() CLUSTER_URLS=""
  for i in $(seq "$n"); do
    free_port port
    rm -rf "$WORK/cluster$i"   # a node must start empty (no nodes.conf of an earlier Cluster)
    redis "cluster$i" "$port" --appendonly no --cluster-enabled yes --cluster-node-timeout 2000 \
      --cluster-config-file "$WORK/cluster$i/nodes.conf" "$@"
    CLUSTER_PORTS+=("$port") nodes+=("127.0.0.1:$port")
    CLUSTER_URLS+="${CLUSTER_URLS:+, }\"redis://127.0.0.1:$port\""
  done
  redis-cli --cluster create "${nodes[@]}" --cluster-replicas "$replicas" --cluster-yes >"$WORK/cluster-create.log" 2>&1 ||
    die "redis-cli --cluster create failed: $(tail -3 "$WORK/cluster-create.log")"
  for _ in $(seq 100); do
    [[ $(redis-cli -p "${CLUSTER_PORTS[0]}" CLUSTER INFO | tr -d '\r' | awk -F: '/cluster_state/ { print $2 }') == ok ]] && return
    sleep 0.2
  done
  die "the Cluster did not become ok"
}

# The master holding the deep key's state (the run's key, written by its first requests).
fault_kill_deep_master() {
  local port pid i
  for i in "${!CLUSTER_PORTS[@]}"; do
    port=${CLUSTER_PORTS[$i]}
    if redis-cli -p "$port" ROLE | head -1 | grep -q master &&
       [[ -n $(redis-cli -p "$port" --scan --pattern 'tg:*:deep:*' | head -1) ]]; then
      pid=REDIS_PID_cluster$((i + 1))
      pid=${!pid}
      kill -KILL "$pid"
      log "killed the deep key's master 127.0.0.1:$port"
      return
    fi
  done
  log "warning: no master holds the deep key"
}

fault_restart() { # the single Redis restarted with the same arguments (SIGTERM: an AOF is flushed)
  kill -TERM "$SINGLE_PID"; wait "$SINGLE_PID" 2>/dev/null || true
  redis single "$SINGLE_PORT" "${SINGLE_ARGS[@]}"; SINGLE_PID=$REDIS_PID_single
}
pid_of_port() {
  case $1 in
    "$M_PORT") echo "$REDIS_PID_master" ;;
    "$R_PORT") echo "$REDIS_PID_replica" ;;
    *) echo "$REDIS_PID_replica2" ;;
  esac
}

# run LABEL FAULT: both keys from all three gateways for DURATION s, FAULT at FAULT_AT s.
run() {
  local label=$1 fault=$2 key="k-$RANDOM-$RANDOM" i start end errors0 errors1
  cat >"$WORK/key.lua" <<EOF
wrk.headers["x-key"] = "$key"
EOF
  settle_sentinels
  errors0=$(store_errors)
  start=$(date +%s.%N)
  local pids=()
  for i in 0 1 2; do
    timeout $((DURATION + 30)) wrk -t1 -c"$CONNS" -d"${DURATION}s" -s "$WORK/key.lua" "http://127.0.0.1:${GW_PORTS[$i]}/hot" >"$WORK/hot-$i.out" 2>&1 &
    pids+=($!)
    timeout $((DURATION + 30)) wrk -t1 -c"$CONNS" -d"${DURATION}s" -s "$WORK/key.lua" "http://127.0.0.1:${GW_PORTS[$i]}/deep" >"$WORK/deep-$i.out" 2>&1 &
    pids+=($!)
  done
  sleep "$FAULT_AT"
  "fault_$fault"
  for i in "${pids[@]}"; do wait "$i" || true; done
  end=$(date +%s.%N)
  errors1=$(store_errors)
  local span; span=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }')
  # Admitted = answered - non-2xx (429 refusals and 503 store errors alike).
  local hot deep
  hot=$(awk '/ requests in / { n += $1 } /Non-2xx/ { bad += $NF } END { print n - bad }' "$WORK"/hot-[012].out)
  deep=$(awk '/ requests in / { n += $1 } /Non-2xx/ { bad += $NF } END { print n - bad }' "$WORK"/deep-[012].out)
  awk -v l="$label" -v hot="$hot" -v deep="$deep" -v r=$RATE -v hb=$HOT_BURST -v db=$DEEP_BURST -v s="$span" -v e=$((errors1 - errors0)) '
    BEGIN { bh = hb + r * s; bd = db + r * s
            printf "| %s | %d | %.0f | %+.0f | %d | %.0f | %+.0f | %s | %s |\n", l, hot, bh, hot - bh, deep, bd, deep - bd, (e >= 0 ? e : "n/a"), s }' >>"$WORK/report"
  log "$(tail -1 "$WORK/report")"
  RUNS=$((${RUNS:-0} + 1))
  if [[ ${KEEP_TMP:-0} == 1 ]]; then # each run's gateway logs, kept beside the report
    for i in "$WORK"/gw-*.log; do cp "$i" "$WORK/run-$RUNS-${i##*/}"; done
  fi
}

: >"$WORK/report"
for mode in $MODES; do
  log "Sentinel, $mode"
  sentinel_set
  fleet "$mode" "sentinels = [$SENTINELS]
master = \"mymaster\""
  run "Sentinel, $mode: none" none
  run "Sentinel, $mode: SENTINEL FAILOVER" failover
  run "Sentinel, $mode: failover + one gateway's connection cut 0.5 s later" failover_cut
  run "Sentinel, $mode: master frozen 3 s (SIGSTOP)" freeze
  run "Sentinel, $mode: a gateway SIGKILLed, restarted 2 s later" gateway_kill
  run "Sentinel, $mode: a gateway paused 3 s" gateway_pause
  run "Sentinel, $mode: master kill -9" kill_master
  stop_all
  for aof in no yes; do
    log "single Redis, appendonly $aof, $mode"
    free_port SINGLE_PORT
    SINGLE_ARGS=(--appendonly "$aof" --appendfsync always)
    redis single "$SINGLE_PORT" "${SINGLE_ARGS[@]}"; SINGLE_PID=$REDIS_PID_single
    SENTINEL_PORTS=()
    fleet "$mode" "url = \"redis://127.0.0.1:$SINGLE_PORT\""
    run "single, $mode: restarted (appendonly $aof)" restart
    stop_all
  done
done

# Redis Cluster: the deep key's master killed, with a replica (failover in the node
# timeout) and without one (cluster-require-full-coverage no: its slots stay down).
if [[ " $EXTRAS " == *" cluster "* ]]; then
  for replicas in 1 0; do
    log "Cluster, $replicas replica(s) per master, exact"
    cluster_set "$replicas" --cluster-require-full-coverage no
    SENTINEL_PORTS=()
    fleet exact "url = [$CLUSTER_URLS]"
    run "Cluster ($replicas replica per master), exact: the deep key's master kill -9" kill_deep_master
    stop_all
  done
fi

# What the settings of docs/reliability.md change: replica_ack against the failovers,
# on_error = "local" (each gateway a third of each limit) against the outages.
if [[ " $EXTRAS " == *" ack "* ]]; then
  for replicas in 1 2; do
    log "Sentinel with $replicas replicas, exact, replica_ack = 1"
    sentinel_set $replicas
    EXTRA_STORE="replica_ack = 1" fleet exact "sentinels = [$SENTINELS]
master = \"mymaster\""
    run "Sentinel ($replicas replicas), exact, replica_ack = 1: SENTINEL FAILOVER" failover
    run "Sentinel ($replicas replicas), exact, replica_ack = 1: master kill -9" kill_master
    stop_all
  done
fi
if [[ " $EXTRAS " == *" local "* ]]; then
  log "Sentinel, exact, on_error = local"
  sentinel_set
  saved=$ON_ERROR ON_ERROR=local
  fleet exact "sentinels = [$SENTINELS]
master = \"mymaster\""
  run "Sentinel, exact, on_error = local: master frozen 3 s" freeze
  run "Sentinel, exact, on_error = local: master kill -9" kill_master
  ON_ERROR=$saved
  stop_all
fi

cat <<EOF
# tollgate under Redis faults

- $(date -u +'%F %T UTC'), $(nproc) CPUs, $(uname -sr), $(redis-server --version | awk '{ print "Redis", $3 }' | tr -d 'v='), $("$TOLLGATE" --version)
- Three gateways (one worker each), \`on_error = "$ON_ERROR"\` unless the run says otherwise, \`timeout = "200ms"\`; two keys at $RATE a second,
  burst $HOT_BURST (hot) and $DEEP_BURST (deep), each driven by one \`wrk -t1 -c$CONNS\` per gateway for ${DURATION} s
  (far over the rate); the fault ${FAULT_AT} s in. Sentinel: a master, one replica, three sentinels
  (down-after 1 s). Bound: burst + rate × span (the span from before the first wrk started
  to after the last ended). Admitted: answered minus non-2xx.

| run | hot admitted | hot bound | hot over | deep admitted | deep bound | deep over | store errors (on_error) | span s |
|---|---:|---:|---:|---:|---:|---:|---:|---:|
$(cat "$WORK/report")
EOF
