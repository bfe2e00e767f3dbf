#!/usr/bin/env bash
# Issue 16, acceptance 3: a remote get of 1 MiB objects through the store over the testbed's
# 2 Gbit/s compute link, against that link's goodput measured in the same script.
#
# On a 1P1D testbed cluster (brought up here unless it is up already; torn down at the end if it
# was brought up here): etcd, one `dualpath store master` and one `dualpath store node` run in d0's
# namespace on d0's compute address; `dualpath store bench` runs in p0's namespace with another
# host name (so it cannot map d0's tier file) and UCX on tcp over comp0: it puts COUNT objects
# (p0 -> d0), then gets them into a registered buffer (d0 -> p0, timed, every byte checked). The
# baseline is a plain kernel TCP stream in the same direction (`dualpath cluster blast` from d0 to
# a `cluster sink` in p0). Each of REPS rounds measures both, alternating which goes first; the
# script prints each round and the median of the ratios store / goodput.
#
# Usage: sudo bench/store/remote_get.sh [path/to/dualpath]   (default build/release/bin/dualpath)
# Environment: NAME=sg16 (cluster), COMP_RATE=2gbit, COUNT=384, SIZE=1048576, BATCH=8, REPS=3,
#              BLAST_SECONDS=3
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=$(realpath "${1:-build/release/bin/dualpath}")
NAME=${NAME:-sg16}
COMP_RATE=${COMP_RATE:-2gbit}
COUNT=${COUNT:-384}
SIZE=${SIZE:-1048576}
BATCH=${BATCH:-8}
REPS=${REPS:-3}
[[ -x "$BIN" ]] || { echo "remote_get.sh: $BIN is not built" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "remote_get.sh: needs root (network namespaces)" >&2; exit 2; }
command -v etcd >/dev/null || { echo "remote_get.sh: etcd not installed (scripts/setup.sh)" >&2; exit 2; }

WORK=$(mktemp -d /tmp/dualpath-remote-get.XXXXXX)
BROUGHT_UP=0
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  if [[ $BROUGHT_UP == 1 ]]; then "$BIN" cluster down --name "$NAME" >/dev/null 2>&1 || true; fi
  rm -rf "$WORK"
  rm -f "/dev/shm/dualpath-store-$NAME-2"
}
trap cleanup EXIT

if ! "$BIN" cluster status --name "$NAME" >/dev/null 2>&1; then
  "$BIN" cluster up --name "$NAME" --pd 1P1D --comp-rate "$COMP_RATE" >/dev/null
  BROUGHT_UP=1
fi
NS_P=$("$BIN" cluster get --name "$NAME" p0.netns)
NS_D=$("$BIN" cluster get --name "$NAME" d0.netns)
IP_P=$("$BIN" cluster get --name "$NAME" p0.compute_addr)
IP_D=$("$BIN" cluster get --name "$NAME" d0.compute_addr)
RATE=$("$BIN" cluster get --name "$NAME" comp_rate_bps)

wait_for() {  # wait_for FILE TEXT: the text appears in the file (60 s guard)
  for _ in $(seq 1 600); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "remote_get.sh: '$2' never appeared in $1:" >&2
  tail -5 "$1" >&2
  exit 1
}

ip netns exec "$NS_D" etcd --data-dir "$WORK/etcd" --name sg \
  --listen-client-urls "http://$IP_D:2379" --advertise-client-urls "http://$IP_D:2379" \
  --listen-peer-urls "http://$IP_D:2380" --initial-advertise-peer-urls "http://$IP_D:2380" \
  --initial-cluster "sg=http://$IP_D:2380" >"$WORK/etcd.log" 2>&1 &
PIDS+=($!)
wait_for "$WORK/etcd.log" "ready to serve client requests"
ETCD=(--cluster "$NAME" --etcd "$IP_D:2379" --etcd-insecure)
ip netns exec "$NS_D" "$BIN" store master "${ETCD[@]}" --listen "$IP_D:7400" --insecure \
  >"$WORK/master.log" 2>&1 &
PIDS+=($!)
wait_for "$WORK/master.log" "listening on"
UCX_NET_DEVICES=comp0 ip netns exec "$NS_D" "$BIN" store node "${ETCD[@]}" --id 2 --host d0 \
  --dram-mib $(((COUNT * SIZE >> 20) + 64)) --high-watermark 1 --low-watermark 1 \
  --transfer-listen "$IP_D:0" --rpc-listen "$IP_D:0" --ucx-tls tcp --insecure \
  >"$WORK/node.log" 2>&1 &
PIDS+=($!)
wait_for "$WORK/node.log" "store node 2:"
wait_for "$WORK/master.log" "node 2 joined"

store_get_gbps() {  # one round of puts then timed gets: prints the get Gbit/s
  local seed=$1 out
  out=$(UCX_NET_DEVICES=comp0 ip netns exec "$NS_P" "$BIN" store bench "${ETCD[@]}" \
    --master-insecure --host p0 --ucx-tls tcp --size "$SIZE" --count "$COUNT" \
    --batch "$BATCH" --seed "$seed" --registered --expect-all 2>"$WORK/bench.err") || {
    echo "remote_get.sh: store bench failed:" >&2
    tail -5 "$WORK/bench.err" >&2
    exit 1
  }
  echo "$out" >>"$WORK/bench.out"
  echo "$out" | sed -n 's/^get: .* = \([0-9.]*\) Gbit\/s of hits.*/\1/p'
}

goodput_gbps() {  # one kernel TCP stream d0 -> p0: prints Gbit/s
  local port=$((5300 + RANDOM % 1000)) out=""
  ip netns exec "$NS_P" "$BIN" cluster sink --bind "$IP_P" --port "$port" >/dev/null 2>&1 &
  local srv=$!
  for _ in $(seq 1 100); do
    if out=$(ip netns exec "$NS_D" "$BIN" cluster blast --to "$IP_P:$port" \
      --seconds "${BLAST_SECONDS:-3}" 2>/dev/null); then
      break
    fi
    sleep 0.05
  done
  wait "$srv" 2>/dev/null || true
  echo "$out" | awk '{for (i = 1; i <= NF; ++i) if ($i == "Mbit/s") printf "%.4f\n", $(i - 1) / 1000}'
}

echo "store remote get: ${COUNT} x ${SIZE} B objects, batch ${BATCH}, over a $((RATE / 1000000)) Mbit/s compute link (cluster $NAME)"
printf "%-5s %12s %14s %8s\n" round store_gbps goodput_gbps ratio
ratios=()
for r in $(seq 1 "$REPS"); do
  if ((r % 2)); then
    s=$(store_get_gbps "$r"); g=$(goodput_gbps)
  else
    g=$(goodput_gbps); s=$(store_get_gbps "$r")
  fi
  ratio=$(awk -v s="$s" -v g="$g" 'BEGIN { if (g > 0) printf "%.3f", s / g; else print "nan" }')
  ratios+=("$ratio")
  printf "%-5s %12s %14s %8s\n" "$r" "$s" "$g" "$ratio"
done
median=$(printf "%s\n" "${ratios[@]}" | sort -g | awk '{a[NR] = $1} END { print a[int((NR + 1) / 2)] }')
echo "median store / goodput: $median (acceptance: >= 0.9)"
echo "nominal link: $(awk -v r="$RATE" 'BEGIN { printf "%.3f", r / 1e9 }') Gbit/s"
grep '^get:' "$WORK/bench.out" | sed 's/^/  /'
