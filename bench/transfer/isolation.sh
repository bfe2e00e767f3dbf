#!/usr/bin/env bash
# Acceptance 2 of issue 6: traffic-class isolation on a shaped testbed compute link.
#
# A 1P1D testbed cluster with --dscp (the compute links get an htb tree: DSCP 46 → a class with
# 99% of the rate and priority, everything else → the low class; see docs/testbed.md). From p0
# to d0, a probe sends small high-class puts one at a time (4 KiB, depth 1) and reports its batch
# latency percentiles, in three phases measured in the same run:
#   idle      the probe alone on the link;
#   classes   with a low-class bulk stream (1 MiB puts) saturating the same link;
#   none      the same bulk stream, with the probe unmarked (--no-dscp): no classes.
# The p99 ratio loaded/idle is the figure; the bulk stream's goodput shows it kept the link busy.
#
#   bench/transfer/isolation.sh [path/to/dualpath]      (needs root; builds and removes a cluster)
# Environment: COMP_RATE=2gbit, PROBES=2000, BULK_SECONDS (derived), NAME=txiso,
#   GSO_MAX (unset): if set, gso_max_size of every compute interface (e.g. 1500: MTU-sized
#   packets reach the qdisc, as on a switch port, instead of 64 KiB GSO super-packets)
set -euo pipefail
BIN=$(realpath "${1:-build/release/bin/dualpath}")
COMP_RATE=${COMP_RATE:-2gbit}
PROBES=${PROBES:-2000}
NAME=${NAME:-txiso}
PORT=$((20000 + RANDOM % 20000))
# Only the compute link: UCX's tcp transport would otherwise add the storage interface as a rail.
export UCX_NET_DEVICES=comp0

[[ $(id -u) == 0 ]] || { echo "isolation.sh: needs root" >&2; exit 2; }
trap '"$BIN" cluster down --name "$NAME" >/dev/null 2>&1 || true' EXIT
"$BIN" cluster down --name "$NAME" >/dev/null 2>&1 || true
"$BIN" cluster up --name "$NAME" --pd 1P1D --comp-rate "$COMP_RATE" --dscp >/dev/null
D0=$("$BIN" cluster get --name "$NAME" d0.compute_addr)
NS_P=dp-$NAME.p0
NS_D=dp-$NAME.d0
if [[ -n "${GSO_MAX:-}" ]]; then
  ip netns exec "$NS_P" ip link set dev comp0 gso_max_size "$GSO_MAX"
  ip netns exec "$NS_D" ip link set dev comp0 gso_max_size "$GSO_MAX"
  for port in c-p0 c-d0; do
    ip netns exec "dp-$NAME.sw" ip link set dev "$port" gso_max_size "$GSO_MAX"
  done
fi
tmp=$(mktemp -d)

server() {  # server PORT LOG: a bench server on d0, waits until it listens
  ip netns exec "$NS_D" "$BIN" bench transfer --listen "$D0:$1" --tls tcp >"$2" 2>&1 &
  for _ in $(seq 1 200); do grep -q "listening on" "$2" && return 0; sleep 0.05; done
  echo "server did not start: $(cat "$2")" >&2
  exit 1
}

probe() {  # probe PORT EXTRA...: small high-class puts, one at a time; prints the JSON
  local port=$1
  shift
  ip netns exec "$NS_P" "$BIN" bench transfer --connect "$D0:$port" --tls tcp --class high \
    --size 4096 --batch 1 --depth 1 --iters "$PROBES" --warmup 50 --json "$@"
}

bulk() {  # bulk PORT SECONDS EXTRA...: low-class 1 MiB puts saturating the link
  local port=$1 secs=$2
  shift 2
  ip netns exec "$NS_P" "$BIN" bench transfer --connect "$D0:$port" --tls tcp --class low \
    --size 1048576 --batch 4 --depth 4 --duration "$secs" --json "$@"
}

field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p"; }

# Idle, and how long the probe takes (the bulk stream must outlast the loaded probes).
PORT=$((PORT + 1)); server $PORT "$tmp/s1"
t0=$(date +%s%N)
idle=$(probe $PORT)
t1=$(date +%s%N)
wait
probe_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%d", (b - a) / 1e9 + 1 }')
BULK_SECONDS=${BULK_SECONDS:-$(( probe_s * 6 + 6 ))}

loaded() {  # loaded BASE_PORT PROBE_EXTRA...: bulk in the background, probe once it has started
  local pb=$1 pp=$(($1 + 1))
  shift
  server $pb "$tmp/sb"
  server $pp "$tmp/sp"
  bulk $pb "$BULK_SECONDS" >"$tmp/bulk" &
  local bulk_pid=$!
  # Start probing once the bulk stream has filled the link: watch d0's received bytes grow by
  # at least one second's worth of the link rate (bounded wait, no fixed sleep).
  local rate_bps
  rate_bps=$("$BIN" cluster get --name "$NAME" comp_rate_bps)
  local want=$(( rate_bps / 8 ))
  local rx0
  rx0=$(ip netns exec "$NS_D" cat /sys/class/net/comp0/statistics/rx_bytes)
  for _ in $(seq 1 400); do
    local rx
    rx=$(ip netns exec "$NS_D" cat /sys/class/net/comp0/statistics/rx_bytes)
    (( rx - rx0 >= want )) && break
    sleep 0.05
  done
  probe $pp "$@"
  wait "$bulk_pid"
  wait
}

with_classes=$(loaded $((PORT + 10)))
bulk_classes=$(field gbps <"$tmp/bulk")
without=$(loaded $((PORT + 20)) --no-dscp)
bulk_none=$(field gbps <"$tmp/bulk")

p99_idle=$(echo "$idle" | field p99_us)
p99_cls=$(echo "$with_classes" | field p99_us)
p99_none=$(echo "$without" | field p99_us)
echo "compute link $COMP_RATE (htb, DSCP 46 prioritised), gso_max_size ${GSO_MAX:-default}, probe: 4 KiB high-class puts, depth 1, $PROBES each"
printf "%-34s %10s %10s %14s %12s\n" phase p50_us p99_us p99/idle bulk_gbps
printf "%-34s %10s %10s %14s %12s\n" "idle link" "$(echo "$idle" | field p50_us)" "$p99_idle" 1.00 -
printf "%-34s %10s %10s %14s %12s\n" "bulk low + probe high (classes)" \
  "$(echo "$with_classes" | field p50_us)" "$p99_cls" \
  "$(awk -v a="$p99_cls" -v b="$p99_idle" 'BEGIN { printf "%.2f", a / b }')" "$bulk_classes"
printf "%-34s %10s %10s %14s %12s\n" "bulk low + probe unmarked (none)" \
  "$(echo "$without" | field p50_us)" "$p99_none" \
  "$(awk -v a="$p99_none" -v b="$p99_idle" 'BEGIN { printf "%.2f", a / b }')" "$bulk_none"
rm -rf "$tmp"
