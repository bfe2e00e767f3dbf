#!/usr/bin/env bash
# System test of the testbed (`dualpath cluster`), issue 3's acceptance:
#  - brings up 1P1D and 2P2D; `up` of an existing name fails with a clear error;
#  - reads a file with O_DIRECT through each node's mount, alone and all nodes at once: each
#    node's storage-link counter shows the bytes, and the rate (counter bytes / wall time) is
#    within [90%, 105%] of the nominal storage rate (a measurement of the kernel's shaper, not of
#    our code: a phase that misses is retried, up to 4 attempts, and all figures are printed);
#  - while all storage links are busy, a compute link carries >= 90% of its rate;
#  - `down` leaves no namespace, interface, mount, process or file behind; `down` twice is fine.
#
# usage: testbed_system_test.sh DUALPATH_BINARY
# env:   FILE_MIB (default 64), STOR_RATE (400mbit), COMP_RATE (1gbit), PDS ("1P1D 2P2D"),
#        RING=1 (every node sends to the next one over the compute network; default: p0 -> d0).
# Exit 77 (CTest: skipped) without root or GlusterFS.
set -uo pipefail
bin=$(realpath "$1")
FILE_MIB=${FILE_MIB:-64}
STOR_RATE=${STOR_RATE:-400mbit}
COMP_RATE=${COMP_RATE:-1gbit}
PDS=${PDS:-1P1D 2P2D}
RING=${RING:-0}
NAME=tbsystest
LO=0.90
HI=1.05

if [[ $(id -u) != 0 ]]; then
  echo "SKIP: needs root (network namespaces, tc, FUSE mounts)"
  exit 77
fi
if ! command -v glusterd >/dev/null || ! command -v glusterfs >/dev/null; then
  echo "SKIP: glusterfs-server/glusterfs-client not installed (scripts/setup.sh)"
  exit 77
fi

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
die() {
  echo "FAIL: $*"
  "$bin" cluster down --name "$NAME" >/dev/null 2>&1
  exit 1
}
trap '"$bin" cluster down --name "$NAME" >/dev/null 2>&1' EXIT

to_bps() { # 400mbit -> 400000000
  awk -v r="$1" 'BEGIN { n = r + 0; u = tolower(r); sub(/^[0-9]+/, "", u);
    m = (u == "gbit") ? 1e9 : (u == "mbit") ? 1e6 : (u == "kbit") ? 1e3 : 1; printf "%.0f", n * m }'
}
stor_bps=$(to_bps "$STOR_RATE")
comp_bps=$(to_bps "$COMP_RATE")
now_ns() { date +%s%N; }
root_links() { ip -o link show | awk -F': ' '{print $2}' | sort | tr '\n' ' '; }
state_dir=""

# counter FILE NODE LINK FIELD(rx|tx): one value from a `cluster counters` snapshot.
counter() {
  awk -v n="$2" -v l="$3" -v f="$4" '$1 == n && $2 == l { print (f == "rx") ? $3 : $4 }' "$1"
}
# delta NODE LINK FIELD: the change between the before and after snapshots.
delta() { echo $(($(counter "$tmp/after" "$@") - $(counter "$tmp/before" "$@"))); }
snapshot() { "$bin" cluster counters --name "$NAME" >"$1" || die "cluster counters"; }

# Everything the cluster made must be gone (acceptance 2).
check_clean() {
  local what=$1
  local ns
  ns=$(ip netns list | awk '{print $1}' | grep "^dp-$NAME\." | tr '\n' ' ')
  [[ -z $ns ]] || fail "$what: namespaces left: $ns"
  grep -q " $state_dir" /proc/self/mountinfo && fail "$what: mounts left under $state_dir"
  [[ -e $state_dir ]] && fail "$what: state directory $state_dir left"
  # Exactly this cluster's names (`down`'s own rule: not those of a cluster named $NAME-x).
  [[ -z $(bash "$(dirname "$0")/../../scripts/testbed/testbed.sh" shm-files "$NAME") ]] ||
    fail "$what: node pool or store tier files left"
  local p
  for p in /proc/[0-9]*; do
    local cmd
    cmd=$({ tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null) || continue
    if [[ $cmd == *"$state_dir/"* || $cmd == *"dp-$NAME."* ]]; then
      fail "$what: process left: ${p#/proc/} $cmd"
    fi
  done
  # Interfaces are created inside the namespaces and go with them; none may appear in the root
  # namespace (only names the testbed uses are considered: other agents share this machine).
  local l
  for l in $(root_links); do
    [[ " $links_before " == *" $l "* ]] && continue
    [[ $l =~ ^(stor0|comp0|sbr|cbr|s-.*|c-.*)(@.*)?$ ]] && fail "$what: interface $l left"
  done
}

# read_phase LABEL NODE...: read the file through each NODE's mount at the same time; check each
# node's rate and that only the reading nodes' storage links carried the data. Returns 1 on a miss.
read_phase() {
  local label=$1
  shift
  local nodes=("$@") n ok=0
  local -a wait_pids=() sink_pids=()
  snapshot "$tmp/before"
  for n in "${nodes[@]}"; do
    # `cluster read` runs in the node's namespace: O_DIRECT reads (4 streams) and the node's own
    # stor0 rx counter sampled after every block (key=value output).
    "$bin" cluster exec --name "$NAME" "$n" -- "$bin" cluster read "$(cat "$tmp/mount.$n")/data" \
      >"$tmp/read.$n" 2>&1 &
    wait_pids+=($!)
  done
  if [[ -n ${BLAST:-} ]]; then
    # Compute traffic during the storage reads: a bit shorter than the reads so it overlaps them.
    local secs
    secs=$(awk -v b="$((FILE_MIB * 1048576))" -v r="$stor_bps" 'BEGIN { printf "%.2f", b * 8 / r * 0.8 }')
    local k=0 src dst
    for src in "${pairs_src[@]}"; do
      dst=${pairs_dst[$k]}
      "$bin" cluster exec --name "$NAME" "$dst" -- "$bin" cluster sink --port $((5000 + k)) \
        >"$tmp/sink.$k" 2>&1 &
      sink_pids+=($!)
      "$bin" cluster exec --name "$NAME" "$src" -- "$bin" cluster blast \
        --to "$(cat "$tmp/caddr.$dst"):$((5000 + k))" --seconds "$secs" >"$tmp/blast.$k" 2>&1 &
      wait_pids+=($!)
      k=$((k + 1))
    done
  fi
  wait "${wait_pids[@]}"
  snapshot "$tmp/after"
  # A sink whose blaster failed to connect would wait forever.
  ((${#sink_pids[@]})) && kill "${sink_pids[@]}" 2>/dev/null
  ((${#sink_pids[@]})) && wait "${sink_pids[@]}" 2>/dev/null
  local file_bytes=$((FILE_MIB * 1048576))
  for n in "${nodes[@]}"; do
    if ! grep -q '^file_bytes=' "$tmp/read.$n"; then
      echo "  $label $n: read failed: $(cat "$tmp/read.$n")"
      ok=1
      continue
    fi
    local verdict
    # The node's counter, read from outside, must show the file's bytes as well.
    verdict=$(awk -v seen="$(delta "$n" storage rx)" -v r="$stor_bps" -v fb="$file_bytes" \
      -v lo="$LO" -v hi="$HI" '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
      END { x = v["link_mbps"] * 1e6 / r; xs = v["steady_link_mbps"] * 1e6 / r;
        good = x >= lo && x <= hi && v["file_bytes"] == fb && seen >= fb;
        printf "%s %.1f Mbit/s = %.3f of nominal (steady %.3f), %d bytes on its storage link " \
          "for %d file bytes, %.2f s", good ? "ok" : "MISS", v["link_mbps"], x, xs, seen, fb,
          v["seconds"] }' "$tmp/read.$n")
    echo "  $label $n: $verdict"
    [[ $verdict == ok* ]] || ok=1
  done
  # Nodes that did not read must not have received the data on their storage links.
  for n in $all_nodes; do
    [[ " ${nodes[*]} " == *" $n "* ]] && continue
    local idle
    idle=$(delta "$n" storage rx)
    if ((idle > file_bytes / 100)); then
      echo "  $label: idle node $n received $idle bytes on its storage link"
      ok=1
    fi
  done
  if [[ -n ${BLAST:-} ]]; then
    local k=0 src
    for src in "${pairs_src[@]}"; do
      local sent secs
      sent=$(delta "$src" compute tx)
      secs=$(sed -n 's/^sent [0-9]* bytes in \([0-9.]*\) s.*/\1/p' "$tmp/blast.$k")
      if [[ -z $secs ]]; then
        echo "  $label compute $src->${pairs_dst[$k]}: blast failed: $(cat "$tmp/blast.$k")"
        ok=1
      else
        local v
        v=$(awk -v b="$sent" -v s="$secs" -v r="$comp_bps" -v lo="$LO" 'BEGIN {
          rate = b * 8 / s; x = rate / r;
          printf "%s %.1f Mbit/s = %.3f of nominal over %.2f s", (x >= lo) ? "ok" : "MISS",
            rate / 1e6, x, s }')
        echo "  $label compute $src->${pairs_dst[$k]} (during storage reads): $v"
        [[ $v == ok* ]] || ok=1
      fi
      k=$((k + 1))
    done
  fi
  return $ok
}

# Runs a phase; on a miss runs it again, up to 4 attempts in all, and fails only if every attempt
# misses. The machine is shared and the 2P2D all-at-once phase runs four FUSE clients and the brick
# on 2 cores: in CI about every other run misses one attempt (0.87-0.89 of nominal on one link),
# never the next. A shaper that does not shape (over 105%) or a link that cannot reach 90% misses
# every time.
phase() {
  local attempt
  for attempt in 1 2 3 4; do
    read_phase "$@" && return 0
    ((attempt < 4)) && echo "  (retrying: attempt $((attempt + 1)) of 4)"
  done
  fail "phase $1 missed its rates in 4 attempts"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; "$bin" cluster down --name "$NAME" >/dev/null 2>&1' EXIT
"$bin" cluster down --name "$NAME" >/dev/null 2>&1 # leftovers of an interrupted run
links_before=$(root_links)

for pd in $PDS; do
  echo "== $pd: storage $STOR_RATE, compute $COMP_RATE, file $FILE_MIB MiB"
  t0=$(now_ns)
  "$bin" cluster up --name "$NAME" --pd "$pd" --stor-rate "$STOR_RATE" --comp-rate "$COMP_RATE" \
    >"$tmp/up.out" 2>&1 || die "cluster up $pd: $(cat "$tmp/up.out")"
  t1=$(now_ns)
  echo "  up: $(awk -v ns=$((t1 - t0)) 'BEGIN { printf "%.2f s", ns / 1e9 }')"
  state_dir=$("$bin" cluster get --name "$NAME" state_dir) || die "cluster get state_dir"

  # A second `up` with the same name: refused, clearly, and the running cluster is untouched.
  if "$bin" cluster up --name "$NAME" --pd "$pd" >"$tmp/up2.out" 2>&1; then
    fail "second up with the same name succeeded"
  elif ! grep -q "already exists" "$tmp/up2.out"; then
    fail "second up: unclear error: $(cat "$tmp/up2.out")"
  fi

  all_nodes=$("$bin" cluster get --name "$NAME" nodes)
  for n in $all_nodes; do
    "$bin" cluster get --name "$NAME" "$n.mount" >"$tmp/mount.$n"
    "$bin" cluster get --name "$NAME" "$n.compute_addr" >"$tmp/caddr.$n"
  done
  admin=$("$bin" cluster get --name "$NAME" storage.admin_mount)
  dd if=/dev/zero of="$admin/data" bs=4M count=$((FILE_MIB / 4)) status=none ||
    die "writing the test file through $admin"

  pairs_src=() pairs_dst=()
  nodes_arr=($all_nodes)
  if [[ $RING == 1 ]]; then
    for ((k = 0; k < ${#nodes_arr[@]}; k++)); do
      pairs_src+=("${nodes_arr[$k]}")
      pairs_dst+=("${nodes_arr[$(((k + 1) % ${#nodes_arr[@]}))]}")
    done
  else
    pairs_src=(p0) pairs_dst=(d0)
  fi

  for n in $all_nodes; do
    BLAST="" phase "alone" "$n"
  done
  BLAST=1 phase "all-at-once" $all_nodes

  # A node pool that `cluster run` would have given its engines (an orchestrator killed before
  # its own clean-up leaves it): `down` removes it.
  : >"/dev/shm/dualpath-$NAME-p0.pool"
  t0=$(now_ns)
  "$bin" cluster down --name "$NAME" || fail "cluster down exited $?"
  t1=$(now_ns)
  echo "  down: $(awk -v ns=$((t1 - t0)) 'BEGIN { printf "%.2f s", ns / 1e9 }')"
  check_clean "after down ($pd)"
  "$bin" cluster down --name "$NAME" || fail "second down exited $?"
  check_clean "after second down ($pd)"
done

# `down` after a crashed `up` (acceptance 2): the fault point kills `up` and its script at each
# stage; nothing cleans up until `down`, which must leave nothing behind.
state_dir="${DUALPATH_TESTBED_ROOT:-/var/tmp/dualpath-testbed}/$NAME"
for stage in network glusterd mounts; do
  # (a subshell, so that bash's "Killed" job notice goes to /dev/null too)
  rc=$( (DUALPATH_TESTBED_CRASH_AT=$stage "$bin" cluster up --name "$NAME" --pd 1P1D \
    >/dev/null 2>&1) 2>/dev/null; echo $?)
  [[ $rc == 137 ]] || fail "up with a crash at $stage exited $rc, want 137 (killed)"
  ip netns list | grep -q "^dp-$NAME\." || fail "crash at $stage: no namespaces to clean up?"
  "$bin" cluster up --name "$NAME" --pd 1P1D >"$tmp/up3.out" 2>&1 &&
    fail "up over the remains of a crashed up succeeded"
  "$bin" cluster down --name "$NAME" || fail "down after a crash at $stage exited $?"
  check_clean "down after a crash at $stage"
  echo "  crash of up at $stage: down cleaned up"
done

if ((failures)); then
  echo "testbed_system_test: $failures failure(s)"
  exit 1
fi
echo "testbed_system_test: ok"
