#!/usr/bin/env bash
# Issue 19, defect 4: `dualpath cluster run` stops promptly and leaves nothing running when
#  - it gets SIGTERM (exit 143, "stopped by SIGTERM"),
#  - it gets SIGINT, as a background job whose SIGINT bash set to ignored (exit 130),
#  - it is SIGKILLed and can clean nothing up: its children die with it (PR_SET_PDEATHSIG),
#  - its cluster is taken down under it (`cluster down`: exit 1, one line naming what went away;
#    before the fix it logged "link sample failed" four times a second and never finished).
# Each time the control service and engines it started must be gone afterwards.
#
# The runs use a cluster brought up once here and agents that arrive rarely (--online --aps
# 0.001), so each run is idle and waiting when the event comes. The only waits are a blocking
# read of the run's progress (until its service and engines are up) and `timeout`-bounded waits
# for its exit.
#
# usage: replay_stop_test.sh DUALPATH_BINARY      Exit 77 (skipped) without root or GlusterFS.
set -uo pipefail
bin=$(realpath "$1")
NAME=rpstop
if [[ $(id -u) != 0 ]]; then
  echo "SKIP: needs root (network namespaces, tc, FUSE mounts)"
  exit 77
fi
if ! command -v glusterd >/dev/null || ! command -v glusterfs >/dev/null; then
  echo "SKIP: glusterfs-server/glusterfs-client not installed (scripts/setup.sh)"
  exit 77
fi

tmp=$(mktemp -d)
export DUALPATH_REPLAY_ROOT=$tmp/replay
failures=0
run_pid=""
drain_pid=""
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
cleanup() {
  [[ -n $run_pid ]] && kill -KILL "$run_pid" 2>/dev/null
  [[ -n $drain_pid ]] && kill "$drain_pid" 2>/dev/null
  "$bin" cluster down --name "$NAME" >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT
"$bin" cluster down --name "$NAME" >/dev/null 2>&1  # a crashed earlier run
"$bin" cluster up --name "$NAME" >"$tmp/up.txt" 2>&1 || {
  cat "$tmp/up.txt"
  echo "FAIL: cluster up"
  exit 1
}

# Starts a run in the background and returns once its service and engines are up; its direct
# children (the service and the `ip netns exec` engines) are recorded in $children.
start_run() {
  rm -f "$tmp/fifo"
  mkfifo "$tmp/fifo"
  "$bin" cluster run --name "$NAME" --system basic --workload synthetic --agents 2 --turns 2 \
    --max-context 512 --gen 4 --goodput nominal --online --aps 0.001 --no-check --timeout 300 \
    >"$tmp/table.txt" 2>"$tmp/fifo" &
  run_pid=$!
  exec 4<"$tmp/fifo"
  : >"$tmp/progress.txt"
  local line up=0
  while IFS= read -r -t 120 line <&4; do
    echo "$line" >>"$tmp/progress.txt"
    if [[ $line == *"service and "*" engines up"* ]]; then
      up=1
      break
    fi
  done
  # Keep draining the run's stderr so it never blocks on a full pipe.
  cat <&4 >>"$tmp/progress.txt" &
  drain_pid=$!
  exec 4<&-
  ((up)) || {
    fail "run never got its engines up: $(cat "$tmp/progress.txt")"
    return 1
  }
  children=$(pgrep -P "$run_pid" | tr '\n' ' ')
  [[ -n $children ]] || fail "no children of the run found"
  return 0
}

# wait_run WANT_RC PATTERN WHAT: the run exits within 60 s with WANT_RC, its last stderr line
# matches PATTERN (if not empty), and none of its children is left (each gets 10 s to finish
# dying: after a SIGKILL of the run they are killed by the kernel, not reaped by the run).
wait_run() {
  local want=$1 pattern=$2 what=$3 rc
  if ! timeout 60 tail --pid="$run_pid" -f /dev/null; then
    fail "$what: the run did not exit within 60 s"
    kill -KILL "$run_pid"
  fi
  wait "$run_pid"
  rc=$?
  run_pid=""
  wait "$drain_pid" 2>/dev/null
  drain_pid=""
  [[ $rc == "$want" ]] || fail "$what: exit $rc, want $want"
  local last
  last=$(tail -n 1 "$tmp/progress.txt")
  [[ -z $pattern || $last == *$pattern* ]] || fail "$what: last stderr line '$last' lacks '$pattern'"
  local p left=""
  for p in $children; do
    timeout 10 tail --pid="$p" -f /dev/null || left+="$p($(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)) "
  done
  [[ -z $left ]] || fail "$what: processes of the run left: $left"
  # Only this test's cluster: other runs on the machine (another engineer's cluster) are not ours.
  if pgrep -af -- "--store-subdir replay-" | grep -F -- "/dualpath-testbed/$NAME/" >"$tmp/left.txt"; then
    fail "$what: service or engine processes left: $(cat "$tmp/left.txt")"
  fi
  echo "--- $what: exit $rc; last line: $last"
}

if start_run; then
  kill -TERM "$run_pid"
  wait_run 143 "stopped by SIGTERM" "SIGTERM"
fi
if start_run; then
  kill -INT "$run_pid"
  wait_run 130 "stopped by SIGINT" "SIGINT"
fi
if start_run; then
  kill -KILL "$run_pid"
  wait_run 137 "" "SIGKILL"
fi
if start_run; then
  "$bin" cluster down --name "$NAME" >"$tmp/down.txt" 2>&1 || fail "cluster down: $(cat "$tmp/down.txt")"
  wait_run 1 "during the run" "cluster down"
fi

if ((failures)); then
  echo "--- last progress:"
  cat "$tmp/progress.txt"
  echo "replay_stop: $failures failure(s)"
  exit 1
fi
echo "replay_stop: ok"
