#!/usr/bin/env bash
# dualpath testbed: the mechanism behind `dualpath cluster up|down`.
#
# The `dualpath` binary embeds this file at build time and runs it with `bash -c`, so it works
# from any directory. The binary decides the plan (names, addresses, rates) and passes it on the
# command line; this script only executes it:
#
#   testbed.sh up   STATE_DIR NAME STOR_RATE_BIT COMP_RATE_BIT DSCP(0|1) STOR_ADDR/PREFIX \
#                   COMP_PREFIX NODE:STOR_ADDR:COMP_ADDR...
#   testbed.sh down STATE_DIR NAME
#   testbed.sh shm-files NAME        (the /dev/shm files `down` removes, one per line)
#
# Layout (see docs/testbed.md):
#   netns dp-NAME.stor  bridge sbr (STOR_ADDR), glusterd + one brick, admin FUSE mount
#   netns dp-NAME.sw    bridge cbr (no address): the compute switch
#   netns dp-NAME.NODE  stor0 (veth to sbr port s-NODE), comp0 (veth to cbr port c-NODE)
# Both ends of every veth are shaped (egress), so reads (storage -> node) and writes are limited.
# Every name created is also appended to STATE_DIR/created so `down` can undo a crashed `up`;
# `down` additionally scans for namespaces named dp-NAME.* ('.' is not allowed in NAME).
set -uo pipefail

die() {
  echo "testbed: $*" >&2
  exit 1
}
run() { # run a command, die naming it on failure
  local out
  if ! out=$("$@" 2>&1); then
    die "failed: $* :: ${out//$'\n'/ }"
  fi
}
# Daemons fork and may keep inherited descriptors: never capture their output with $(...), which
# would wait for the daemon to exit. Their start-up output goes to STATE/log/TAG.out.
run_daemon() { # TAG COMMAND...
  local tag=$1
  shift
  "$@" >"$STATE/log/$tag.out" 2>&1 </dev/null ||
    die "failed: $* :: $(tr '\n' ' ' <"$STATE/log/$tag.out")"
}
now_ms() { date +%s%3N; }

# Fault point for tests: DUALPATH_TESTBED_CRASH_AT=<name> kills `up` (the dualpath process that
# runs this script, and the script) right there, as a crash would, so that `down` can be tested
# on a half-built cluster.
crash_point() {
  if [[ ${DUALPATH_TESTBED_CRASH_AT:-} == "$1" ]]; then
    echo "testbed: crashing at $1 (DUALPATH_TESTBED_CRASH_AT)" >&2
    kill -KILL "$PPID" "$$"
  fi
}

# link_running NETNS IFNAME: the interface is up with carrier.
link_running() { ip -n "$1" link show "$2" | grep -q "state UP"; }

# wait_for SECONDS DESCRIPTION COMMAND...: poll a readiness condition (bounded).
wait_for() {
  local limit_ms=$(($1 * 1000)) what=$2
  shift 2
  local start
  start=$(now_ms)
  until "$@" >/dev/null 2>&1; do
    (($(now_ms) - start > limit_ms)) && die "timed out after $((limit_ms / 1000)) s waiting for $what"
    sleep 0.05
  done
}

is_mounted() { # is PATH a mount point (in the caller's mount namespace)?
  awk -v p="$1" '$5 == p { found = 1 } END { exit !found }' /proc/self/mountinfo
}

# tc shaping on one interface's egress. With DSCP, an htb tree: DSCP 46 (EF) -> class 1:10 (high,
# 99% guaranteed, prio 0), everything else -> 1:20 (low, 1% guaranteed, prio 1); both may borrow
# up to the full rate, high first (DualPath A.1: ~99% reserved for model traffic).
shape() { # NETNS DEV RATE_BIT DSCP
  local ns=$1 dev=$2 rate=$3 dscp=$4
  # Bucket of ~2 ms at the rate so the kernel timer granularity does not cap throughput; over a
  # transfer of >1 s it adds <0.2% to the long-run rate.
  # tbf drops a frame larger than its bucket: at least two of the links' largest frames.
  local burst=$((rate / 8 / 500)) min_burst=$((2 * (${MTU:-1500} + 14)))
  ((burst < min_burst)) && burst=$min_burst
  if [[ $dscp == 0 ]]; then
    run tc -n "$ns" qdisc add dev "$dev" root handle 1: tbf rate "${rate}bit" burst "$burst" \
      latency 50ms
  else
    local hi=$((rate / 100 * 99)) lo=$((rate / 100))
    run tc -n "$ns" qdisc add dev "$dev" root handle 1: htb default 20 r2q 1000
    run tc -n "$ns" class add dev "$dev" parent 1: classid 1:1 htb rate "${rate}bit" \
      ceil "${rate}bit" burst "$burst" cburst "$burst"
    run tc -n "$ns" class add dev "$dev" parent 1:1 classid 1:10 htb rate "${hi}bit" \
      ceil "${rate}bit" burst "$burst" cburst "$burst" prio 0 quantum 60000
    run tc -n "$ns" class add dev "$dev" parent 1:1 classid 1:20 htb rate "${lo}bit" \
      ceil "${rate}bit" burst "$burst" cburst "$burst" prio 1 quantum 60000
    # The DSCP is the top 6 bits of the IPv4 TOS byte: 46 << 2 = 0xb8.
    run tc -n "$ns" filter add dev "$dev" parent 1: protocol ip prio 1 u32 \
      match ip dsfield 0xb8 0xfc flowid 1:10
  fi
}

add_netns() { # NETNS
  echo "netns $1" >>"$STATE/created"
  run ip netns add "$1"
  run ip -n "$1" link set lo up
}

cmd_up() {
  (($# >= 9)) || die "usage: up STATE NAME STOR_RATE COMP_RATE DSCP STOR_ADDR COMP_PREFIX NODE..."
  STATE=$1 NAME=$2
  local stor_rate=$3 comp_rate=$4 dscp=$5 stor_cidr=$6 comp_prefix=$7
  shift 7
  local stor_addr=${stor_cidr%/*} stor_prefix=${stor_cidr#*/}
  # Every veth and bridge gets MTU 9000 (jumbo frames, as on a datacenter storage or RDMA
  # network): with 1500-byte frames the per-packet work through veth, bridge and tbf was about a
  # quarter of the CPU a read through a mount costs on the 2-core machine that runs the whole
  # cluster (docs/testbed.md "CPU per byte read"). DUALPATH_TESTBED_MTU overrides (1500 to compare).
  MTU=${DUALPATH_TESTBED_MTU:-9000}
  [[ $MTU =~ ^[0-9]+$ ]] && ((MTU >= 1280 && MTU <= 65535)) ||
    die "DUALPATH_TESTBED_MTU=$MTU: not an MTU in 1280..65535"
  local P="dp-$NAME"
  local t0
  t0=$(now_ms)

  local tool
  for tool in ip tc nsenter unshare glusterd gluster glusterfs; do
    command -v "$tool" >/dev/null ||
      die "$tool not found: install iproute2 util-linux glusterfs-server glusterfs-client (scripts/setup.sh)"
  done
  [[ -e $STATE ]] && die "state directory $STATE already exists"
  mkdir -p "$STATE"/{pids,log,brick,mnt,glusterd/lib,glusterd/run} || die "cannot create $STATE"
  : >"$STATE/created"
  [[ -d /var/lib/glusterd && -d /run/gluster ]] ||
    die "/var/lib/glusterd or /run/gluster missing (is glusterfs-server installed?)"

  # Storage namespace with a bridge holding the server's one address; compute switch namespace.
  add_netns "$P.stor"
  add_netns "$P.sw"
  run ip -n "$P.stor" link add sbr type bridge
  run ip -n "$P.stor" addr add "$stor_cidr" dev sbr
  run ip -n "$P.stor" link set sbr up
  run ip -n "$P.sw" link add cbr type bridge
  run ip -n "$P.sw" link set cbr up

  local spec node saddr caddr
  for spec in "$@"; do
    IFS=: read -r node saddr caddr <<<"$spec"
    add_netns "$P.$node"
    # Storage link: stor0 (node) <-> s-NODE (storage bridge port). Ports are isolated so nodes
    # cannot use the storage network to reach each other, only the server.
    run ip link add stor0 netns "$P.$node" type veth peer name "s-$node" netns "$P.stor"
    run ip -n "$P.stor" link set "s-$node" master sbr
    run ip -n "$P.stor" link set "s-$node" type bridge_slave isolated on
    run ip -n "$P.$node" addr add "$saddr/$stor_prefix" dev stor0
    run ip -n "$P.$node" link set stor0 mtu "$MTU"
    run ip -n "$P.stor" link set "s-$node" mtu "$MTU"
    shape "$P.$node" stor0 "$stor_rate" 0
    shape "$P.stor" "s-$node" "$stor_rate" 0
    run ip -n "$P.stor" link set "s-$node" up
    run ip -n "$P.$node" link set stor0 up
    # Compute link: comp0 (node) <-> c-NODE (switch port).
    run ip link add comp0 netns "$P.$node" type veth peer name "c-$node" netns "$P.sw"
    run ip -n "$P.sw" link set "c-$node" master cbr
    run ip -n "$P.$node" addr add "$caddr/$comp_prefix" dev comp0
    run ip -n "$P.$node" link set comp0 mtu "$MTU"
    run ip -n "$P.sw" link set "c-$node" mtu "$MTU"
    shape "$P.$node" comp0 "$comp_rate" "$dscp"
    shape "$P.sw" "c-$node" "$comp_rate" "$dscp"
    run ip -n "$P.sw" link set "c-$node" up
    run ip -n "$P.$node" link set comp0 up
    mkdir -p "$STATE/mnt/$node"
  done
  run ip -n "$P.stor" link set sbr mtu "$MTU"
  run ip -n "$P.sw" link set cbr mtu "$MTU"
  local t_net
  t_net=$(now_ms)
  crash_point network

  # glusterd in the storage netns and a private mount namespace whose /var/lib/glusterd and
  # /run/gluster are the testbed's own directories: nothing outside STATE is written.
  local g=$STATE/glusterd
  cat >"$g/glusterd.vol" <<EOF
volume management
    type mgmt/glusterd
    option working-directory /var/lib/glusterd
    option run-directory /run/gluster
    option logging-directory $STATE/log
    option glusterd-sockfile /run/gluster/glusterd.socket
    option transport-type socket
    option transport.socket.bind-address $stor_addr
    option transport.socket.listen-port 24007
    option transport.socket.keepalive-time 10
    option transport.socket.keepalive-interval 2
    option transport.socket.read-fail-log off
    option ping-timeout 0
    option event-threads 1
    option max-port 60999
end-volume
EOF
  # glusterd start-up runs the geo-replication helper gsyncd (a Python program) ~25 times to
  # write its config: 2-7 s on a loaded 2-core machine. The testbed has no geo-replication, so
  # inside the private mount namespace a stub answers instead (nothing outside is touched).
  local gsyncd=""
  for f in /usr/lib/*/glusterfs/gsyncd /usr/libexec/glusterfs/gsyncd; do
    [[ -x $f ]] && gsyncd=$f && break
  done
  printf '#!/bin/sh\necho gsyncd.py testbed-stub\n' >"$g/gsyncd-stub"
  chmod +x "$g/gsyncd-stub"
  echo "glusterd $STATE/pids/glusterd.pid" >>"$STATE/created"
  run_daemon glusterd nsenter --net="/var/run/netns/$P.stor" unshare --mount \
    --propagation private -- \
    bash -c 'mount --bind "$1/lib" /var/lib/glusterd && mount --bind "$1/run" /run/gluster &&
             { [[ -z $4 ]] || mount --bind "$1/gsyncd-stub" "$4"; } &&
             exec glusterd -f "$1/glusterd.vol" -p "$2" -l "$3" --log-level WARNING' \
    _ "$g" "$STATE/pids/glusterd.pid" "$STATE/log/glusterd.log" "$gsyncd"
  wait_for 10 "glusterd's pid file" test -s "$STATE/pids/glusterd.pid"
  local gpid
  gpid=$(cat "$STATE/pids/glusterd.pid")
  gcli() { nsenter -t "$gpid" --mount --net -- gluster --mode=script \
    --log-file="$STATE/log/cli.log" --glusterd-sock=/run/gluster/glusterd.socket "$@"; }
  wait_for 20 "glusterd to answer" gcli volume list
  run gcli volume create dpvol "$stor_addr:$STATE/brick" force
  # Client-side caches would serve re-reads without crossing the storage link.
  run gcli volume set dpvol performance.quick-read off performance.io-cache off
  # Threads sized for a machine that runs the whole cluster on a few cores (GlusterFS's defaults,
  # 16 brick I/O threads and 2 event threads per process plus client I/O threads, are sized for a
  # storage server of its own): one event thread per client and brick, 4 brick I/O threads, no
  # client I/O threads. And the brick serves reads from its page cache: a client's O_DIRECT
  # still bypasses the node's page cache (every read crosses the node's storage link), but the
  # brick does not pass it on to the machine's virtual disk (network.remote-dio), whose latency
  # and contention are not the storage link the testbed emulates. With MTU 9000 this took the
  # machine's CPU per byte read through a mount to about half (docs/testbed.md "CPU per byte
  # read"). DUALPATH_TESTBED_VOLUME_OPTS ("key value ...") adds or overrides options, e.g.
  # GlusterFS's defaults to compare.
  run gcli volume set dpvol performance.client-io-threads off performance.io-thread-count 4 \
    client.event-threads 1 server.event-threads 1 network.remote-dio enable
  if [[ -n ${DUALPATH_TESTBED_VOLUME_OPTS:-} ]]; then
    # shellcheck disable=SC2086
    run gcli volume set dpvol $DUALPATH_TESTBED_VOLUME_OPTS
  fi
  run gcli volume start dpvol
  local t_vol
  t_vol=$(now_ms)
  crash_point glusterd

  # FUSE clients: each runs in its node's network namespace (so its traffic crosses that node's
  # storage link) but in the root mount namespace (so the mount is visible to everyone).
  mount_client() { # NETNS MOUNTPOINT TAG
    echo "mount $2" >>"$STATE/created"
    run_daemon "mnt-$3" nsenter --net="/var/run/netns/$1" -- glusterfs --volfile-server="$stor_addr" \
      --volfile-id=dpvol --log-file="$STATE/log/mnt-$3.log" --log-level=WARNING \
      --pid-file="$STATE/pids/mnt-$3.pid" "$2"
  }
  mkdir -p "$STATE/mnt/_admin"
  mount_client "$P.stor" "$STATE/mnt/_admin" _admin
  for spec in "$@"; do
    IFS=: read -r node saddr caddr <<<"$spec"
    mount_client "$P.$node" "$STATE/mnt/$node" "$node"
  done
  for spec in _admin "$@"; do
    node=${spec%%:*}
    wait_for 20 "the FUSE mount of $node" is_mounted "$STATE/mnt/$node"
    wait_for 20 "the FUSE mount of $node to answer" stat -f "$STATE/mnt/$node"
  done
  # A veth's carrier follows its peer's a moment after `link set up` (~1 s seen on compute links)
  # and UCX refuses an interface without it, so `up` returns only once every node link runs.
  for spec in "$@"; do
    node=${spec%%:*}
    wait_for 10 "carrier on $node stor0" link_running "$P.$node" stor0
    wait_for 10 "carrier on $node comp0" link_running "$P.$node" comp0
  done
  crash_point mounts
  local t_end
  t_end=$(now_ms)
  echo "timing_ms network=$((t_net - t0)) glusterfs=$((t_vol - t_net)) mounts=$((t_end - t_vol)) total=$((t_end - t0))"
}

# Kills the processes in a list of PIDs: TERM, wait up to 1 s, then KILL. glusterd takes ~2.5 s
# to act on TERM (it winds down its bricks), and the brick and its data are about to be deleted
# anyway, so there is nothing to lose by not waiting for it; FUSE clients are unmounted first.
kill_pids() {
  local pids=("$@") p alive start
  ((${#pids[@]})) || return 0
  kill -TERM "${pids[@]}" 2>/dev/null
  start=$(now_ms)
  while :; do
    alive=()
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive+=("$p"); done
    ((${#alive[@]})) || return 0
    if (($(now_ms) - start > 1000)); then
      kill -KILL "${alive[@]}" 2>/dev/null
      return 0
    fi
    sleep 0.05
  done
}

# shm_files NAME: the /dev/shm files of cluster NAME, one per line, matched exactly (docs/testbed.md
# "What down removes"): the nodes' shared-memory pools that `cluster run` gives its engines
# (dualpath-NAME-NODE.pool, NODE = p<i> or d<i>, docs/replay.md), and the DRAM tier files of store
# nodes killed rather than stopped (dualpath-store-STORE-ID, ID = 1, 2, ...; STORE = NAME for
# `cluster up --store`, NAME.SYSTEM for `cluster run --store`, docs/store.md "In the system").
# A cluster name has no '.' and no glob characters, but may contain '-': an open-ended pattern
# such as dualpath-NAME-* would also match cluster NAME-b's files, so every part after NAME is
# spelled out.
shm_files() {
  local name=$1 f rest
  # A glob for the fixed prefix, then the rest of the name checked whole.
  for f in "/dev/shm/dualpath-$name-"*.pool; do
    rest=${f#"/dev/shm/dualpath-$name-"}
    [[ -e $f && $rest =~ ^[pd][0-9]+\.pool$ ]] && printf '%s\n' "$f"
  done
  for f in "/dev/shm/dualpath-store-$name-"*; do
    rest=${f#"/dev/shm/dualpath-store-$name-"}
    [[ -e $f && $rest =~ ^[0-9]+$ ]] && printf '%s\n' "$f"
  done
  for f in "/dev/shm/dualpath-store-$name."*; do
    rest=${f#"/dev/shm/dualpath-store-$name."}
    [[ -e $f && $rest =~ ^[a-z]+(-[a-z]+)*-[0-9]+$ ]] && printf '%s\n' "$f"
  done
  return 0
}

cmd_down() {
  (($# == 2)) || die "usage: down STATE NAME"
  STATE=$1 NAME=$2
  local P="dp-$NAME" failed=0 m ns
  local -a namespaces=()
  # Namespaces of this cluster: by name (works after a crash that lost STATE) and from the record.
  while read -r ns _; do
    [[ $ns == "$P."* ]] && namespaces+=("$ns")
  done < <(ip netns list 2>/dev/null)
  if [[ -f $STATE/created ]]; then
    while read -r kind what; do
      [[ $kind == netns ]] || continue
      [[ " ${namespaces[*]} " == *" $what "* ]] || { [[ -e /var/run/netns/$what ]] && namespaces+=("$what"); }
    done <"$STATE/created"
  fi

  # 1. Unmount every FUSE mount under STATE (clients exit when their mount goes away).
  local -a mounts=()
  while read -r m; do mounts+=("$m"); done < <(awk -v p="$STATE/" 'index($5, p) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
  for m in "${mounts[@]}"; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || {
      echo "testbed: cannot unmount $m" >&2
      failed=1
    }
  done

  # 2. Stop the processes we started: recorded PID files (FUSE clients, glusterd) and anything
  # still running inside the cluster's namespaces (brick processes, `cluster exec` leftovers).
  local -a pids=()
  local f p
  for f in "$STATE"/pids/*.pid; do
    [[ -f $f ]] || continue
    p=$(cat "$f" 2>/dev/null)
    # Only if the PID is still the daemon we started (a recycled PID must not be killed).
    [[ $p =~ ^[0-9]+$ ]] && grep -qa -e gluster "/proc/$p/cmdline" 2>/dev/null && pids+=("$p")
  done
  for ns in "${namespaces[@]}"; do
    while read -r p; do [[ $p =~ ^[0-9]+$ ]] && pids+=("$p"); done < <(ip netns pids "$ns" 2>/dev/null)
  done
  kill_pids "${pids[@]}"

  # 3. Namespaces (deleting one deletes the veth ends, bridges and qdiscs in it).
  for ns in "${namespaces[@]}"; do
    ip netns del "$ns" 2>/dev/null || {
      [[ -e /var/run/netns/$ns ]] && {
        echo "testbed: cannot delete netns $ns" >&2
        failed=1
      }
    }
  done

  # 4. The cluster's own files in /dev/shm (shm_files below): every engine and store node of the
  # cluster is gone now.
  local -a shm=()
  while IFS= read -r f; do shm+=("$f"); done < <(shm_files "$NAME")
  ((${#shm[@]} == 0)) || rm -f -- "${shm[@]}" || failed=1

  # 5. State, but never while anything is still mounted below it (rm would recurse into it).
  if [[ -e $STATE ]]; then
    if awk -v p="$STATE/" 'index($5, p) == 1 { f = 1 } END { exit !f }' /proc/self/mountinfo; then
      echo "testbed: still mounted under $STATE; state kept" >&2
      failed=1
    else
      rm -rf --one-file-system "$STATE" || failed=1
    fi
  fi
  return $failed
}

case "${1:-}" in
  shm-files) # for tests: what `down` would remove from /dev/shm
    shift
    shm_files "$1"
    ;;
  up)
    shift
    cmd_up "$@"
    ;;
  down)
    shift
    cmd_down "$@"
    ;;
  *) die "usage: testbed.sh up|down ..." ;;
esac
