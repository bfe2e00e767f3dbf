#!/usr/bin/env bash
# A/B of a remote ClusterStore put over UCX tcp between two builds, alternated in one script
# (issue 27, acceptance 1's UCX put row): per round and arm, a fresh etcd, `dualpath store
# master` and `dualpath store node` (2 GiB DRAM tier in /dev/shm) of that arm's binary, then
# bench/python/store_put_cpu.py with that arm's dualpath package (an unpacked wheel directory,
# put first on PYTHONPATH) at 1 MiB and 256 KiB objects. Prints one line per round, arm and size.
#
#   bench/store/put_cpu_ab.sh PYTHON BIN_A WHEELDIR_A BIN_B WHEELDIR_B [ROUNDS=3] [REPS=9]
#
# PYTHON: an interpreter with numpy (e.g. .venv-bench/bin/python). Ports are picked by the OS;
# scratch in $TMPDIR. Needs /usr/bin/etcd (or $ETCD_BIN).
set -euo pipefail
if (($# < 5)); then
  sed -n '2,12p' "$0" >&2
  exit 2
fi
py=$1
here=$(cd "$(dirname "$0")/../.." && pwd)
rounds=${6:-3}
reps=${7:-9}
etcd_bin=${ETCD_BIN:-/usr/bin/etcd}
scratch=$(mktemp -d "${TMPDIR:-/tmp}/put-cpu-ab.XXXXXX")
pids=()
stop() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
trap 'stop; rm -rf "$scratch"' EXIT
port() { "$py" -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
wait_for() {  # FILE TEXT: up to 30 s
  for _ in $(seq 300); do grep -aq "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "put_cpu_ab: '$2' not seen in $1" >&2
  return 1
}
run_arm() {  # NAME BIN WHEELDIR
  local dir=$scratch/$1 c p cluster flags
  rm -rf "$dir" && mkdir -p "$dir"
  c=$(port) p=$(port)
  "$etcd_bin" --name=putab --data-dir="$dir/etcd" --listen-client-urls="http://127.0.0.1:$c" \
    --advertise-client-urls="http://127.0.0.1:$c" --listen-peer-urls="http://127.0.0.1:$p" \
    --initial-advertise-peer-urls="http://127.0.0.1:$p" \
    --initial-cluster="putab=http://127.0.0.1:$p" --log-level=warn >"$dir/etcd.log" 2>&1 &
  pids+=($!)
  cluster=putab$$$1
  flags=(--cluster "$cluster" --etcd "127.0.0.1:$c" --etcd-insecure --insecure)
  "$2" store master "${flags[@]}" --listen 127.0.0.1:0 >"$dir/master.log" 2>&1 &
  pids+=($!)
  wait_for "$dir/master.log" "listening on"
  "$2" store node "${flags[@]}" --id 1 --host node1 --dram-mib 2048 --shm-dir /dev/shm \
    --ttl 10 >"$dir/node.log" 2>&1 &
  local node=$!
  pids+=($node)
  wait_for "$dir/node.log" "joined leader"
  for size in 1048576 262144; do
    echo -n "round $r $1: "
    PYTHONPATH=$3 "$py" "$here/bench/python/store_put_cpu.py" "$cluster" "127.0.0.1:$c" "$node" \
      "$size" "$reps" 2>"$dir/client.err" || { echo "FAILED"; tail -3 "$dir/client.err"; }
  done
  stop
}
for r in $(seq "$rounds"); do
  run_arm A "$2" "$3"
  run_arm B "$4" "$5"
done
