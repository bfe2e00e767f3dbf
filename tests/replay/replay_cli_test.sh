#!/usr/bin/env bash
# `dualpath cluster run` input errors: one line on stderr naming what was wrong, exit 2, before
# any cluster is touched (no root needed).
set -uo pipefail
bin=$(realpath "$1")
failures=0
expect_bad() {
  local want=$1
  shift
  local err rc
  err=$("$bin" cluster run --name rpclitest "$@" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc != 2 ]]; then
    echo "FAIL: cluster run $* exited $rc, want 2 ($err)"
    failures=$((failures + 1))
  elif [[ $err != *"$want"* ]] || [[ $(printf '%s\n' "$err" | wc -l) != 1 ]]; then
    echo "FAIL: cluster run $*: want one line naming '$want', got: $err"
    failures=$((failures + 1))
  else
    echo "ok: $* -> $err"
  fi
}
expect_bad "--system 'fast'" --system fast
expect_bad "0P1D" --pd 0P1D
expect_bad "400" --stor-rate 400
expect_bad "--workload '/nonexistent/x.jsonl'" --workload /nonexistent/x.jsonl
expect_bad "--agents" --agents 0
expect_bad "--max-context" --max-context 10
expect_bad "--goodput 'maybe'" --goodput maybe
expect_bad "vocab" --model-spec vocab=0
expect_bad "--kill-engine 'd0'" --kill-engine d0
if [[ -e /var/tmp/dualpath-testbed/rpclitest ]]; then
  echo "FAIL: a bad-input run created cluster state"
  failures=$((failures + 1))
fi
((failures == 0)) && echo "replay cli test: OK"
exit $((failures > 0))
