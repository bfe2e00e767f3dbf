#!/usr/bin/env bash
# Issue 28 acceptance 2 on the emulated cluster (root): the decode engine's continuous batching
# against the one-at-a-time engine (`engine --decode-batching serial`), in one script, same
# binary, same workload: 1P1D, 16 agents, the I/O-bound synthetic workload, DualPath. Runs
# alternate serial / continuous REPS times (so machine load hits both alike) and every run checks
# outputs (mismatches must be 0). Prints per run: DE TTST p50 (and mean), JCT, TTFT p50, TPOT
# and the load average before the run; then the medians' ratios continuous / serial. The JSON of
# each run is kept in OUT_DIR.
#
# usage: scripts/replay/decode_batching.sh [DUALPATH_BINARY]   (default build/release/bin/dualpath)
# env:   AGENTS (16), TURNS (30), APPEND (16), GEN (8), MAX_CONTEXT (3072), STOR_RATE (400mbit),
#        COMP_RATE (2gbit), SYSTEM (dualpath), REPS (1), OUT_DIR (build/decode-batching),
#        NAME (batdb: the testbed cluster's name), EXTRA (more `cluster run` arguments)
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(realpath "${1:-$here/build/release/bin/dualpath}")
AGENTS=${AGENTS:-16}
TURNS=${TURNS:-30}
APPEND=${APPEND:-16}
GEN=${GEN:-8}
MAX_CONTEXT=${MAX_CONTEXT:-3072}
STOR_RATE=${STOR_RATE:-400mbit}
COMP_RATE=${COMP_RATE:-2gbit}
SYSTEM=${SYSTEM:-dualpath}
REPS=${REPS:-1}
OUT_DIR=${OUT_DIR:-$here/build/decode-batching}
NAME=${NAME:-batdb}
EXTRA=${EXTRA:-}
mkdir -p "$OUT_DIR"
rm -f "$OUT_DIR"/serial-*.json "$OUT_DIR"/continuous-*.json "$OUT_DIR"/load-*.txt
trap '"$bin" cluster down --name "$NAME" >/dev/null 2>&1' EXIT

run() { # mode rep
  local mode=$1 rep=$2
  cut -d' ' -f1-3 /proc/loadavg >"$OUT_DIR/load-$mode-$rep.txt"
  echo "=== $mode rep $rep: 1P1D $SYSTEM agents=$AGENTS turns=$TURNS (load $(cat "$OUT_DIR/load-$mode-$rep.txt"))"
  # shellcheck disable=SC2086
  "$bin" cluster run --name "$NAME" --pd 1P1D --stor-rate "$STOR_RATE" --comp-rate "$COMP_RATE" \
    --system "$SYSTEM" --workload synthetic --agents "$AGENTS" --turns "$TURNS" \
    --append "$APPEND" --gen "$GEN" --max-context "$MAX_CONTEXT" \
    --engine-arg=--decode-batching --engine-arg="$mode" \
    --json "$OUT_DIR/$mode-$rep.json" $EXTRA
  echo "=== $mode rep $rep: exit $?"
}

for ((k = 1; k <= REPS; k++)); do
  # The order alternates between reps so that neither mode always runs first.
  if ((k % 2 == 1)); then run serial "$k"; run continuous "$k"; else run continuous "$k"; run serial "$k"; fi
done

python3 - "$OUT_DIR" "$REPS" <<'PY'
import json, os, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
rows = {"serial": [], "continuous": []}
for mode in rows:
    for k in range(1, reps + 1):
        p = os.path.join(out, f"{mode}-{k}.json")
        if not os.path.exists(p):
            print(f"{mode} rep {k}: no result ({p})")
            continue
        r = json.load(open(p))["results"][0]
        load = open(os.path.join(out, f"load-{mode}-{k}.txt")).read().strip()
        rows[mode].append(r)
        print(f"{mode:10s} rep {k}: TTST p50 {1e3*r['ttst_p50_s']:.1f} ms (mean {1e3*r['ttst_s']:.1f}), "
              f"JCT {r['jct_s']:.2f} s, TTFT p50 {r['ttft_p50_s']:.2f} s, TPOT {1e3*r['tpot_s']:.1f} ms, "
              f"requests {r['requests']}, failed {r['failed']}, mismatches {r['mismatches']}; load before {load}")
if rows["serial"] and rows["continuous"]:
    med = {m: {k: statistics.median(r[k] for r in v) for k in ("ttst_p50_s", "jct_s")}
           for m, v in rows.items()}
    ttst = med["continuous"]["ttst_p50_s"] / med["serial"]["ttst_p50_s"]
    jct = med["continuous"]["jct_s"] / med["serial"]["jct_s"]
    print(f"continuous / serial: TTST p50 {ttst:.3f}x (target <= 0.5: "
          f"{'HOLDS' if ttst <= 0.5 else 'does not hold'}), JCT {jct:.3f}x (target <= 1: "
          f"{'HOLDS' if jct <= 1.0 else 'does not hold'})")
PY
