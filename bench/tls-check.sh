#!/usr/bin/env bash
# TLS check: a throwaway CA and server certificates for localhost/127.0.0.1 (ECDSA P-256 and
# RSA 2048), tollgate with [server.tls] in front of `tollgate echo`, then curl (ALPN h2 and
# http/1.1, TLS 1.2 and 1.3 accepted, TLS 1.0 and 1.1 refused, stalled handshakes dropped) and
# testssl.sh (protocols, server defaults, preferences, ciphers per protocol, vulnerabilities).
# All on 127.0.0.1. Prints a Markdown report on stdout, progress on stderr; exits 1 when a curl
# expectation fails or testssl reports a vulnerability. See docs/security-checks.md.
#
#   sudo bench/tls-check.sh                          # builds tollgate with cargo build --release
#   TOLLGATE_BIN=path/to/tollgate KEEP_TMP=1 bench/tls-check.sh > tls.md
#
# Env: KEYS ("ecdsa rsa") which server keys to test, TESTSSL (1; 0 skips testssl.sh),
# TESTSSL_ARGS (the checks testssl runs, default "-p -S -P -E -U"), TESTSSL_OUT (a folder to
# copy testssl's full text output and CSV into, per key), KEEP_TMP=1 keeps the whole work dir
# (certificates, configs, curl -v logs, tollgate logs, testssl's output and CSV).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

KEYS=${KEYS:-"ecdsa rsa"} TESTSSL=${TESTSSL:-1} TESTSSL_OUT=${TESTSSL_OUT:-}
TESTSSL_ARGS=${TESTSSL_ARGS:-"-p -S -P -E -U"}
HANDSHAKE_TIMEOUT=10   # seconds: tollgate's fixed TLS handshake timeout (docs/configuration.md)

tools=(openssl=openssl curl=curl)
[[ $TESTSSL == 1 ]] && tools+=(testssl=testssl.sh)
need_tools "${tools[@]}"
find_tollgate
make_workdir
mkdir -p "$WORK/res"
cd "$WORK"   # not the config's folder: tollgate must resolve the TLS paths against the config's
FAILED=0

# ---- certificates ----------------------------------------------------------------------
ossl() { openssl "$@" >>"$WORK/openssl.log" 2>&1 || die "openssl $1 failed: $(tail -3 "$WORK/openssl.log")"; }
log "throwaway CA (ECDSA P-256)"
ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 400 \
  -subj "/CN=tollgate tls-check CA" -keyout "$WORK/ca.key" -out "$WORK/ca.pem" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"

# server_cert KIND DIR: DIR/certs/server.pem (leaf only) and DIR/certs/server.key in the
# key's traditional format (ecdsa: SEC1 "EC PRIVATE KEY", rsa: PKCS#1 "RSA PRIVATE KEY"),
# plus DIR/certs/server.p8.key, the same key as PKCS#8 ("PRIVATE KEY").
server_cert() {
  local kind=$1 d=$2/certs usage=digitalSignature
  mkdir -p "$d"
  case $kind in
    ecdsa) ossl ecparam -name prime256v1 -genkey -noout -out "$d/server.key" ;;
    rsa) ossl genrsa -traditional -out "$d/server.key" 2048; usage+=",keyEncipherment" ;;
    *) die "unknown key kind $kind (ecdsa or rsa)" ;;
  esac
  ossl pkcs8 -topk8 -nocrypt -in "$d/server.key" -out "$d/server.p8.key"
  ossl req -new -key "$d/server.key" -subj "/CN=localhost" -out "$d/server.csr"
  printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,$usage" \
    "extendedKeyUsage=serverAuth" "subjectAltName=DNS:localhost,IP:127.0.0.1" >"$d/ext.cnf"
  ossl x509 -req -in "$d/server.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca.key" -CAcreateserial \
    -days 365 -extfile "$d/ext.cnf" -out "$d/server.pem"
}

# ---- upstream --------------------------------------------------------------------------
free_port ECHO_PORT
spawn echo "$TOLLGATE" echo --listen "127.0.0.1:$ECHO_PORT"
wait_port "$ECHO_PORT" echo "$LAST_PID"

gw_config() { # PORT KEYFILE
  cat <<EOF
[server]
listen = "127.0.0.1:$1"
drain_timeout = "1s"

[server.tls]
cert = "certs/server.pem"   # relative to this file's folder
key = "certs/$2"

[upstreams.up]
targets = ["http://127.0.0.1:$ECHO_PORT"]

[[routes]]
name = "all"
path = "/"
upstream = "up"
EOF
}

# ---- checks ----------------------------------------------------------------------------
# check KIND NAME EXPECTED GOT: one row of the curl table; GOT must equal EXPECTED.
check() {
  local res=PASS
  [[ $4 == "$3" ]] || { res=FAIL; FAILED=1; }
  echo "| $2 | $3 | $4 | $res |" >>"$WORK/res/$1.checks"
  log "$1: $2: expected $3, got $4: $res"
}

# tls_curl NAME CURL-ARGS...: curl -v to the gateway; sets CODE ("status http-version"),
# RC (curl's exit code), ALPN, PROTO and CIPHER from curl's verbose output.
tls_curl() {
  local name=$1; shift
  local err="$WORK/res/$KIND.$name.curl"
  RC=0
  CODE=$(curl -sv -o /dev/null -m 10 -w '%{http_code} %{http_version}' "$@" 2>"$err") || RC=$?
  ALPN=$(sed -n 's/^\* ALPN[:,] server accepted \(to use \)\{0,1\}//p' "$err" | head -1)
  read -r PROTO CIPHER < <(sed -n 's/^\* SSL connection using \([^ ]*\) \/ \(.*\)$/\1 \2/p' "$err" | head -1) || true
  ALERT=$(sed -n 's/^\* TLSv[0-9.]* (IN), TLS alert, \(.*\) ([0-9]*):$/\1/p' "$err" | head -1)
  ERRMSG=$(grep '^\* ' "$err" | grep -v 'Closing connection' | tail -1 | sed 's/^\* //; s/|/\\|/g')
  HELLO_SENT=no; grep -q '(OUT), TLS handshake, Client hello' "$err" && HELLO_SENT=yes
  return 0
}

# stalled_handshake PORT: connect, send nothing; does tollgate close within the handshake timeout?
stalled_handshake() {
  local wait_s=$((HANDSHAKE_TIMEOUT + 5))
  # shellcheck disable=SC2016  # the inner script gets its values as arguments
  timeout $((wait_s + 5)) bash -c '
    exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 2
    start=$SECONDS
    read -r -t "$2" -u 3 _ || true   # returns at EOF (closed by the server) or at the timeout
    echo $((SECONDS - start))' _ "$1" "$wait_s" || echo "error"
}

run_kind() {
  KIND=$1
  local dir="$WORK/$KIND" port
  log "== $KIND"
  server_cert "$KIND" "$dir"
  free_port port
  gw_config "$port" server.key >"$dir/gw.toml"
  gw_config "$port" server.p8.key >"$dir/gw-pkcs8.toml"
  local fmt; fmt=$(head -1 "$dir/certs/server.key" | sed 's/-----BEGIN \(.*\)-----/\1/')
  : >"$WORK/res/$KIND.checks"

  # Key formats: the traditional one and PKCS#8 must both load (tollgate check reads them).
  for f in gw.toml gw-pkcs8.toml; do
    local what="tollgate check, key $fmt"; [[ $f == gw-pkcs8.toml ]] && what="tollgate check, key PRIVATE KEY (PKCS#8)"
    if "$TOLLGATE" check --config "$dir/$f" >"$WORK/res/$KIND.$f.check" 2>&1; then
      check "$KIND" "$what" accepted accepted
    else
      check "$KIND" "$what" accepted "refused: $(head -1 "$WORK/res/$KIND.$f.check")"
    fi
  done
  # The working directory is $WORK, not $dir: the relative cert paths must resolve against $dir.
  start_tollgate "tg-$KIND" "$dir/gw.toml" "$port"
  TG_PID=$LAST_PID
  local url="https://localhost:$port/" ca=(--cacert "$WORK/ca.pem")

  tls_curl h2 "${ca[@]}" --http2 "$url"
  check "$KIND" "curl --http2: status, HTTP version" "200 2" "$CODE"
  check "$KIND" "curl --http2: ALPN" h2 "${ALPN:-none}"
  echo "$PROTO $CIPHER" >"$WORK/res/$KIND.default"
  tls_curl h1 "${ca[@]}" --http1.1 "$url"
  check "$KIND" "curl --http1.1: status, HTTP version" "200 1.1" "$CODE"
  check "$KIND" "curl --http1.1: ALPN" http/1.1 "${ALPN:-none}"
  tls_curl tls13 "${ca[@]}" --tlsv1.3 --tls-max 1.3 "$url"
  check "$KIND" "curl --tlsv1.3 --tls-max 1.3" "200 TLSv1.3" "${CODE%% *} ${PROTO:-none}"
  echo "TLSv1.3 $CIPHER" >"$WORK/res/$KIND.negotiated"
  tls_curl tls12 "${ca[@]}" --tlsv1.2 --tls-max 1.2 "$url"
  check "$KIND" "curl --tlsv1.2 --tls-max 1.2" "200 TLSv1.2" "${CODE%% *} ${PROTO:-none}"
  echo "TLSv1.2 $CIPHER" >>"$WORK/res/$KIND.negotiated"
  # TLS 1.0/1.1: OpenSSL 3 refuses them by itself at its default security level, so lower it
  # (SECLEVEL=0): the ClientHello then really goes out and only the server can refuse it.
  local v
  for v in 1.0 1.1; do
    tls_curl "tls${v/./}" "${ca[@]}" --tlsv"$v" --tls-max "$v" --ciphers 'DEFAULT@SECLEVEL=0' "$url"
    local got="connected: ${CODE%% *}"
    if [[ $RC -ne 0 ]]; then
      got="refused"
      [[ $HELLO_SENT == yes ]] || got="client sent no ClientHello (check not conclusive)"
    fi
    check "$KIND" "curl --tlsv$v --tls-max $v (ClientHello sent: $HELLO_SENT; server alert: ${ALERT:-none}; curl exit $RC)" refused "$got"
  done
  tls_curl ip "${ca[@]}" "https://127.0.0.1:$port/"
  check "$KIND" "curl https://127.0.0.1 (no SNI: default cert, IP SAN)" "200" "${CODE%% *}"
  tls_curl plain "http://127.0.0.1:$port/"
  local plain="no HTTP answer"; [[ ${CODE%% *} != 000 ]] && plain="HTTP ${CODE%% *}"
  check "$KIND" "cleartext http:// on the TLS port (curl exit $RC: $ERRMSG)" "no HTTP answer" "$plain"
  local el stalled; el=$(stalled_handshake "$port")
  if ! [[ $el =~ ^[0-9]+$ ]]; then stalled="check failed"
  elif ((el >= HANDSHAKE_TIMEOUT + 5)); then stalled="still open after ${el}s"
  elif ((el >= HANDSHAKE_TIMEOUT - 1 && el <= HANDSHAKE_TIMEOUT + 1)); then stalled="closed after ~${HANDSHAKE_TIMEOUT}s"
  else stalled="closed after ${el}s"; fi
  check "$KIND" "TCP connect, then silence (no ClientHello)" "closed after ~${HANDSHAKE_TIMEOUT}s" "$stalled"

  if [[ $TESTSSL == 1 ]]; then
    log "$KIND: testssl $TESTSSL_ARGS against 127.0.0.1:$port (at most 600 s)"
    # shellcheck disable=SC2086  # TESTSSL_ARGS is a list of options
    timeout 600 testssl --quiet --color 0 --warnings batch --ip one --add-ca "$WORK/ca.pem" \
      --csvfile "$WORK/res/$KIND.testssl.csv" $TESTSSL_ARGS "127.0.0.1:$port" \
      >"$WORK/res/$KIND.testssl.txt" 2>&1 || log "$KIND: testssl exited with $?"
    [[ -s $WORK/res/$KIND.testssl.csv ]] || { log "$KIND: testssl wrote no CSV"; FAILED=1; }
  fi
  kill -0 "$TG_PID" 2>/dev/null || die "tollgate ($KIND) died: $(tail -5 "$WORK/tg-$KIND.log")"
  grep -qi panic "$WORK/tg-$KIND.log" && { log "$KIND: tollgate logged a panic"; FAILED=1; }
  return 0
}

for k in $KEYS; do run_kind "$k"; done

# ---- report ----------------------------------------------------------------------------
# csv FILE: testssl CSV rows as "id<TAB>severity<TAB>finding<TAB>cve" (fields are quoted; a
# finding may contain commas but not the sequence ",")
csv() { awk -F'","' 'NR > 1 { sub(/^"/, "", $1); sub(/"$/, "", $7); printf "%s\t%s\t%s\t%s\n", $1, $4, $5, $6 }' "$1"; }

cat <<EOF
# tollgate TLS check

- $(date -u +'%F %T UTC'), $(nproc) CPUs, $(uname -sr), $("$TOLLGATE" --version), $(curl --version | head -1 | awk '{ print $1, $2, $5 }'),
  $(openssl version | awk '{ print $1, $2 }')$([[ $TESTSSL == 1 ]] && echo ", testssl $(testssl --version 2>/dev/null | grep -o 'testssl *[0-9][0-9.]*' | head -1 | awk '{ print $2 }')")
- Throwaway CA (ECDSA P-256); server certificates for DNS:localhost and IP:127.0.0.1, leaf only in
  the chain file; tollgate \`[server.tls]\` with paths relative to the config file, upstream \`tollgate echo\`.
EOF
for k in $KEYS; do
  kfile="$WORK/$k/certs/server.key"
  cat <<EOF

## $k server key: $(case $k in ecdsa) echo "ECDSA P-256" ;; rsa) echo "RSA 2048" ;; esac), file format $(head -1 "$kfile" | sed 's/-----BEGIN \(.*\)-----/\1/')

| check | expected | got | result |
|---|---|---|---|
EOF
  cat "$WORK/res/$k.checks"
  echo
  echo "curl, default settings: $(cat "$WORK/res/$k.default")."
  [[ $TESTSSL == 1 && -s $WORK/res/$k.testssl.csv ]] || continue
  c="$WORK/res/$k.testssl.csv"
  echo
  echo "### testssl.sh ($TESTSSL_ARGS)"
  echo
  echo "| protocol | testssl says |"
  echo "|---|---|"
  csv "$c" | awk -F'\t' '$1 ~ /^(SSLv2|SSLv3|TLS1|TLS1_1|TLS1_2|TLS1_3|ALPN_HTTP2|ALPN|NPN)$/ { printf "| %s | %s |\n", $1, $3 }'
  echo
  echo "Cipher suites offered, per protocol (-E), and the one negotiated with testssl's client (-P):"
  echo
  echo "| protocol | offered (IANA names, server's list order) | negotiated |"
  echo "|---|---|---|"
  for p in 1_2 1_3; do
    offered=$(csv "$c" | awk -F'\t' -v p="cipher-tls$p" 'index($1, p "_") == 1 { n = split($3, f, " "); s = s (s ? ", " : "") f[n] } END { print s }')
    pv="TLSv${p/_/.}"
    neg=$(csv "$c" | awk -F'\t' -v id="cipher_order_$pv" '$1 == id { print $3 }' | sed 's/ at TLSv.*//')
    echo "| TLS ${p/_/.} | ${offered:-none} | ${neg:-n/a} |"
  done
  echo
  vulns=$(csv "$c" | awk -F'\t' '$4 != "" && $2 !~ /^(OK|INFO)$/')
  vcount=$(csv "$c" | awk -F'\t' '$4 != ""' | wc -l)
  if [[ -z $vulns ]] && ! grep -q 'VULNERABLE' "$WORK/res/$k.testssl.txt"; then
    echo "Vulnerability checks (-U): $vcount checks with a CVE, none VULNERABLE or NOT ok."
  else
    FAILED=1
    echo "Vulnerability checks (-U): **findings**:"
    echo
    csv "$c" | awk -F'\t' '$4 != "" && $2 !~ /^(OK|INFO)$/ { printf "- %s (%s): %s\n", $1, $2, $3 }'
    grep 'VULNERABLE' "$WORK/res/$k.testssl.txt" | sed 's/^ */- /'
  fi
  echo
  echo "Session resumption (-S): $(sed -n 's/^ *Session Resumption *//p' "$WORK/res/$k.testssl.txt" | head -1)." \
    "testssl took $(grep -o 'Done .*\[ *[0-9]*s\]' "$WORK/res/$k.testssl.txt" | grep -o '[0-9]*s\]' | tr -d ']')."
  echo
  echo "Every other testssl finding above OK/INFO (test-setup artefacts included):"
  echo
  echo "| id | severity | finding |"
  echo "|---|---|---|"
  csv "$c" | awk -F'\t' '$4 == "" && $2 !~ /^(OK|INFO)$/ && $1 != "engine_problem" { printf "| %s | %s | %s |\n", $1, $2, $3 }'
  echo
  echo "Lines of testssl's text output with \"NOT ok\" or \"VULNERABLE\":"
  echo
  grep -E 'NOT ok|VULNERABLE' "$WORK/res/$k.testssl.txt" | sed 's/^ */    /' || echo "    (none)"
done
echo
if [[ $FAILED == 0 ]]; then echo "Result: PASS"; else echo "Result: FAIL (see the rows marked FAIL and the findings above)"; fi
if [[ -n $TESTSSL_OUT && $TESTSSL == 1 ]]; then
  mkdir -p "$TESTSSL_OUT" && cp "$WORK"/res/*.testssl.* "$TESTSSL_OUT"/ &&
    { echo; echo "Full testssl output and CSV copied to $TESTSSL_OUT."; }
elif [[ ${KEEP_TMP:-0} == 1 && $TESTSSL == 1 ]]; then
  echo; echo "Full testssl output and CSV: $WORK/res/*.testssl.{txt,csv}"
fi
exit "$FAILED"
