# shellcheck shell=bash
# Shared helpers for bench/proxy.sh and bench/soak.sh (sourced, not run).
# Everything listens on 127.0.0.1; every process started here is stopped on exit.

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(dirname "$BENCH_DIR")
PIDS=()
USED_PORTS=" "

log() { echo "[$(date +%T)] $*" >&2; }
die() { log "error: $*"; exit 1; }

# Install what is missing (Debian/Ubuntu, as root). Arguments: command=package pairs.
need_tools() {
  local missing=() pair
  for pair in "$@"; do
    command -v "${pair%%=*}" >/dev/null || missing+=("${pair#*=}")
  done
  [[ ${#missing[@]} -eq 0 ]] && return
  [[ $EUID -eq 0 ]] || die "missing ${missing[*]}: run as root to install them"
  log "installing ${missing[*]}"
  apt-get update -qq >&2
  local pkg
  for pkg in "${missing[@]}"; do
    # nginx-light is the small build; where it does not exist, plain nginx.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" >&2 ||
      { [[ $pkg == nginx-light ]] && DEBIAN_FRONTEND=noninteractive \
          apt-get install -y -qq --no-install-recommends nginx >&2; } ||
      die "cannot install $pkg"
  done
}

# TOLLGATE: $TOLLGATE_BIN if set, else a fresh `cargo build --release`.
find_tollgate() {
  if [[ -n ${TOLLGATE_BIN:-} ]]; then
    TOLLGATE=$TOLLGATE_BIN
  else
    log "building tollgate (cargo build --release)"
    (cd "$REPO_DIR" && cargo build --release >&2) || die "cargo build failed"
    TOLLGATE=$REPO_DIR/target/release/tollgate
  fi
  [[ -x $TOLLGATE ]] || die "no tollgate binary at $TOLLGATE"
}

# A temp dir for configs and logs, removed on exit (KEEP_TMP=1 keeps it).
make_workdir() {
  WORK=$(mktemp -d /tmp/tollgate-bench.XXXXXX)
  chmod 755 "$WORK"
  mkdir -p "$WORK/tmp"
  trap cleanup EXIT
  trap 'exit 130' INT TERM
}

cleanup() {
  set +e
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for _ in $(seq 50); do   # at most 5 s for a graceful stop, then SIGKILL
    local alive=0
    for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [[ $alive -eq 0 ]] && break
    sleep 0.1
  done
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  wait 2>/dev/null
  if [[ ${KEEP_TMP:-0} == 1 ]]; then log "logs kept in $WORK"; else rm -rf "$WORK"; fi
}

# spawn NAME CMD...: run CMD in the background, output to $WORK/NAME.log.
spawn() {
  local name=$1; shift
  "$@" >"$WORK/$name.log" 2>&1 &
  PIDS+=($!)
  LAST_PID=$!
}

# free_port VAR: a port on 127.0.0.1 that nothing listens on and we have not handed out,
# below the kernel's ephemeral range (where outgoing connections take their local ports).
free_port() {
  local p low
  read -r low _ </proc/sys/net/ipv4/ip_local_port_range
  ((low > 11000)) || low=61000
  for _ in $(seq 500); do
    p=$((10000 + RANDOM % (low - 10000)))
    [[ $USED_PORTS == *" $p "* ]] && continue
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
    USED_PORTS+="$p "
    printf -v "$1" %s "$p"
    return
  done
  die "no free port found"
}

# wait_port PORT NAME PID: until PORT accepts connections (10 s at most).
wait_port() {
  local _
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return
    kill -0 "$3" 2>/dev/null || die "$2 exited at start-up: $(tail -5 "$WORK/$2.log" 2>/dev/null)"
    sleep 0.1
  done
  die "$2 did not listen on 127.0.0.1:$1 within 10 s"
}

# The nginx main-context and http-context lines every instance here shares.
nginx_head() { # NAME WORKERS
  cat <<EOF
worker_processes $2;
daemon off;
pid $WORK/$1.pid;
error_log $WORK/$1.err warn;
events { worker_connections 8192; }
EOF
}
nginx_http_common() {
  cat <<EOF
    access_log off;
    keepalive_requests 1000000;   # default 1000 would close client connections mid-run
    client_body_temp_path $WORK/tmp/body;
    proxy_temp_path $WORK/tmp/proxy;
    fastcgi_temp_path $WORK/tmp/fastcgi;
    uwsgi_temp_path $WORK/tmp/uwsgi;
    scgi_temp_path $WORK/tmp/scgi;
EOF
}

# start_upstream: nginx answering `200 ok` on UPSTREAM_PORT, one worker.
start_upstream() {
  free_port UPSTREAM_PORT
  { nginx_head upstream 1
    echo "http {"; nginx_http_common
    echo "    server { listen 127.0.0.1:$UPSTREAM_PORT; location / { return 200 \"ok\\n\"; } }"
    echo "}"; } >"$WORK/upstream.conf"
  spawn upstream nginx -p "$WORK/" -c "$WORK/upstream.conf"
  wait_port "$UPSTREAM_PORT" upstream "$LAST_PID"
}

# toml_policy NAME KEY LIMIT PERIOD BURST [EXTRA-LINE]: a [policies.NAME] table (KEY as TOML).
toml_policy() {
  printf '[policies.%s]\nkey = %s\nlimit = %s\nperiod = "%s"\nburst = %s\n%s\n' "$1" "$2" "$3" "$4" "$5" "${6:-}"
}
# toml_route NAME PATH UPSTREAM POLICIES: a [[routes]] table (POLICIES as a TOML list).
toml_route() { printf '[[routes]]\nname = "%s"\npath = "%s"\nupstream = "%s"\npolicies = %s\n\n' "$@"; }

# one_worker_head PORT: a tollgate's [server] (one worker on PORT, no access log), [store]
# and the upstream `up`: what every one-worker config of the benches starts with.
one_worker_head() {
  cat <<EOF
[server]
listen = "127.0.0.1:$1"
access_log = false
drain_timeout = "1s"
workers = 1

[store]
max_keys = 2_000_000

[upstreams.up]
targets = ["http://127.0.0.1:$UPSTREAM_PORT"]

EOF
}

# one_worker_toml PORT: the tollgate bench/instructions.sh and bench/cpu.sh measure, one
# worker on PORT in front of the upstream: /v1/search with 3 tiers that admit everything,
# /v1/open with none, /deny refusing tenant `hot` (1 an hour).
one_worker_toml() {
  local big=1000000
  one_worker_head "$1"
  toml_policy tenant '"header:x-tenant-id"' $big 1s $big
  toml_policy endpoint '"route"' $big 1s $big
  toml_policy user '["header:x-tenant-id", "header:x-user-id"]' $big 1s $big
  toml_policy hot '"header:x-tenant-id"' 1 1h 1
  toml_route search /v1/search up '["tenant", "endpoint", "user"]'
  toml_route open /v1/open up '[]'
  toml_route deny /deny up '["hot"]'
}

# start_tollgate NAME CONFIG PORT: run tollgate with CONFIG, wait for PORT.
start_tollgate() {
  "$TOLLGATE" check --config "$2" >/dev/null 2>"$WORK/$1.check" ||
    die "tollgate check rejected $2: $(cat "$WORK/$1.check")"
  spawn "$1" "$TOLLGATE" run --config "$2"
  wait_port "$3" "$1" "$LAST_PID"
}

# FLOOR: $FLOOR_BIN if set, else `cargo build --release --example floor` (bench/floor.rs).
find_floor() {
  if [[ -n ${FLOOR_BIN:-} ]]; then
    FLOOR=$FLOOR_BIN
  else
    log "building the bare-hyper floor (cargo build --release --example floor)"
    (cd "$REPO_DIR" && cargo build --release --example floor >&2) || die "cargo build failed"
    FLOOR=$REPO_DIR/target/release/examples/floor
  fi
  [[ -x $FLOOR ]] || die "no floor binary at $FLOOR"
}

# --- The rate limit service (bench/rls.sh, bench/rls-peers.sh) ---

# The ShouldRateLimit calls, framed, written field by field into DIR: one.bin (domain
# `one`, tenant=acme), three.bin (domain `edge`: tenant=acme; tenant=acme,
# path=/v1/search; user=ann), refused.bin (domain `closed`, tenant=acme), race.msg
# (domain `race`, tenant=racer, unframed, for a grpcio client).
rls_calls() {
  python3 - "$1" <<'PY'
import sys
def field(tag, payload): return bytes([tag << 3 | 2, len(payload)]) + payload
def entry(k, v): return field(1, field(1, k.encode()) + field(2, v.encode()))
def msg(domain, ds): return field(1, domain.encode()) + b"".join(field(2, b"".join(entry(k, v) for k, v in d)) for d in ds)
def framed(m): return b"\x00" + len(m).to_bytes(4, "big") + m
w = sys.argv[1]
open(f"{w}/one.bin", "wb").write(framed(msg("one", [[("tenant", "acme")]])))
open(f"{w}/three.bin", "wb").write(framed(msg("edge", [[("tenant", "acme")], [("tenant", "acme"), ("path", "/v1/search")], [("user", "ann")]])))
open(f"{w}/refused.bin", "wb").write(framed(msg("closed", [[("tenant", "acme")]])))
open(f"{w}/race.msg", "wb").write(msg("race", [[("tenant", "racer")]]))
PY
}

# rls_rules: the [[rls.rules]] of those calls' domains (policies tenant, search, user,
# closed and race, defined by the caller).
rls_rules() {
  local d
  for d in 'one tenant tenant' 'edge tenant tenant' 'edge user user' 'closed tenant closed' 'race tenant race'; do
    set -- $d
    printf '[[rls.rules]]\ndomain = "%s"\ndescriptor = ["%s"]\npolicy = "%s"\n' "$1" "$2" "$3"
  done
  printf '[[rls.rules]]\ndomain = "edge"\ndescriptor = ["tenant", { path = "/v1/search" }]\npolicy = "search"\n'
}

# rls_load NAME PID PORT BODY: h2load's ShouldRateLimit calls (BODY a file of WORK),
# CONNS x STREAMS in flight, a 2 s warm-up then DURATION counted; appends "user_us
# system_us calls_per_s" of process PID to WORK/res/NAME.
rls_load() {
  local u0 s0 u1 s1 n tick
  local args=(-t1 -c"$CONNS" -m"$STREAMS" -H 'content-type: application/grpc' -H 'te: trailers' -d "$WORK/$4")
  local url="http://127.0.0.1:$3/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
  tick=$(getconf CLK_TCK)
  timeout 60 h2load "${args[@]}" -D 2 "$url" >/dev/null
  read -r u0 s0 < <(awk '{ print $14, $15 }' "/proc/$2/stat")
  n=$(timeout $((DURATION + 60)) h2load "${args[@]}" -D "$DURATION" "$url" | awk '/^status codes:/ { print $3 }')
  read -r u1 s1 < <(awk '{ print $14, $15 }' "/proc/$2/stat")
  [[ ${n:-0} -gt 0 ]] || die "no calls answered in $1"
  awk -v n="$n" -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v t="$tick" -v d="$DURATION" \
    'BEGIN { printf "%.2f %.2f %.0f\n", u / t / n * 1e6, s / t / n * 1e6, n / d }' >>"$WORK/res/$1"
  log "$1: $(tail -1 "$WORK/res/$1") (user, system µs per call; calls/s)"
}

# med NAME COLUMN: the median of COLUMN of WORK/res/NAME.
rls_med() { sort -n -k"$2" "$WORK/res/$1" | awk -v c="$2" '{ v[NR] = $c } END { print v[int((NR + 1) / 2)] }'; }

# The peers the benchmarks compare tollgate with (nginx, HAProxy, Pingora, Envoy).
# shellcheck source=bench/peers.sh
source "$BENCH_DIR/peers.sh"
