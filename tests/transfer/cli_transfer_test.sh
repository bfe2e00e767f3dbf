#!/usr/bin/env bash
# `dualpath bench transfer` end to end: bad input exits 2 with one line naming the problem; a
# small put and get between two processes over loopback TCP print the documented JSON.
# Synchronisation: the server's "listening on ADDR" line, read from a pipe (blocking read).
set -euo pipefail
BIN=$1
fail() { echo "FAIL: $*" >&2; exit 1; }

expect_usage() {  # expect_usage WHAT ARGS...: exit status 2 and a message containing WHAT
  local what=$1
  shift
  local err rc=0
  err=$("$BIN" bench transfer "$@" 2>&1 >/dev/null) || rc=$?
  [[ $rc == 2 ]] || fail "exit $rc (want 2) for: $*"
  [[ "$err" == *"$what"* ]] || fail "message '$err' does not name '$what'"
}
expect_usage "--size" --connect 127.0.0.1:1 --size 0
expect_usage "ADDR:PORT" --connect nocolon
expect_usage "exactly one" --listen 127.0.0.1:0 --connect 127.0.0.1:1
expect_usage "--class" --connect 127.0.0.1:1 --class medium
expect_usage "--batch" --connect 127.0.0.1:1 --batch 0
# Issue 19: every numeric flag has a range (docs/transfer.md "Input ranges"), checked before any
# memory is registered or a peer is contacted.
expect_usage "--size = 2147483648 is outside" --connect 127.0.0.1:1 --size 2147483648
expect_usage "--depth = 100000 is outside" --connect 127.0.0.1:1 --depth 100000
expect_usage "--size x --batch x --depth" --connect 127.0.0.1:1 --size 1073741824 --batch 1024
expect_usage "--iters = 18446744073709551615 is outside" --connect 127.0.0.1:1 \
  --iters 18446744073709551615
expect_usage "--warmup = 1000000000000 is outside" --connect 127.0.0.1:1 --warmup 1000000000000
expect_usage "--duration = 1e+300 is outside" --connect 127.0.0.1:1 --duration 1e300
expect_usage "--region-bytes = 1099511627776000 is outside" --listen 127.0.0.1:0 \
  --region-bytes 1099511627776000
expect_usage "--timeout-ms = -5 is outside" --connect 127.0.0.1:1 --timeout-ms -5
expect_usage "--spin-us = 1000000000 is outside" --connect 127.0.0.1:1 --spin-us 1000000000
expect_usage "--low-inflight = 18446744073709551615 is outside" --connect 127.0.0.1:1 \
  --low-inflight 18446744073709551615
expect_usage "--dscp-high = 64 is outside" --connect 127.0.0.1:1 --dscp-high 64

for op in put get; do
  exec 3< <(exec "$BIN" bench transfer --listen 127.0.0.1:0 --tls tcp --region-bytes 1048576)
  read -r line <&3 || fail "server printed nothing"
  addr=${line#listening on }
  [[ "$addr" == 127.0.0.1:* ]] || fail "unexpected server line '$line'"
  out=$("$BIN" bench transfer --connect "$addr" --tls tcp --op $op --size 4096 --batch 8 \
    --iters 20 --json)
  exec 3<&-
  for key in '"op":"'$op'"' '"size":4096' '"batch":8' '"gbps":' '"p50_us":' '"p99_us":'; do
    [[ "$out" == *"$key"* ]] || fail "JSON '$out' lacks $key"
  done
  gbps=$(sed -n 's/.*"gbps":\([0-9.]*\).*/\1/p' <<<"$out")
  awk -v g="$gbps" 'BEGIN { exit !(g > 0) }' || fail "gbps $gbps not positive"
done
wait
echo OK
