#!/usr/bin/env bash
# `cluster up|down` touch only their own cluster (issue 25 item 4), with two clusters whose names
# share a prefix, hyga and hyga-b:
#  A. (root) `cluster down --name hyga` removes hyga's /dev/shm files (node pools, store tiers of
#     `cluster up --store` and of `cluster run --store`) and none of hyga-b's; while another
#     process holds hyga's lock (<state root>/hyga.lock, what a running `up` or `down` holds), `up`
#     and `down` of hyga refuse at once naming the holder and touch nothing.
#  B. (root and GlusterFS) two `cluster up --name hyga` started at the same moment: one builds the
#     cluster, the other says the name is in use; the winner's cluster is intact afterwards
#     (before, both passed the existence check and the loser's cleanup tore the winner down).
#
# usage: cluster_names_test.sh DUALPATH_BINARY. Exit 77 (CTest: skipped) without root; part B is
# skipped, saying so, without GlusterFS. Each command is bounded by `timeout`: a hang fails.
set -uo pipefail
bin=$(realpath "$1")
if [[ $(id -u) != 0 ]]; then
  echo "SKIP: needs root (cluster up/down)"
  exit 77
fi
A=hyga
B=hyga-b
tmp=$(mktemp -d)
export DUALPATH_TESTBED_ROOT=$tmp/root # this test's own state root (and so its own lock files)
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
shm_of() { # the fake /dev/shm files of cluster $1 that this test creates
  echo "/dev/shm/dualpath-$1-p0.pool /dev/shm/dualpath-$1-d1.pool /dev/shm/dualpath-store-$1-1"
  echo "/dev/shm/dualpath-store-$1.dualpath-2"
}
cleanup() {
  timeout 60 "$bin" cluster down --name "$A" >/dev/null 2>&1
  # shellcheck disable=SC2046
  rm -f $(shm_of "$A") $(shm_of "$B")
  rm -rf "$tmp"
}
trap cleanup EXIT

expect() { # RC PATTERN ARGS...: exit status RC, PATTERN on stderr
  local rc=$1 pattern=$2
  shift 2
  timeout 120 "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  [[ $got == "$rc" ]] || fail "$* exited $got, want $rc: $(cat "$tmp/err")"
  [[ -z $pattern ]] || grep -q -- "$pattern" "$tmp/err" ||
    fail "$*: stderr lacks '$pattern': $(cat "$tmp/err")"
}
all_exist() { local f; for f in "$@"; do [[ -e $f ]] || return 1; done; }
none_exist() { local f; for f in "$@"; do [[ ! -e $f ]] || return 1; done; }

# --- A: exact names, and the lock ---
# shellcheck disable=SC2046
touch $(shm_of "$A") $(shm_of "$B")
mkdir -p "$DUALPATH_TESTBED_ROOT"
lock=$DUALPATH_TESTBED_ROOT/$A.lock
# flock(1) holds the lock as a running `up` or `down` would, and runs the command under it.
expect 1 "cluster '$A' is in use" flock -n "$lock" "$bin" cluster down --name "$A"
# shellcheck disable=SC2046
all_exist $(shm_of "$A") || fail "a refused down removed files of $A"
expect 1 "cluster '$A' is in use" flock -n "$lock" "$bin" cluster up --name "$A" --pd 1P1D
ip netns list | grep -q "^dp-$A\." && fail "a refused up created namespaces of $A"
[[ -e $DUALPATH_TESTBED_ROOT/$A ]] && fail "a refused up created the state directory of $A"

expect 0 "" "$bin" cluster down --name "$A"
# shellcheck disable=SC2046
none_exist $(shm_of "$A") || fail "down --name $A left its files: $(ls /dev/shm | grep "dualpath.*$A")"
# shellcheck disable=SC2046
all_exist $(shm_of "$B") || fail "down --name $A removed files of $B (left: $(ls /dev/shm | grep "$B"))"

# --- B: two ups of one name at the same moment ---
if ! command -v glusterd >/dev/null || ! command -v glusterfs >/dev/null; then
  echo "SKIP (part B): glusterfs-server/glusterfs-client not installed (scripts/setup.sh)"
else
  timeout 180 "$bin" cluster up --name "$A" --pd 1P1D >"$tmp/up1.out" 2>"$tmp/up1.err" &
  p1=$!
  timeout 180 "$bin" cluster up --name "$A" --pd 1P1D >"$tmp/up2.out" 2>"$tmp/up2.err" &
  p2=$!
  wait "$p1"
  rc1=$?
  wait "$p2"
  rc2=$?
  echo "concurrent ups: exit $rc1 and $rc2"
  if [[ $rc1 == 0 && $rc2 != 0 ]]; then
    loser=$tmp/up2.err
  elif [[ $rc2 == 0 && $rc1 != 0 ]]; then
    loser=$tmp/up1.err
  else
    loser=""
    fail "want one up to succeed and one to fail, got exit $rc1 and $rc2: $(cat "$tmp"/up*.err)"
  fi
  if [[ -n $loser ]]; then
    # The loser lost at the lock or, had the winner already finished, at the existence check.
    grep -qE "is in use|already exists" "$loser" || fail "the losing up says: $(cat "$loser")"
    echo "the losing up: $(cat "$loser")"
  fi
  # The winner's cluster is whole: described, its nodes' mounts up, a command runs in a node.
  expect 0 "" "$bin" cluster status --name "$A"
  grep -q "NOT MOUNTED" "$tmp/out" && fail "after the concurrent ups a mount is gone: $(cat "$tmp/out")"
  expect 0 "" "$bin" cluster exec --name "$A" p0 -- true
  expect 0 "" "$bin" cluster down --name "$A"
  ip netns list | grep -q "^dp-$A\." && fail "down left namespaces of $A"
  # shellcheck disable=SC2046
  all_exist $(shm_of "$B") || fail "up/down of $A removed files of $B"
fi

if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "OK"
