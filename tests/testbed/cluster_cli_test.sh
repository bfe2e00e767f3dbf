#!/usr/bin/env bash
# `dualpath cluster` input handling that needs no root and no cluster: bad input exits 2 with one
# line naming what was wrong; without root, up/down refuse clearly (exit 1); commands on a
# cluster that is not up say so.
set -u
bin=$(realpath "$1")
fail() {
  echo "FAIL: $*"
  exit 1
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export DUALPATH_TESTBED_ROOT=$tmp/root # nothing exists here

# expect RC PATTERN ARGS...: exit status RC and stderr matching PATTERN.
expect() {
  local rc=$1 pattern=$2
  shift 2
  "$bin" "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  [[ $got == "$rc" ]] || fail "dualpath $* exited $got, want $rc: $(cat "$tmp/err")"
  grep -q -- "$pattern" "$tmp/err" || fail "dualpath $*: stderr lacks '$pattern': $(cat "$tmp/err")"
}

expect 2 "--pd '0P1D'" cluster up --pd 0P1D
expect 2 "--pd '1P1X'" cluster up --pd 1P1X
expect 2 "rate '400'" cluster up --stor-rate 400
expect 2 "rate '5tbit'" cluster up --comp-rate 5tbit
expect 2 "cluster name 'a.b'" cluster up --name a.b
expect 2 "cluster name 'a.b'" cluster down --name a.b
expect 1 "is not up" cluster status --name nosuch
expect 1 "is not up" cluster get --name nosuch nodes
expect 2 "ADDR:PORT" cluster blast --to 10.0.0.1 --seconds 1
expect 2 "give --seconds or --bytes" cluster blast --to 127.0.0.1:9
expect 2 "DSCP\|dscp" cluster blast --to 127.0.0.1:9 --seconds 1 --dscp 64
# Issue 19: every numeric flag has a stated range (docs/testbed.md "Input ranges").
expect 2 "--seconds = 1e+300 is outside" cluster blast --to 127.0.0.1:9 --seconds 1e300
expect 2 "--bytes = 18446744073709551615 is outside" cluster blast --to 127.0.0.1:9 \
  --bytes 18446744073709551615
expect 2 "--block-size = 1 is outside" cluster read --block-size 1 /dev/null
expect 2 "--connections" cluster sink --port 9 --connections 0

# Without root: a clear refusal, nothing created.
if [[ $(id -u) == 0 ]] && command -v setpriv >/dev/null; then
  cp "$bin" "$tmp/dualpath" && chmod 755 "$tmp" "$tmp/dualpath"
  for verb in up down; do
    setpriv --reuid=65534 --regid=65534 --clear-groups "$tmp/dualpath" cluster "$verb" \
      --name nonroot >"$tmp/out" 2>"$tmp/err"
    got=$?
    [[ $got == 1 ]] || fail "non-root cluster $verb exited $got, want 1: $(cat "$tmp/err")"
    grep -q "needs root" "$tmp/err" || fail "non-root cluster $verb: $(cat "$tmp/err")"
  done
  [[ ! -e $tmp/root/nonroot ]] || fail "non-root up created state"
else
  "$bin" cluster up --name nonroot >"$tmp/out" 2>"$tmp/err" && fail "non-root up succeeded"
  grep -q "needs root" "$tmp/err" || fail "non-root up: $(cat "$tmp/err")"
fi
echo "cluster_cli_test: ok"
