#!/usr/bin/env bash
# Issue 28 acceptance 3 on the emulated cluster (root): attention balance across the prefill
# engine's ranks with DualPath §6.2 packing against round-robin chunk placement, side by side, in
# one script, same binary, same workload: 1P1D, the synthetic agentic workload, DualPath, the PE
# batching (`engine --prefill-batching batched --ranks R`) with `--rank-placement packed` and
# `round-robin`, the DE continuously batching. Runs alternate the two placements REPS times (so
# machine load hits both alike) and every run checks outputs (mismatches must be 0). Prints per
# run: forward batches, requests per batch, attention max/avg across the ranks (per batch: mean
# and p50; time-weighted: Σ max / Σ avg; and the same over full batches, those with >= R
# requests), JCT, TTFT p50, and the load average before the run. The JSON of each run is kept in
# OUT_DIR.
#
# usage: scripts/replay/prefill_ranks.sh [DUALPATH_BINARY]   (default build/release/bin/dualpath)
# env:   RANKS (4), QUOTA_MS (compute quota per rank, 20), AGENTS (32), TURNS (12), APPEND (64),
#        GEN (4), MAX_CONTEXT (3072), STOR_RATE (400mbit), COMP_RATE (2gbit), SYSTEM (dualpath),
#        REPS (1), OUT_DIR (build/prefill-ranks), NAME (ranksm: the testbed cluster's name),
#        EXTRA (more `cluster run` arguments)
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(realpath "${1:-$here/build/release/bin/dualpath}")
RANKS=${RANKS:-4}
QUOTA_MS=${QUOTA_MS:-20}
AGENTS=${AGENTS:-32}
TURNS=${TURNS:-12}
APPEND=${APPEND:-64}
GEN=${GEN:-4}
MAX_CONTEXT=${MAX_CONTEXT:-3072}
STOR_RATE=${STOR_RATE:-400mbit}
COMP_RATE=${COMP_RATE:-2gbit}
SYSTEM=${SYSTEM:-dualpath}
REPS=${REPS:-1}
OUT_DIR=${OUT_DIR:-$here/build/prefill-ranks}
NAME=${NAME:-ranksm}
EXTRA=${EXTRA:-}
mkdir -p "$OUT_DIR"
rm -f "$OUT_DIR"/packed-*.json "$OUT_DIR"/round-robin-*.json "$OUT_DIR"/load-*.txt
trap '"$bin" cluster down --name "$NAME" >/dev/null 2>&1' EXIT

run() { # placement rep
  local placement=$1 rep=$2
  cut -d' ' -f1-3 /proc/loadavg >"$OUT_DIR/load-$placement-$rep.txt"
  echo "=== $placement rep $rep: 1P1D $SYSTEM ranks=$RANKS quota=${QUOTA_MS}ms agents=$AGENTS turns=$TURNS (load $(cat "$OUT_DIR/load-$placement-$rep.txt"))"
  # shellcheck disable=SC2086
  "$bin" cluster run --name "$NAME" --pd 1P1D --stor-rate "$STOR_RATE" --comp-rate "$COMP_RATE" \
    --system "$SYSTEM" --workload synthetic --agents "$AGENTS" --turns "$TURNS" \
    --append "$APPEND" --gen "$GEN" --max-context "$MAX_CONTEXT" \
    --engine-arg=--prefill-batching --engine-arg=batched \
    --engine-arg=--ranks --engine-arg="$RANKS" \
    --engine-arg=--rank-placement --engine-arg="$placement" \
    --engine-arg=--compute-quota-ms --engine-arg="$QUOTA_MS" \
    --engine-arg=--decode-batching --engine-arg=continuous \
    --json "$OUT_DIR/$placement-$rep.json" $EXTRA
  echo "=== $placement rep $rep: exit $?"
}

for ((k = 1; k <= REPS; k++)); do
  # The order alternates between reps so that neither placement always runs first.
  if ((k % 2 == 1)); then run packed "$k"; run round-robin "$k"; else run round-robin "$k"; run packed "$k"; fi
done

python3 - "$OUT_DIR" "$REPS" <<'PY'
import json, os, sys
out, reps = sys.argv[1], int(sys.argv[2])
def fmt(b):
    if not b or b.get("mean") is None:
        return "n/a"
    return f"mean {b['mean']:.3f} p50 {b['p50']:.3f} weighted {b['weighted']:.3f} ({b['batches']} batches)"
for placement in ("packed", "round-robin"):
    for k in range(1, reps + 1):
        p = os.path.join(out, f"{placement}-{k}.json")
        if not os.path.exists(p):
            print(f"{placement} rep {k}: no result ({p})")
            continue
        r = json.load(open(p))["results"][0]
        load = open(os.path.join(out, f"load-{placement}-{k}.txt")).read().strip()
        print(f"{placement:11s} rep {k}: JCT {r['jct_s']:.2f} s, TTFT p50 {r['ttft_p50_s']:.2f} s, "
              f"requests {r['requests']}, failed {r['failed']}, mismatches {r['mismatches']}; load before {load}")
        for e in r.get("prefill_batches") or []:
            print(f"    {e['engine']}: {e['batches']} batches, {e['mean_requests']:.2f} requests/batch "
                  f"(max {e['max_requests']}), {e['mean_tokens']:.0f} tokens/batch, ranks {e['ranks']}, "
                  f"rank attention s {[round(x, 2) for x in e['rank_attention_s']]}")
            print(f"      attention max/avg, all batches:  {fmt(e['attention_max_avg'])}")
            print(f"      attention max/avg, full batches: {fmt(e['attention_max_avg_full'])}")
PY
