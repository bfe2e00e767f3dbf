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
#   cpu       the same bulk stream on p0's *storage* link (to a server in the storage namespace;
#             the cluster's storage links run at COMP_RATE): the probe's link stays idle but the
#             machine does the same sending, receiving and shaping work. This control separates
#             CPU contention (on a small shared VM, wake-up latency of the probe's processes)
#             from queueing on the link, which is all the traffic classes can remove.
# The p99 ratio loaded/idle is the figure; the bulk stream's goodput shows it kept the link busy.
#
#   bench/transfer/isolation.sh [path/to/dualpath]      (needs root; builds and removes a cluster)
# Environment: COMP_RATE=2gbit, PROBES=2000, REPS=3, BULK_SECONDS (derived), NAME=txiso,
#   GSO_MAX (unset): if set, gso_max_size of every compute interface (e.g. 1500: MTU-sized
#   packets reach the qdisc, as on a switch port, instead of 64 KiB GSO super-packets)
#   PROBE_SCHED (unset): command prefix for the probe's two processes, e.g. "chrt -f 10"
#   (real-time scheduling: removes most CPU wake-up delay, leaving the network's share)
#   PROBE_ARGS (unset): extra `bench transfer` options of the probe client (e.g.
#   --post-on-submit)
set -euo pipefail
BIN=$(realpath "${1:-build/release/bin/dualpath}")
COMP_RATE=${COMP_RATE:-2gbit}
PROBES=${PROBES:-2000}
REPS=${REPS:-3}
NAME=${NAME:-txiso}
PORT=$((20000 + RANDOM % 20000))

[[ $(id -u) == 0 ]] || { echo "isolation.sh: needs root" >&2; exit 2; }
trap '"$BIN" cluster down --name "$NAME" >/dev/null 2>&1 || true' EXIT
"$BIN" cluster down --name "$NAME" >/dev/null 2>&1 || true
"$BIN" cluster up --name "$NAME" --pd 1P1D --comp-rate "$COMP_RATE" --stor-rate "$COMP_RATE" \
  --dscp >/dev/null
D0=$("$BIN" cluster get --name "$NAME" d0.compute_addr)
STOR=$("$BIN" cluster get --name "$NAME" storage.address)
NS_S=dp-$NAME.stor
NS_P=dp-$NAME.p0
NS_D=dp-$NAME.d0
read -r -a SCHED <<<"${PROBE_SCHED:-}"
read -r -a PARGS <<<"${PROBE_ARGS:-}"
if [[ -n "${GSO_MAX:-}" ]]; then
  ip netns exec "$NS_P" ip link set dev comp0 gso_max_size "$GSO_MAX"
  ip netns exec "$NS_D" ip link set dev comp0 gso_max_size "$GSO_MAX"
  for port in c-p0 c-d0; do
    ip netns exec "dp-$NAME.sw" ip link set dev "$port" gso_max_size "$GSO_MAX"
  done
fi
tmp=$(mktemp -d)

# server PORT LOG [NS ADDR [PREFIX...]]: a bench server (default on d0); waits until it listens
server() {
  local port=$1 log=$2.$1 ns=${3:-$NS_D} addr=${4:-$D0}
  shift 4 2>/dev/null || shift $#
  # One log per port: the redirection below truncates asynchronously (in the background job), so
  # a reused log could still show the previous server's "listening on" line.
  rm -f "$log"
  UCX_NET_DEVICES=$(dev_of "$ns") "$@" ip netns exec "$ns" "$BIN" bench transfer \
    --listen "$addr:$port" --tls tcp >"$log" 2>&1 &
  for _ in $(seq 1 200); do grep -q "listening on" "$log" 2>/dev/null && return 0; sleep 0.05; done
  echo "server did not start: $(cat "$log")" >&2
  exit 1
}

# UCX's tcp transport would otherwise add every other interface (the storage link) as a rail.
dev_of() { [[ $1 == "$NS_S" ]] && echo sbr || echo comp0; }

probe() {  # probe PORT EXTRA...: small high-class puts, one at a time; prints the JSON
  local port=$1
  shift
  UCX_NET_DEVICES=comp0 "${SCHED[@]}" ip netns exec "$NS_P" "$BIN" bench transfer \
    --connect "$D0:$port" --tls tcp \
    --class high --size 4096 --batch 1 --depth 1 --iters "$PROBES" --warmup 50 --json \
    "${PARGS[@]}" "$@"
}

bulk() {  # bulk PORT SECONDS ADDR DEV EXTRA...: low-class 1 MiB puts saturating p0's link DEV
  local port=$1 secs=$2 addr=$3 dev=$4
  shift 4
  UCX_NET_DEVICES=$dev ip netns exec "$NS_P" "$BIN" bench transfer --connect "$addr:$port" \
    --tls tcp --class low --size 1048576 --batch 4 --depth 4 --duration "$secs" --json "$@"
}

field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p"; }

idle() {  # idle PORT: the probe alone
  server $1 "$tmp/s1" "$NS_D" "$D0" "${SCHED[@]}"
  probe $1
  wait
}

# How long the probe takes (the bulk stream must outlast the loaded probes).
PORT=$((PORT + 1))
t0=$(date +%s%N)
idle $PORT >/dev/null
t1=$(date +%s%N)
probe_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%d", (b - a) / 1e9 + 1 }')
BULK_SECONDS=${BULK_SECONDS:-$(( probe_s * 6 + 6 ))}

loaded() {  # loaded BASE_PORT WHERE(comp|stor) PROBE_EXTRA...: bulk in the background, probe
  local pb=$1 pp=$(($1 + 1)) where=$2
  shift 2
  local bns=$NS_D baddr=$D0 bdev=comp0 rxdev=comp0
  if [[ $where == stor ]]; then
    bns=$NS_S baddr=$STOR bdev=stor0 rxdev=sbr
  fi
  server $pb "$tmp/sb" "$bns" "$baddr"
  server $pp "$tmp/sp" "$NS_D" "$D0" "${SCHED[@]}"
  bulk $pb "$BULK_SECONDS" "$baddr" "$bdev" >"$tmp/bulk" 2>&1 &
  local bulk_pid=$!
  # Start probing once the bulk stream has filled its link: watch the receiver's bytes grow by
  # at least one second's worth of the link rate (bounded wait, no fixed sleep).
  local rate_bps
  rate_bps=$("$BIN" cluster get --name "$NAME" comp_rate_bps)
  local want=$(( rate_bps / 8 ))
  local rx0
  rx0=$(ip netns exec "$bns" cat /sys/class/net/$rxdev/statistics/rx_bytes)
  for _ in $(seq 1 400); do
    local rx
    rx=$(ip netns exec "$bns" cat /sys/class/net/$rxdev/statistics/rx_bytes)
    (( rx - rx0 >= want )) && break
    sleep 0.05
  done
  probe $pp "$@"
  wait "$bulk_pid"
  wait
  grep -q gbps "$tmp/bulk" ||
    echo "bulk stream failed ($where): $(cat "$tmp/bulk" "$tmp/sb.$pb")" >&2
}

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "nan" }'; }

# Phases interleaved, REPS times: on a shared machine the idle p99 itself moves by 10x between
# minutes, so each rep's ratios use that rep's own idle figure and the medians are reported.
declare -A P50 P99 BULKG RAT
for rep in $(seq 1 "$REPS"); do
  base=$((PORT + rep * 100))
  declare -A J=()
  J[idle]=$(idle $((base + 1)))
  J[classes]=$(loaded $((base + 10)) comp)
  B_classes=$(field gbps <"$tmp/bulk")
  J[none]=$(loaded $((base + 20)) comp --no-dscp)
  B_none=$(field gbps <"$tmp/bulk")
  J[cpu]=$(loaded $((base + 30)) stor)
  B_cpu=$(field gbps <"$tmp/bulk")
  p99_idle=$(echo "${J[idle]}" | field p99_us)
  for ph in idle classes none cpu; do
    echo "raw rep=$rep $ph ${J[$ph]}"
    P50[$ph]+="$(echo "${J[$ph]}" | field p50_us) "
    p99=$(echo "${J[$ph]}" | field p99_us)
    P99[$ph]+="$p99 "
    RAT[$ph]+="$(ratio "$p99" "$p99_idle") "
  done
  BULKG[classes]+="$B_classes " BULKG[none]+="$B_none " BULKG[cpu]+="$B_cpu "
  echo "rep $rep: p99 idle=$p99_idle classes=$(echo "${J[classes]}" | field p99_us)" \
    "none=$(echo "${J[none]}" | field p99_us) cpu=$(echo "${J[cpu]}" | field p99_us) us;" \
    "bulk Gbit/s $B_classes / $B_none / $B_cpu"
done

echo "compute link $COMP_RATE (htb, DSCP 46 prioritised), gso_max_size ${GSO_MAX:-default}," \
  "probe: 4 KiB high-class puts, depth 1, $PROBES each, sched '${PROBE_SCHED:-}'," \
  "args '${PROBE_ARGS:-}'; $REPS reps, medians"
printf "%-34s %10s %10s %16s %12s\n" phase p50_us p99_us "p99/idle(med)" bulk_gbps
row() {  # row LABEL PHASE
  printf "%-34s %10s %10s %16s %12s\n" "$1" "$(echo "${P50[$2]}" | median)" \
    "$(echo "${P99[$2]}" | median)" "$(echo "${RAT[$2]}" | median)" \
    "$(echo "${BULKG[$2]:-}" | median)"
}
row "idle link" idle
row "bulk low + probe high (classes)" classes
row "bulk low + probe unmarked (none)" none
row "bulk on storage link (cpu only)" cpu
echo "classes p99 / cpu-only p99 (medians; the link's share): $(ratio \
  "$(echo "${P99[classes]}" | median)" "$(echo "${P99[cpu]}" | median)")"
rm -rf "$tmp"
