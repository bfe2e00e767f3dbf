#!/usr/bin/env bash
# Testbed acceptance figures (issue 3), with the full settings the CI test scales down:
#  1. bring-up and tear-down time of a 4-node cluster (2P2D), REPEAT times;
#  2. the system test with a 256 MiB file, 400mbit storage and 2gbit compute links: per-node
#     read rate alone and all at once, as a ratio to the nominal rate, and the compute link's rate
#     while the storage links are busy;
#  3. DSCP priority (--dscp): a low (DSCP 10) and a high (DSCP 46) flow into the same node, alone
#     and together, as ratios to the compute rate.
# Ratios are against the nominal rates configured in the same run. Needs root.
#
# usage: scripts/testbed/bench.sh [DUALPATH_BINARY]   (default build/release/bin/dualpath)
# env:   REPEAT (3), FILE_MIB (256), STOR_RATE (400mbit), COMP_RATE (2gbit),
#        SECTIONS ("1 2 3": which of the sections above to run)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
bin=$(realpath "${1:-$repo/build/release/bin/dualpath}")
REPEAT=${REPEAT:-3}
SECTIONS=${SECTIONS:-1 2 3}
want() { [[ " $SECTIONS " == *" $1 "* ]]; }
export FILE_MIB=${FILE_MIB:-256} STOR_RATE=${STOR_RATE:-400mbit} COMP_RATE=${COMP_RATE:-2gbit}
NAME=tbbench
[[ $(id -u) == 0 ]] || {
  echo "bench.sh: needs root" >&2
  exit 2
}
trap '"$bin" cluster down --name "$NAME" >/dev/null 2>&1' EXIT
"$bin" cluster down --name "$NAME" >/dev/null 2>&1
secs() { awk -v ns="$1" 'BEGIN { printf "%.2f", ns / 1e9 }'; }

if want 1; then
  echo "== 1. bring-up / tear-down of 2P2D (4 nodes), $REPEAT times; load: $(cut -d' ' -f1-3 /proc/loadavg)"
  ups=() downs=()
  for ((i = 0; i < REPEAT; i++)); do
    t0=$(date +%s%N)
    "$bin" cluster up --name "$NAME" --pd 2P2D >/dev/null || exit 1
    t1=$(date +%s%N)
    "$bin" cluster down --name "$NAME" || exit 1
    t2=$(date +%s%N)
    ups+=("$(secs $((t1 - t0)))") downs+=("$(secs $((t2 - t1)))")
  done
  echo "  up:   ${ups[*]} s"
  echo "  down: ${downs[*]} s"
fi

if want 2; then
  echo "== 2. system test at full size: FILE_MIB=$FILE_MIB STOR_RATE=$STOR_RATE COMP_RATE=$COMP_RATE"
  "$repo/tests/testbed/testbed_system_test.sh" "$bin"
fi
want 3 || exit 0

echo "== 3. DSCP priority on compute links ($COMP_RATE): p0 -> d0 and p1 -> d0 share d0's port"
"$bin" cluster up --name "$NAME" --pd 2P1D --comp-rate "$COMP_RATE" --dscp >/dev/null || exit 1
d0=$("$bin" cluster get --name "$NAME" d0.compute_addr)
comp_bps=$("$bin" cluster get --name "$NAME" comp_rate_bps)
# flow SRC DSCP PORT OUT: a 3 s flow from SRC to a fresh sink on d0 (a port per flow: flows run
# in background subshells, so the port cannot be a shared counter).
flow() {
  "$bin" cluster exec --name "$NAME" d0 -- "$bin" cluster sink --port "$3" >/dev/null 2>&1 &
  "$bin" cluster exec --name "$NAME" "$1" -- "$bin" cluster blast --to "$d0:$3" --seconds 3 \
    --dscp "$2" >"$4" 2>&1
}
ratio() { # OUT LABEL
  awk -v r="$comp_bps" -v l="$2" '/^sent/ { printf "  %-34s %8.1f Mbit/s = %.3f of the link\n",
    l, $(NF - 1), $(NF - 1) * 1e6 / r }' "$1"
}
tmp=$(mktemp -d)
flow p0 10 7001 "$tmp/low"
wait
ratio "$tmp/low" "low (DSCP 10) alone"
flow p1 46 7002 "$tmp/high"
wait
ratio "$tmp/high" "high (DSCP 46) alone"
flow p0 10 7003 "$tmp/low" &
flow p1 46 7004 "$tmp/high"
wait
ratio "$tmp/low" "low (DSCP 10) with high"
ratio "$tmp/high" "high (DSCP 46) with low"
flow p0 0 7005 "$tmp/a" &
flow p1 0 7006 "$tmp/b"
wait
ratio "$tmp/a" "unmarked flow 1 of 2 (both low)"
ratio "$tmp/b" "unmarked flow 2 of 2 (both low)"
rm -rf "$tmp"
"$bin" cluster down --name "$NAME"
