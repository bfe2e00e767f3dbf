#!/usr/bin/env bash
# `dualpath control serve|engines|shutdown`: the ready line, a Shutdown ends the run (exit 0),
# SIGTERM ends it too (exit 0), bad input is one line on stderr with exit 2. Waits are blocking
# reads of the server's stdout and `wait`, never sleeps.
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
bad "block_tokens" --listen "$sock" --block-tokens 0 "${ok_engines[@]}"
bad "heartbeat_s" --listen "$sock" --heartbeat-s 0 "${ok_engines[@]}"
bad "without store_root" --listen "$sock" --store-subdir basic "${ok_engines[@]}"

# serve (reads stdout through a FIFO: the ready line is a blocking read).
start() {
  mkfifo "$tmp/fifo"
  "$bin" control serve --listen "$sock" --system basic --block-tokens 64 \
    --store-root "$tmp/store" --store-subdir basic "${ok_engines[@]}" \
    >"$tmp/fifo" 2>"$tmp/serve.err" &
  srv_pid=$!
  exec 3<"$tmp/fifo"
  read -r -t 60 line <&3 || fail "no ready line: $(cat "$tmp/serve.err")"
  [[ "$line" == "listening on $sock" ]] || fail "ready line is '$line'"
  rm -f "$tmp/fifo"
}
finish() {  # wait for the server and check its exit status
  wait "$srv_pid"
  local rc=$?
  srv_pid=""
  exec 3<&-
  [[ $rc -eq 0 ]] || fail "serve exited $rc: $(cat "$tmp/serve.err")"
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
finish
grep -q "stopped" "$tmp/serve.err" || fail "no stopped line: $(cat "$tmp/serve.err")"

"$bin" control engines --scheduler "unix:$tmp/nothing.sock" >/dev/null 2>"$tmp/err" &&
  fail "engines on a dead address succeeded"
[[ $(wc -l <"$tmp/err") -eq 1 ]] || fail "dead address stderr is not one line: $(cat "$tmp/err")"
echo "control_cli: ok"
