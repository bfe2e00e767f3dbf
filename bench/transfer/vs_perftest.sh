#!/usr/bin/env bash
# Acceptance 1 of issue 6: put bandwidth of `dualpath bench transfer` against `ucx_perftest -t
# ucp_put_bw` with the same UCX_TLS and message size, both run here, interleaved, REPS times.
#
#   bench/transfer/vs_perftest.sh [path/to/dualpath]
#
# Environment:
#   MODES="tcp shm"          transports: tcp (loopback TCP) and/or shm (posix/sysv/cma)
#   SIZES="65536 1048576"    message sizes in bytes
#   REPS=3                   repetitions (the median ratio is reported)
#   BYTES=536870912          bytes moved per run
#   ADDR=127.0.0.1           server address
#   SERVER_NS / CLIENT_NS    run server / client inside these network namespaces (testbed)
#   LINK_GBPS                if set, also report goodput as a fraction of this link rate
#   GOODPUT=0                1 (with SERVER_NS/CLIENT_NS): each rep also measures the link's
#                            goodput with a plain kernel TCP stream (`dualpath cluster blast`,
#                            BLAST_SECONDS=3) and reports dualpath / goodput (median of ratios)
#   NET_DEVICES              UCX_NET_DEVICES for both tools (testbed: comp0, or UCX would also
#                            use the storage link's interface as a second rail)
#   DEPTH=4                  batches in flight for dualpath (ucx_perftest keeps its own window)
#   FOOTPRINT=same           same: dualpath reuses one SIZE-byte buffer per side, as ucx_perftest
#                            does (cache-resident); distinct: every descriptor has its own memory
#   BATCH=1                  puts per dualpath batch (one completion + flush per batch); each
#                            put is still SIZE bytes, as in ucx_perftest
#   SUBMIT=inline            inline: the engine runs with post_on_submit (Submit posts to UCX
#                            itself when the progress thread is asleep, as ucx_perftest posts
#                            from its only thread); queue: every batch is handed to the
#                            progress thread (the engine's default)
# Output: one line per run and a summary table; exit status 0 (figures are for a human/CI log).
set -euo pipefail

BIN=${1:-build/release/bin/dualpath}
MODES=${MODES:-"tcp shm"}
SIZES=${SIZES:-"65536 1048576"}
REPS=${REPS:-3}
BYTES=${BYTES:-536870912}
ADDR=${ADDR:-127.0.0.1}
DEPTH=${DEPTH:-4}
BATCH=${BATCH:-1}
FOOTPRINT=${FOOTPRINT:-same}
EXTRA=()
SUBMIT=${SUBMIT:-inline}
[[ "$FOOTPRINT" == same ]] && EXTRA+=(--same-buffer)
[[ "$SUBMIT" == inline ]] && EXTRA+=(--post-on-submit)
PORT=${PORT:-$((20000 + RANDOM % 20000))}
[[ -n "${NET_DEVICES:-}" ]] && export UCX_NET_DEVICES=$NET_DEVICES
RUN=0  # each run gets its own port: PORT + RUN (functions run in $(...) subshells)

ns_exec() {  # ns_exec NS cmd...
  local ns=$1
  shift
  if [[ -n "$ns" ]]; then ip netns exec "$ns" "$@"; else "$@"; fi
}

tls_for() {
  case $1 in
    tcp) echo tcp ;;
    shm) echo posix,sysv,cma,self ;;
    *) echo "unknown mode $1" >&2; exit 2 ;;
  esac
}

wait_listening() {  # wait_listening FILE: until the server printed its address (bounded)
  for _ in $(seq 1 200); do
    grep -q "listening on" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  echo "server did not start: $(cat "$1")" >&2
  return 1
}

perftest_gbps() {  # perftest_gbps TLS SIZE PORT
  local tls=$1 size=$2 iters=$(( BYTES / $2 )) PORT=$3
  UCX_TLS=$tls ns_exec "${SERVER_NS:-}" ucx_perftest -p "$PORT" >/dev/null 2>&1 &
  local srv=$!
  local out=""
  for _ in $(seq 1 100); do  # the server has no readiness signal: retry the connect
    if out=$(UCX_TLS=$tls ns_exec "${CLIENT_NS:-}" ucx_perftest "$ADDR" -p "$PORT" \
          -t ucp_put_bw -s "$size" -n "$iters" 2>/dev/null); then
      break
    fi
    sleep 0.05
  done
  wait "$srv" 2>/dev/null || true
  # "Final: iters typ_lat avg_lat overall_lat avg_bw overall_bw ..." with MB = 2^20 bytes.
  echo "$out" | awk '/^Final:/ {printf "%.4f\n", $7 * 1048576 * 8 / 1e9}'
}

dualpath_gbps() {  # dualpath_gbps TLS SIZE PORT
  local tls=$1 size=$2 iters=$(( BYTES / $2 / BATCH )) PORT=$3
  local log
  log=$(mktemp)
  ns_exec "${SERVER_NS:-}" "$BIN" bench transfer --listen "$ADDR:$PORT" --tls "$tls" >"$log" 2>&1 &
  local srv=$!
  wait_listening "$log"
  ns_exec "${CLIENT_NS:-}" "$BIN" bench transfer --connect "$ADDR:$PORT" --tls "$tls" \
    --size "$size" --batch "$BATCH" --depth "$DEPTH" --iters "$iters" --op put --json "${EXTRA[@]}" |
    sed -n 's/.*"gbps":\([0-9.]*\).*/\1/p'
  wait "$srv" || true
  rm -f "$log"
}

goodput_gbps() {  # goodput_gbps PORT: one plain TCP stream server ns <- client ns
  local port=$1
  ns_exec "${SERVER_NS:-}" "$BIN" cluster sink --bind "$ADDR" --port "$port" >/dev/null 2>&1 &
  local srv=$!
  local out=""
  for _ in $(seq 1 100); do  # no readiness signal: retry the connect
    if out=$(ns_exec "${CLIENT_NS:-}" "$BIN" cluster blast --to "$ADDR:$port" \
          --seconds "${BLAST_SECONDS:-3}" 2>/dev/null); then
      break
    fi
    sleep 0.05
  done
  wait "$srv" 2>/dev/null || true
  # "sent N bytes in T s = M Mbit/s"
  echo "$out" | awk '{for (i = 1; i <= NF; ++i) if ($i == "Mbit/s") printf "%.4f\n", $(i - 1) / 1000}'
}

declare -A RATIOS OURS THEIRS GOOD GRATIOS
for mode in $MODES; do
  tls=$(tls_for "$mode")
  for size in $SIZES; do
    for rep in $(seq 1 "$REPS"); do
      # Alternate which tool goes first so drift on the shared machine hits both alike.
      RUN=$((RUN + 2))
      pp=$((PORT + RUN)) dp=$((PORT + RUN + 1))
      if (( rep % 2 )); then
        p=$(perftest_gbps "$tls" "$size" $pp); d=$(dualpath_gbps "$tls" "$size" $dp)
      else
        d=$(dualpath_gbps "$tls" "$size" $dp); p=$(perftest_gbps "$tls" "$size" $pp)
      fi
      r=$(awk -v d="$d" -v p="$p" 'BEGIN { if (p > 0) printf "%.3f", d / p; else print "nan" }')
      g=""
      if [[ "${GOODPUT:-0}" == 1 ]]; then
        g=$(goodput_gbps $((PORT + RUN + 10000)))
        gr=$(awk -v d="$d" -v g="$g" 'BEGIN { if (g > 0) printf "%.3f", d / g; else print "nan" }')
        GOOD[$mode,$size]+="$g "
        GRATIOS[$mode,$size]+="$gr "
        g=" goodput_gbps=$g of_goodput=$gr"
      fi
      echo "run mode=$mode size=$size batch=$BATCH rep=$rep perftest_gbps=$p dualpath_gbps=$d ratio=$r$g"
      RATIOS[$mode,$size]+="$r "
      OURS[$mode,$size]+="$d "
      THEIRS[$mode,$size]+="$p "
    done
  done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo
echo "dualpath: --batch $BATCH --depth $DEPTH footprint=$FOOTPRINT submit=$SUBMIT; $REPS runs each, medians"
printf "%-5s %9s %14s %14s %12s" mode size perftest_gbps dualpath_gbps median_ratio
[[ -n "${LINK_GBPS:-}" ]] && printf " %12s" of_link
[[ "${GOODPUT:-0}" == 1 ]] && printf " %12s %12s" goodput_gbps of_goodput
echo
for mode in $MODES; do
  for size in $SIZES; do
    mr=$(echo "${RATIOS[$mode,$size]}" | median)
    md=$(echo "${OURS[$mode,$size]}" | median)
    mp=$(echo "${THEIRS[$mode,$size]}" | median)
    printf "%-5s %9s %14s %14s %12s" "$mode" "$size" "$mp" "$md" "$mr"
    if [[ -n "${LINK_GBPS:-}" ]]; then
      awk -v d="$md" -v l="$LINK_GBPS" 'BEGIN { printf " %12.3f", d / l }'
    fi
    if [[ "${GOODPUT:-0}" == 1 ]]; then
      printf " %12s %12s" "$(echo "${GOOD[$mode,$size]}" | median)" \
        "$(echo "${GRATIOS[$mode,$size]}" | median)"
    fi
    echo
  done
done
