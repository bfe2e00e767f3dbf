#!/usr/bin/env bash
# `dualpath bench sched`: runs and prints both clusters; bad input is one line on stderr, exit 2.
# (No assertion on the measured rates: speed belongs in scripts/sched/bench.sh.)
set -u
bin=$1
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$bin" bench sched --pd 4P8D --seconds 0.05 >"$tmp/out" 2>"$tmp/err" || fail "exit $?: $(cat "$tmp/err")"
grep -q '^2P4D (baseline) ' "$tmp/out" || fail "no baseline line: $(cat "$tmp/out")"
grep -q '^4P8D (96 GPUs) ' "$tmp/out" || fail "no 4P8D line: $(cat "$tmp/out")"
grep -q '^ratio 4P8D / 2P4D: ' "$tmp/out" || fail "no ratio line"

"$bin" bench sched --split --seconds 0.05 --pd 1P1D >/dev/null 2>&1 || fail "--split failed"

bad() {  # args...: must exit 2 with exactly one line on stderr naming the problem
  local want=$1
  shift
  "$bin" bench sched "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [[ $rc -eq 2 ]] || fail "'$*' exited $rc, want 2"
  [[ $(wc -l <"$tmp/err") -eq 1 ]] || fail "'$*' stderr is not one line: $(cat "$tmp/err")"
  grep -q -- "$want" "$tmp/err" || fail "'$*' stderr does not mention '$want': $(cat "$tmp/err")"
}
bad "2X4D" --pd 2X4D
bad "0P2D" --pd 0P2D
bad "gpus_per_node" --gpus-per-node 0
bad "--policy" --policy fastest
bad "split_reads" --policy basic --split
bad "--seconds" --seconds 0
echo "sched_cli: ok"
