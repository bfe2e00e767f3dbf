#!/usr/bin/env bash
# `dualpath control serve|engines|shutdown`: the ready line, a Shutdown ends the run (exit 0),
# SIGTERM / SIGINT stop it (exit 143 / 130, "stopped by ..."), a second server on a taken address
# refuses ("address in use", exit 1) and the first keeps its socket, bad input is one line on
# stderr with exit 2. Issue 17: a TCP listener needs TLS options or --insecure (exit 2 naming the
# flags otherwise); with mutual TLS (certificates made here with the openssl CLI) a client without
# a certificate is refused and one with the CA's certificate is served. Waits are blocking reads
# of the server's stdout and `wait`, never sleeps.
set -u
bin=$1
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
srv_pid=""
cleanup() {
  [[ -n "$srv_pid" ]] && kill "$srv_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

bad() {  # want args...: must exit 2 with exactly one line on stderr naming the problem
  local want=$1
  shift
  "$bin" control serve "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [[ $rc -eq 2 ]] || fail "'$*' exited $rc, want 2: $(cat "$tmp/err")"
  [[ $(wc -l <"$tmp/err") -eq 1 ]] || fail "'$*' stderr is not one line: $(cat "$tmp/err")"
  grep -q -- "$want" "$tmp/err" || fail "'$*' stderr does not mention '$want': $(cat "$tmp/err")"
}
sock="unix:$tmp/sched.sock"
ok_engines=(--engines p0.0:prefill:p0,d0.0:decode:d0)
bad "unknown system 'fast'" --listen "$sock" --system fast "${ok_engines[@]}"
bad "unknown role 'prefil'" --listen "$sock" --engines p0.0:prefil:p0
bad "needs at least one prefill and one decode" --listen "$sock" --engines p0.0:prefill:p0
bad "at least 1 prefill and 1 decode" --listen "$sock"
bad "layers='x'" --listen "$sock" --model-spec layers=x "${ok_engines[@]}"
bad "--block-tokens = 0 is outside" --listen "$sock" --block-tokens 0 "${ok_engines[@]}"
bad "--heartbeat-s = 0 is outside" --listen "$sock" --heartbeat-s 0 "${ok_engines[@]}"
bad "--routing: unknown routing 'rr'" --listen "$sock" --routing rr "${ok_engines[@]}"
# Issue 19: upper bounds too (docs/control.md "Input ranges").
bad "--block-tokens = 4000000000 is outside" --listen "$sock" --block-tokens 4000000000 \
  "${ok_engines[@]}"
bad "--heartbeat-s = 1e+300 is outside" --listen "$sock" --heartbeat-s 1e300 "${ok_engines[@]}"
bad "--max-attempts = 4000000000 is outside" --listen "$sock" --max-attempts 4000000000 \
  "${ok_engines[@]}"
bad "--max-attempts = 0 is outside" --listen "$sock" --max-attempts 0 "${ok_engines[@]}"
bad "--expect-prefill = 2000000000 is outside" --listen "$sock" --expect-prefill 2000000000 \
  --expect-decode 1
bad "--unfinished-token-limit = 9000000000000000000 is outside" --listen "$sock" \
  --unfinished-token-limit 9000000000000000000 "${ok_engines[@]}"
[[ ! -e "$tmp/sched.sock" ]] || fail "bad input created the socket"

# engine: refused before it connects or allocates anything (docs/engine.md "Input ranges").
engine_bad() {  # want args...
  local want=$1
  shift
  "$bin" engine --role prefill --name p0.0 --node p0 --scheduler "$sock" --listen 127.0.0.1 \
    --store-root "$tmp" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [[ $rc -eq 2 ]] || fail "engine '$*' exited $rc, want 2: $(cat "$tmp/err")"
  [[ $(wc -l <"$tmp/err") -eq 1 ]] || fail "engine '$*' stderr is not one line: $(cat "$tmp/err")"
  grep -q -- "$want" "$tmp/err" || fail "engine '$*' stderr lacks '$want': $(cat "$tmp/err")"
}
engine_bad "--buffer-mib = 0 is outside" --buffer-mib 0
engine_bad "--buffer-mib = 18446744073709551615 is outside" --buffer-mib 18446744073709551615
engine_bad "--pool-mib = 100 is outside" --buffer-mib 256 --pool-mib 100
engine_bad "--hbm-tokens = 9000000000000000000 is outside" --hbm-tokens 9000000000000000000
engine_bad "--request-timeout-s = 1e+300 is outside" --request-timeout-s 1e300
engine_bad "--peer-timeout-s = 0 is outside" --peer-timeout-s 0
engine_bad "--read-depth" --read-depth 5000
# Issue 29: the KV substrate's flags.
engine_bad "--rack-node = 5000 is outside" --rack-node 5000
engine_bad "--kv-substrate rack-pool needs --rack-pool PATH" --kv-substrate rack-pool
# Issue 17: the metrics flags (docs/metrics.md), on both processes.
engine_bad "--metrics-addr 'nohost'" --metrics-addr nohost
engine_bad "--metrics-addr '127.0.0.1:70000'" --metrics-addr 127.0.0.1:70000
engine_bad "--metrics-wait-s = -1 is outside" --metrics-addr 127.0.0.1:0 --metrics-wait-s -1
bad "--metrics-addr 'fd:1'" --listen "$sock" --metrics-addr fd:1 "${ok_engines[@]}"
bad "--metrics-wait-s = 4000 is outside" --listen "$sock" --metrics-wait-s 4000 "${ok_engines[@]}"
bad "without store_root" --listen "$sock" --store-subdir basic "${ok_engines[@]}"
bad "must be one directory name" --listen "$sock" --store-root "$tmp" --store-subdir .. \
  "${ok_engines[@]}"
# Issue 17: TCP without TLS options and without --insecure; bad TLS option combinations.
bad "TCP listener 127.0.0.1:0 needs --tls-cert and --tls-key (plus --tls-ca for mutual TLS), or --insecure" \
  --listen 127.0.0.1:0 "${ok_engines[@]}"
bad "--tls-cert and --tls-key go together" --listen 127.0.0.1:0 --tls-cert "$0" "${ok_engines[@]}"
bad "--insecure cannot be combined" --listen 127.0.0.1:0 --insecure --tls-ca "$0" "${ok_engines[@]}"
bad "--tls-ca $tmp/none.pem does not exist" --listen 127.0.0.1:0 --tls-ca "$tmp/none.pem" \
  "${ok_engines[@]}"
engine_bad "EnginePeer: TCP listener 127.0.0.1:0 needs --tls-cert and --tls-key (plus --tls-ca for mutual TLS), or --insecure"
printf '0123456789abcdef0123\n' >"$tmp/token" && chmod 644 "$tmp/token"
engine_bad "must be owner-only" --transfer-token-file "$tmp/token"
engine_bad "must be one directory name" --insecure --store-subdir ../up

# serve (reads stdout through a FIFO: the ready line is a blocking read).
start() {  # [LISTEN [SERVE ARGS...]]: default $sock
  local listen=${1:-$sock}
  shift
  mkfifo "$tmp/fifo"
  "$bin" control serve --listen "$listen" --system basic --block-tokens 64 \
    --store-root "$tmp/store" --store-subdir basic "${ok_engines[@]}" "$@" \
    >"$tmp/fifo" 2>"$tmp/serve.err" &
  srv_pid=$!
  exec 3<"$tmp/fifo"
  read -r -t 60 line <&3 || fail "no ready line: $(cat "$tmp/serve.err")"
  [[ "$line" == "listening on "* ]] || fail "ready line is '$line'"
  [[ $listen == *:0 || "$line" == "listening on $listen" ]] || fail "ready line is '$line'"
  listening=${line#listening on }
  rm -f "$tmp/fifo"
}
finish() {  # [WANT]: wait for the server and check its exit status (default 0)
  local want=${1:-0}
  wait "$srv_pid"
  local rc=$?
  srv_pid=""
  exec 3<&-
  [[ $rc -eq $want ]] || fail "serve exited $rc, want $want: $(cat "$tmp/serve.err")"
}
second_refuses() {  # LISTEN [ARGS...]: a second server on it exits 1 with one "address in use" line
  local listen=$1
  shift
  "$bin" control serve --listen "$listen" --system basic "${ok_engines[@]}" "$@" >"$tmp/out2" \
    2>"$tmp/err2"
  local rc=$?
  [[ $rc -eq 1 ]] || fail "second serve on $listen exited $rc, want 1: $(cat "$tmp/err2")"
  # Besides the --insecure warning (TCP), one line.
  [[ $(grep -vc "not authenticated (--insecure)" "$tmp/err2") -eq 1 ]] ||
    fail "second serve stderr is not one line: $(cat "$tmp/err2")"
  grep -q "address in use" "$tmp/err2" || fail "second serve: no 'address in use': $(cat "$tmp/err2")"
  grep -q "listening" "$tmp/out2" && fail "second serve said it is listening"
}

start
"$bin" control engines --scheduler "$sock" >"$tmp/engines" || fail "engines failed"
grep -q '^id ' "$tmp/engines" || fail "no engines header: $(cat "$tmp/engines")"
[[ -d "$tmp/store/basic" ]] || fail "store directory not created"
"$bin" control shutdown --scheduler "$sock" || fail "shutdown failed"
finish  # no engine registered: the run is over as soon as Shutdown arrives
grep -q "run finished" "$tmp/serve.err" || fail "no summary line: $(cat "$tmp/serve.err")"

start
kill -TERM "$srv_pid"
finish 143
grep -q "stopped by SIGTERM" "$tmp/serve.err" || fail "no stopped line: $(cat "$tmp/serve.err")"

# Issue 19: two services on one address. The second refuses; the first keeps its socket file,
# still answers, and its own stop still works. Then the same on TCP (gRPC's SO_REUSEPORT off).
start
second_refuses "$sock"
[[ -S ${sock#unix:} ]] || fail "the second server removed the first one's socket"
"$bin" control engines --scheduler "$sock" >/dev/null || fail "first server no longer answers"
kill -INT "$srv_pid"  # a background job: bash ignores SIGINT for it, serve must not
finish 130
grep -q "stopped by SIGINT" "$tmp/serve.err" || fail "no SIGINT line: $(cat "$tmp/serve.err")"
start "127.0.0.1:0" --insecure
grep -q "127.0.0.1:0 is not authenticated (--insecure)" "$tmp/serve.err" ||
  fail "no --insecure warning: $(cat "$tmp/serve.err")"
second_refuses "$listening" --insecure
"$bin" control engines --scheduler "$listening" --insecure >/dev/null ||
  fail "first TCP server stopped answering"
"$bin" control shutdown --scheduler "$listening" --insecure || fail "shutdown over TCP failed"
finish

# Issue 17: mutual TLS. A CA, a server certificate for 127.0.0.1 and a client certificate, made
# now (no key is in the tree); a second CA's client certificate must be refused too.
pki() {  # DIR: ca.crt, server.{crt,key} (SAN IP:127.0.0.1), client.{crt,key}
  local d=$1
  mkdir -p "$d" && chmod 700 "$d"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=test-ca \
    -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null || fail "openssl: CA"
  local name
  for name in server client; do
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$name" \
      -addext "subjectAltName=IP:127.0.0.1" -keyout "$d/$name.key" -out "$d/$name.csr" \
      2>/dev/null || fail "openssl: $name request"
    openssl x509 -req -in "$d/$name.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
      -days 1 -copy_extensions copy -out "$d/$name.crt" 2>/dev/null || fail "openssl: $name cert"
    chmod 600 "$d/$name.key"
  done
}
pki "$tmp/pki"
pki "$tmp/other"
p=$tmp/pki
# An engine with a certificate but without the transfer token does not start either.
engine_bad "needs the cluster's token (--transfer-token-file), or --insecure" \
  --tls-cert "$p/server.crt" --tls-key "$p/server.key" --tls-ca "$p/ca.crt"
start "127.0.0.1:0" --tls-cert "$p/server.crt" --tls-key "$p/server.key" --tls-ca "$p/ca.crt"
for who in "--tls-ca $p/ca.crt" \
  "--tls-ca $p/ca.crt --tls-cert $tmp/other/client.crt --tls-key $tmp/other/client.key" \
  "--insecure"; do
  # shellcheck disable=SC2086  # $who is a list of flags
  "$bin" control engines --scheduler "$listening" $who >/dev/null 2>"$tmp/err" &&
    fail "mTLS server served a client with '$who'"
  grep -q "unavailable" "$tmp/err" || fail "client '$who': $(cat "$tmp/err")"
done
"$bin" control engines --scheduler "$listening" --tls-ca "$p/ca.crt" --tls-cert "$p/client.crt" \
  --tls-key "$p/client.key" >"$tmp/engines" || fail "mTLS client with the CA's certificate refused"
grep -q '^id ' "$tmp/engines" || fail "no engines header over mTLS: $(cat "$tmp/engines")"
"$bin" control shutdown --scheduler "$listening" --tls-ca "$p/ca.crt" --tls-cert "$p/client.crt" \
  --tls-key "$p/client.key" || fail "shutdown over mTLS failed"
finish
# Issue 17: --metrics-addr serves the Prometheus text format (linted by Debian's promtool when it
# is installed) and 404 elsewhere; after Shutdown the service exits once a scrape that started
# after its work ended was answered (scraped until it exits: counted, not slept).
mport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
murl="http://127.0.0.1:$mport"
start "$sock" --metrics-addr "127.0.0.1:$mport" --metrics-wait-s 60
curl -sf "$murl/metrics" >"$tmp/metrics" || fail "no /metrics"
grep -q '^dualpath_service_requests_total{system="basic",event="submitted"} 0$' "$tmp/metrics" ||
  fail "no submitted counter: $(cat "$tmp/metrics")"
grep -q '^# TYPE dualpath_request_ttft_seconds histogram$' "$tmp/metrics" || fail "no TTFT histogram"
if command -v promtool >/dev/null; then
  promtool check metrics <"$tmp/metrics" || fail "promtool check metrics: $(cat "$tmp/metrics")"
fi
[[ $(curl -s -o /dev/null -w '%{http_code}' "$murl/nope") == 404 ]] || fail "/nope is not 404"
"$bin" control shutdown --scheduler "$sock" || fail "shutdown failed"
while kill -0 "$srv_pid" 2>/dev/null; do curl -s "$murl/metrics" >/dev/null; done
finish
grep -q "final counts scraped" "$tmp/serve.err" || fail "no final scrape: $(cat "$tmp/serve.err")"

# A stale socket (its server gone) is replaced; a file that is not a socket is refused and kept.
echo data >"$tmp/not-a-socket"
"$bin" control serve --listen "unix:$tmp/not-a-socket" --system basic "${ok_engines[@]}" \
  >/dev/null 2>"$tmp/err" && fail "serve on a regular file succeeded"
[[ $(cat "$tmp/not-a-socket") == data ]] || fail "serve replaced a regular file"

"$bin" control engines --scheduler "unix:$tmp/nothing.sock" >/dev/null 2>"$tmp/err" &&
  fail "engines on a dead address succeeded"
[[ $(wc -l <"$tmp/err") -eq 1 ]] || fail "dead address stderr is not one line: $(cat "$tmp/err")"
echo "control_cli: ok"
