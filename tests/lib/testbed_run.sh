# Sourced by the testbed system tests (tests/replay/*_test.sh) once they have set `bin` (the
# dualpath binary) and `NAME` (their cluster's name):
#   testbed_require [etcd]    exit 77 (CTest: skipped), saying why, without root or GlusterFS (or,
#                             with `etcd`, without Debian's /usr/bin/etcd)
#   testbed_begin             $tmp (a temporary directory), $failures and fail MESSAGE, an EXIT
#                             trap that takes the cluster down and removes $tmp, and the cluster of
#                             a crashed earlier run taken down
#   testbed_check_exit RC DEADLINE   fail on a run killed by `timeout` or a non-zero exit
#   testbed_shm_files NAME    the /dev/shm files (pools, store tiers) of cluster NAME, one per line,
#                             matched exactly as `cluster down` matches them (not NAME-b's)
#   testbed_check_nothing_left [PROCS]   fail for what cluster $NAME left behind: a namespace, a
#                             process whose command line matches PROCS (a pgrep -f pattern;
#                             default: one under its state dir), its state dir under $root, a pool
#                             or store tier file in /dev/shm
testbed_lib_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
testbed_shm_files() {
  bash "$testbed_lib_dir/../../scripts/testbed/testbed.sh" shm-files "$1"
}

testbed_require() {
  if [[ $(id -u) != 0 ]]; then
    echo "SKIP: needs root (network namespaces, tc, FUSE mounts)"
    exit 77
  fi
  if ! command -v glusterd >/dev/null || ! command -v glusterfs >/dev/null; then
    echo "SKIP: glusterfs-server/glusterfs-client not installed (scripts/setup.sh)"
    exit 77
  fi
  if [[ ${1:-} == etcd && ! -x /usr/bin/etcd ]]; then
    echo "SKIP: /usr/bin/etcd not installed (etcd-server, scripts/setup.sh)"
    exit 77
  fi
}

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

testbed_cleanup() {
  "$bin" cluster down --name "$NAME" >/dev/null 2>&1
  rm -rf "$tmp"
}

testbed_begin() {
  tmp=$(mktemp -d)
  failures=0
  trap testbed_cleanup EXIT
  "$bin" cluster down --name "$NAME" >/dev/null 2>&1 # a crashed earlier run
}

testbed_check_exit() {
  local rc=$1 deadline=$2
  [[ $rc == 124 || $rc == 137 ]] && fail "cluster run did not finish within the ${deadline} s deadline"
  [[ $rc == 0 ]] || fail "cluster run exited $rc"
}

testbed_check_nothing_left() {
  local procs=${1:-"dualpath-testbed/$NAME/"} left
  if ip netns list | grep -q "^dp-$NAME\."; then
    fail "namespaces left: $(ip netns list | grep "^dp-$NAME\." | tr '\n' ' ')"
  fi
  if pgrep -af -- "$procs" >"$tmp/left.txt"; then
    fail "processes left: $(cat "$tmp/left.txt")"
  fi
  [[ -e $root/$NAME ]] && fail "state dir $root/$NAME left"
  left=$(testbed_shm_files "$NAME")
  [[ -z $left ]] || fail "pool or store tier files left: $left"
  return 0
}
