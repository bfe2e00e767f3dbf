#!/usr/bin/env bash
# Issue 28 acceptance 3 on the emulated cluster (root): attention balance across the prefill
# engine's ranks with DualPath §6.2 packing against round-robin chunk placement, side by side, in
# one script, same binary, same workload: 1P1D, the synthetic agentic workload, DualPath, the PE
# batching (`engine --prefill-batching batched --ranks R`), the DE continuously batching. RUNS
# names the configurations, run in turn REPS times (the order rotates between reps, so machine
# load hits all alike); every run checks outputs (mismatches must be 0):
#   packed             §6.2 packing, the time model calibrated to the ranks' measured times,
#                      fine chunks (the engine's defaults)
#   round-robin        chunks dealt out to the ranks in turn (the baseline)
#   packed-fixed       packing with the fixed reference time model (--attention-model fixed)
#   packed-fixed-min64 the same with 64-token minimum chunks: the engine before calibration
# Prints per run: forward batches, requests per batch, attention max/avg across the ranks
# measured (per batch: mean and p50; time-weighted: Σ max / Σ avg; and the same over full
# batches, those with >= R requests) and as the planning model predicted it, the planning and
# reference models' relative error against the measured rank times, the model in use at the end,
# JCT, TTFT p50, and the load average before and after the run. The JSON of each run is kept in
# OUT_DIR.
#
# usage: scripts/replay/prefill_ranks.sh [DUALPATH_BINARY]   (default build/release/bin/dualpath)
# env:   RUNS ("packed round-robin"), RANKS (4), QUOTA_MS (compute quota per rank, 20),
#        AGENTS (32), TURNS (12), APPEND (64), GEN (4), MAX_CONTEXT (3072), STOR_RATE (400mbit),
#        COMP_RATE (2gbit), SYSTEM (dualpath), REPS (1), OUT_DIR (build/prefill-ranks),
#        NAME (ranksm: the testbed cluster's name), EXTRA (more `cluster run` arguments)
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
RUNS=${RUNS:-packed round-robin}
OUT_DIR=${OUT_DIR:-$here/build/prefill-ranks}
NAME=${NAME:-ranksm}
EXTRA=${EXTRA:-}
mkdir -p "$OUT_DIR"
rm -f "$OUT_DIR"/packed*-*.json "$OUT_DIR"/round-robin-*.json "$OUT_DIR"/load-*.txt
trap '"$bin" cluster down --name "$NAME" >/dev/null 2>&1' EXIT

run() { # configuration rep
  local config=$1 rep=$2 placement=packed args=()
  case $config in
    packed) ;;
    round-robin) placement=round-robin ;;
    packed-fixed) args=(--engine-arg=--attention-model --engine-arg=fixed) ;;
    packed-fixed-min64)
      args=(--engine-arg=--attention-model --engine-arg=fixed
        --engine-arg=--min-chunk-tokens --engine-arg=64) ;;
    *) echo "prefill_ranks.sh: unknown configuration '$config' in RUNS" >&2; exit 2 ;;
  esac
  cut -d' ' -f1-3 /proc/loadavg >"$OUT_DIR/load-$config-$rep.txt"
  echo "=== $config rep $rep: 1P1D $SYSTEM ranks=$RANKS quota=${QUOTA_MS}ms agents=$AGENTS turns=$TURNS (load $(cat "$OUT_DIR/load-$config-$rep.txt"))"
  # shellcheck disable=SC2086
  "$bin" cluster run --name "$NAME" --pd 1P1D --stor-rate "$STOR_RATE" --comp-rate "$COMP_RATE" \
    --system "$SYSTEM" --workload synthetic --agents "$AGENTS" --turns "$TURNS" \
    --append "$APPEND" --gen "$GEN" --max-context "$MAX_CONTEXT" \
    --engine-arg=--prefill-batching --engine-arg=batched \
    --engine-arg=--ranks --engine-arg="$RANKS" \
    --engine-arg=--rank-placement --engine-arg="$placement" \
    --engine-arg=--compute-quota-ms --engine-arg="$QUOTA_MS" \
    --engine-arg=--decode-batching --engine-arg=continuous "${args[@]}" \
    --json "$OUT_DIR/$config-$rep.json" $EXTRA
  echo "=== $config rep $rep: exit $?"
  cut -d' ' -f1-3 /proc/loadavg >"$OUT_DIR/load-after-$config-$rep.txt"
}

read -r -a configs <<<"$RUNS"
for ((k = 1; k <= REPS; k++)); do
  # The order rotates between reps so that no configuration always runs first.
  n=${#configs[@]}
  for ((i = 0; i < n; i++)); do run "${configs[(i + k - 1) % n]}" "$k"; done
done

python3 - "$OUT_DIR" "$REPS" "$RUNS" <<'PY'
import json, os, sys
out, reps, runs = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
def fmt(b):
    if not b or b.get("mean") is None:
        return "n/a"
    return f"mean {b['mean']:.3f} p50 {b['p50']:.3f} weighted {b['weighted']:.3f} ({b['batches']} batches)"
def err(e, k):
    v = (e or {}).get(k)
    return "n/a" if v is None else f"{v:.3f}"
for config in runs:
    for k in range(1, reps + 1):
        p = os.path.join(out, f"{config}-{k}.json")
        if not os.path.exists(p):
            print(f"{config} rep {k}: no result ({p})")
            continue
        r = json.load(open(p))["results"][0]
        load = open(os.path.join(out, f"load-{config}-{k}.txt")).read().strip()
        after_p = os.path.join(out, f"load-after-{config}-{k}.txt")
        after = open(after_p).read().strip() if os.path.exists(after_p) else "n/a"
        print(f"{config:18s} rep {k}: JCT {r['jct_s']:.2f} s, TTFT p50 {r['ttft_p50_s']:.2f} s, "
              f"requests {r['requests']}, failed {r['failed']}, mismatches {r['mismatches']}; "
              f"load before {load}, after {after}")
        for e in r.get("prefill_batches") or []:
            print(f"    {e['engine']}: {e['batches']} batches, {e['mean_requests']:.2f} requests/batch "
                  f"(max {e['max_requests']}), {e['mean_tokens']:.0f} tokens/batch, ranks {e['ranks']}, "
                  f"rank attention s {[round(x, 2) for x in e['rank_attention_s']]}")
            print(f"      attention max/avg, all batches:  {fmt(e['attention_max_avg'])}")
            print(f"      attention max/avg, full batches: {fmt(e['attention_max_avg_full'])}")
            print(f"      planned max/avg (the model's prediction), all: {fmt(e.get('planned_max_avg'))}")
            print(f"      planned max/avg (the model's prediction), full: {fmt(e.get('planned_max_avg_full'))}")
            print(f"      model error |predicted - measured| / measured: planning model "
                  f"{err(e.get('model_error'), 'planned')}, reference model {err(e.get('model_error'), 'reference')}")
            m = e.get("attention_model")
            if m:
                print(f"      model at the end (per layer): fixed {m['fixed_ns']:.0f} ns, per chunk {m['per_chunk_ns']:.0f} ns, "
                      f"per token {m['per_token_ns']:.0f} ns, per pair {m['per_cached_pair_ns']:.2f} ns, "
                      f"per token^2 {m['per_token_sq_ns']:.2f} ns, per pair and cached token "
                      f"{m.get('per_cached_pair_ctx_ns', 0):.5f} ns ({m['samples']} samples)")
PY
