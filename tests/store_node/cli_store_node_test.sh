#!/usr/bin/env bash
# `dualpath store node` end to end against a real etcd (Debian's /usr/bin/etcd on free localhost
# ports): bad input exits 2 naming the flag; a node registers in etcd and creates its DRAM tier
# file; a second node with the same id is refused (exit 1) while the first lives; SIGTERM makes the
# first deregister, remove its file and exit 143.
# Synchronisation: the node's "store node N rpc ..." line, read from a pipe (blocking read), and
# bounded polls of etcd.
set -euo pipefail
BIN=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v etcd >/dev/null && command -v etcdctl >/dev/null || {
  echo "SKIP: etcd/etcdctl not installed (scripts/setup.sh)"; exit 0; }

DIR=$(mktemp -d /tmp/dualpath-store-node-cli-XXXXXX)
ETCD_PID=
NODE_PID=
cleanup() {
  local rc=$?
  for pid in $NODE_PID $ETCD_PID; do
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$DIR"
  exit "$rc"
}
trap cleanup EXIT

expect_usage() {  # expect_usage WHAT ARGS...: exit status 2 and a message containing WHAT
  local what=$1
  shift
  local err rc=0
  err=$("$BIN" store node "$@" 2>&1 >/dev/null) || rc=$?
  [[ $rc == 2 ]] || fail "exit $rc (want 2) for: $*: $err"
  [[ "$err" == *"$what"* ]] || fail "message '$err' does not name '$what'"
}
COMMON=(--etcd 127.0.0.1:1 --transfer-listen 127.0.0.1:0 --listen 127.0.0.1:0 --shm-dir "$DIR")
expect_usage "--dram-mib" --cluster c --id 1 --dram-mib 0 --insecure "${COMMON[@]}"
expect_usage "--ttl-s" --cluster c --id 1 --dram-mib 1 --ttl-s 0.5 --insecure "${COMMON[@]}"
expect_usage "cluster" --cluster 'bad name' --id 1 --dram-mib 1 --insecure "${COMMON[@]}"
expect_usage "watermarks" --cluster c --id 1 --dram-mib 1 --high-watermark 0.5 \
  --low-watermark 0.9 --insecure "${COMMON[@]}"
expect_usage "--transfer-token-file" --cluster c --id 1 --dram-mib 1 "${COMMON[@]}" \
  --tls-cert /nonexistent --tls-key /nonexistent
[[ -z $(ls "$DIR") ]] || fail "bad input left files: $(ls "$DIR")"

read -r CPORT PPORT < <(python3 -c '
import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*[x.getsockname()[1] for x in s])')
etcd --data-dir "$DIR/etcd" --listen-client-urls "http://127.0.0.1:$CPORT" \
  --advertise-client-urls "http://127.0.0.1:$CPORT" --listen-peer-urls "http://127.0.0.1:$PPORT" \
  --initial-advertise-peer-urls "http://127.0.0.1:$PPORT" \
  --initial-cluster "default=http://127.0.0.1:$PPORT" >"$DIR/etcd.log" 2>&1 &
ETCD_PID=$!
ctl() { ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$CPORT" "$@"; }
for _ in $(seq 300); do ctl endpoint health >/dev/null 2>&1 && break; sleep 0.1; done
ctl endpoint health >/dev/null 2>&1 || fail "etcd did not come up: $(tail -5 "$DIR/etcd.log")"

ARGS=(--cluster clitest --etcd "127.0.0.1:$CPORT" --id 4 --dram-mib 8 --shm-dir "$DIR"
      --transfer-listen 127.0.0.1:0 --listen 127.0.0.1:0 --insecure --ttl-s 2)
exec 3< <(exec "$BIN" store node "${ARGS[@]}" 2>"$DIR/node.err")
NODE_PID=$!
read -r -u 3 line || fail "no output from the node: $(cat "$DIR/node.err")"
[[ $line =~ ^store\ node\ 4\ rpc\ (127.0.0.1:[0-9]+)\ transfer\ 127.0.0.1:[0-9]+\ shm\ (.*)$ ]] ||
  fail "unexpected line: $line"
RPC=${BASH_REMATCH[1]}
SHM=${BASH_REMATCH[2]}
[[ $SHM == "$DIR/dualpath-store-clitest-4" ]] || fail "shm path $SHM"
[[ -f $SHM && $(stat -c %s "$SHM") == 8388608 && $(stat -c %a "$SHM") == 600 ]] ||
  fail "tier file: $(ls -l "$SHM")"
[[ $(ctl get --print-value-only /dualpath/clitest/nodes/store-node-4) == "$RPC" ]] ||
  fail "etcd does not list the node under its rpc address"

rc=0
err=$("$BIN" store node "${ARGS[@]}" 2>&1 >/dev/null) || rc=$?
[[ $rc == 1 && $err == *"held by a live store node"* ]] || fail "second node: exit $rc: $err"
[[ -f $SHM ]] || fail "the refused node removed the live node's file"

kill -TERM "$NODE_PID"
rc=0
wait "$NODE_PID" || rc=$?
NODE_PID=
[[ $rc == 143 ]] || fail "node exit $rc after SIGTERM (want 143): $(cat "$DIR/node.err")"
grep -q "stopped by SIGTERM" "$DIR/node.err" || fail "no stop line: $(cat "$DIR/node.err")"
[[ ! -e $SHM ]] || fail "tier file left behind"
[[ -z $(ctl get --print-value-only /dualpath/clitest/nodes/store-node-4) ]] ||
  fail "still registered after SIGTERM"
echo "PASS"
