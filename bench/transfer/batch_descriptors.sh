#!/usr/bin/env bash
# Acceptance 3 of issue 6: batches of >= 1,000 small (4-16 KiB) descriptors. Reports descriptors
# per second and the submission cost per descriptor, split into the caller's side (Submit:
# validation against the registered ranges + queueing) and the progress thread's side (the UCX
# put calls and the batch's flush), with batch=1 of the same size measured in the same run as the
# baseline the batching amortises.
#
#   bench/transfer/batch_descriptors.sh [path/to/dualpath]
# Environment: MODES="tcp shm", SIZES="4096 16384", BATCH=1000, ITERS=200, ADDR, SERVER_NS,
# CLIENT_NS (as in vs_perftest.sh).
set -euo pipefail
BIN=${1:-build/release/bin/dualpath}
MODES=${MODES:-"tcp shm"}
SIZES=${SIZES:-"4096 16384"}
BATCH=${BATCH:-1000}
ITERS=${ITERS:-200}
ADDR=${ADDR:-127.0.0.1}
PORT=${PORT:-$((20000 + RANDOM % 20000))}
[[ -n "${NET_DEVICES:-}" ]] && export UCX_NET_DEVICES=$NET_DEVICES
RUN=0

ns_exec() {
  local ns=$1
  shift
  if [[ -n "$ns" ]]; then ip netns exec "$ns" "$@"; else "$@"; fi
}

run() {  # run TLS SIZE BATCH ITERS PORT -> JSON line
  local PORT=$5
  local log
  log=$(mktemp)
  ns_exec "${SERVER_NS:-}" "$BIN" bench transfer --listen "$ADDR:$PORT" --tls "$1" >"$log" 2>&1 &
  local srv=$!
  for _ in $(seq 1 200); do grep -q "listening on" "$log" && break; sleep 0.05; done
  ns_exec "${CLIENT_NS:-}" "$BIN" bench transfer --connect "$ADDR:$PORT" --tls "$1" \
    --size "$2" --batch "$3" --depth 2 --iters "$4" --op put --json
  wait "$srv" || true
  rm -f "$log"
}

field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p"; }

printf "%-5s %6s %6s %14s %12s %16s %14s\n" mode size batch descs_per_s gbps submit_ns/desc post_ns/desc
for mode in $MODES; do
  case $mode in tcp) tls=tcp ;; shm) tls=posix,sysv,cma,self ;; esac
  for size in $SIZES; do
    for b in 1 "$BATCH"; do
      iters=$ITERS
      (( b == 1 )) && iters=$(( ITERS * BATCH / 10 ))  # same order of descriptors
      RUN=$((RUN + 1))
      j=$(run "$tls" "$size" "$b" "$iters" $((PORT + RUN)))
      printf "%-5s %6s %6s %14s %12s %16s %14s\n" "$mode" "$size" "$b" \
        "$(echo "$j" | field descs_per_s)" "$(echo "$j" | field gbps)" \
        "$(echo "$j" | field submit_ns_per_desc)" "$(echo "$j" | field post_ns_per_desc)"
    done
  done
done
