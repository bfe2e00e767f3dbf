#!/usr/bin/env bash
# Issue 8's acceptance measurements on the emulated cluster, re-measured with batched engines for
# issue 28's acceptance 4 (root; release build recommended):
#   1. 1P1D, I/O-bound synthetic workload, 400 Mbit/s storage links: DualPath / Basic JCT
#      (target <= 0.53; issue 8's was 0.6) and every storage link's steady-state utilization;
#   2. 1P2D, the same (target <= 0.37; issue 8's was 0.45);
#   3. compute-bound workload (long appends), Basic vs DualPath vs Oracle (within 10%).
# Every run checks outputs (mismatches must be 0). Figures are printed at the end and the JSON of
# each run is kept in OUT_DIR.
#
# usage: scripts/replay/acceptance.sh [DUALPATH_BINARY]   (default build/release/bin/dualpath)
# env:   AGENTS (16 on 1P1D, 24 on 1P2D: the closed loop must be deep enough to keep every link
#        busy), TURNS (30 on 1P1D, 20 on 1P2D), APPEND (16), GEN (8), MAX_CONTEXT (3072), STOR_RATE (400mbit),
#        COMP_RATE (2gbit), COMPUTE_AGENTS (4), COMPUTE_TURNS (4), COMPUTE_APPEND (2048),
#        COMPUTE_MAX_CONTEXT (8192), COMPUTE_REPS (3: the compute-bound comparison is repeated and
#        judged on each system's median JCT, since on a shared 2-core machine one run's CPU noise
#        is as large as the 10% being tested), OUT_DIR (build/replay-acceptance),
#        ONLY ("1p1d 1p2d compute"), EXTRA (more `cluster run` arguments), NAME (rpaccept: the
#        testbed cluster's name; give each concurrent user of the machine their own),
#        PREFILL (the PE's --prefill-batching, batched: §6.2 forward batches; serial gives issue 8's
#        one-prompt-at-a-time PE), RANKS (the PE's --ranks, 1), DECODE (the DE's
#        --decode-batching, continuous; serial gives issue 8's one-request-at-a-time DE)
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(realpath "${1:-$here/build/release/bin/dualpath}")
AGENTS_1P1D=${AGENTS:-16}
AGENTS_1P2D=${AGENTS:-24}
TURNS_1P1D=${TURNS:-30}
TURNS_1P2D=${TURNS:-20}
APPEND=${APPEND:-16}
GEN=${GEN:-8}
MAX_CONTEXT=${MAX_CONTEXT:-3072}
STOR_RATE=${STOR_RATE:-400mbit}
COMP_RATE=${COMP_RATE:-2gbit}
COMPUTE_AGENTS=${COMPUTE_AGENTS:-4}
COMPUTE_TURNS=${COMPUTE_TURNS:-4}
COMPUTE_APPEND=${COMPUTE_APPEND:-2048}
COMPUTE_MAX_CONTEXT=${COMPUTE_MAX_CONTEXT:-8192}
COMPUTE_REPS=${COMPUTE_REPS:-3}
OUT_DIR=${OUT_DIR:-$here/build/replay-acceptance}
ONLY=${ONLY:-1p1d 1p2d compute}
EXTRA=${EXTRA:-}
PREFILL=${PREFILL:-batched}
RANKS=${RANKS:-1}
DECODE=${DECODE:-continuous}
NAME=${NAME:-rpaccept}
mkdir -p "$OUT_DIR"
trap '"$bin" cluster down --name "$NAME" >/dev/null 2>&1' EXIT

run() { # label pd systems workload agents turns append max_context
  local label=$1 pd=$2 systems=$3 workload=$4 agents=$5 turns=$6 append=$7 max_context=$8
  echo "=== $label: $pd $systems $workload agents=$agents turns=$turns append=$append" \
    "prefill=$PREFILL ranks=$RANKS decode=$DECODE"
  # The machine's load beside every figure: on a shared machine it is part of the result.
  echo "=== $label: load before $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT_DIR/$label.load"
  # shellcheck disable=SC2086
  "$bin" cluster run --name "$NAME" --pd "$pd" --stor-rate "$STOR_RATE" --comp-rate "$COMP_RATE" \
    --system "$systems" --workload "$workload" --agents "$agents" --turns "$turns" \
    --append "$append" --gen "$GEN" --max-context "$max_context" \
    --engine-arg=--prefill-batching --engine-arg="$PREFILL" --engine-arg=--ranks \
    --engine-arg="$RANKS" --engine-arg=--decode-batching --engine-arg="$DECODE" \
    --json "$OUT_DIR/$label.json" --plot "$OUT_DIR/$label-plots" $EXTRA
  local rc=$?
  echo "=== $label: load after $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT_DIR/$label.load"
  echo "=== $label: exit $rc"
}

for what in $ONLY; do
  case $what in
    1p1d) run io-1p1d 1P1D basic,dualpath synthetic "$AGENTS_1P1D" "$TURNS_1P1D" "$APPEND" "$MAX_CONTEXT" ;;
    1p2d) run io-1p2d 1P2D basic,dualpath synthetic "$AGENTS_1P2D" "$TURNS_1P2D" "$APPEND" "$MAX_CONTEXT" ;;
    compute)
      rm -f "$OUT_DIR"/compute-1p1d*.json
      # The order of the systems rotates between reps so that none always runs first or last.
      orders=(basic,dualpath,oracle dualpath,oracle,basic oracle,basic,dualpath)
      for ((k = 1; k <= COMPUTE_REPS; k++)); do
        run "compute-1p1d-$k" 1P1D "${orders[$(((k - 1) % 3))]}" compute "$COMPUTE_AGENTS" \
          "$COMPUTE_TURNS" "$COMPUTE_APPEND" "$COMPUTE_MAX_CONTEXT"
      done
      ;;
  esac
done

python3 - "$OUT_DIR" <<'PY'
import json, os, sys
out = sys.argv[1]
def load(label):
    p = os.path.join(out, label + ".json")
    return json.load(open(p)) if os.path.exists(p) else None
def loadavg(label):
    p = os.path.join(out, label + ".load")
    if not os.path.exists(p):
        return ""
    return "; " + ", ".join(l.split(": ", 1)[1].strip() for l in open(p) if ": " in l)
print("\n=== figures (acceptance 4 of issue 28; issue 8 before it)")
for label, target in [("io-1p1d", 0.53), ("io-1p2d", 0.37)]:
    d = load(label)
    if not d:
        continue
    by = {r["system"]: r for r in d["results"]}
    if "basic" in by and "dualpath" in by:
        ratio = by["dualpath"]["jct_s"] / by["basic"]["jct_s"]
        print(f"{label}: JCT basic {by['basic']['jct_s']:.2f} s, dualpath "
              f"{by['dualpath']['jct_s']:.2f} s, ratio {ratio:.3f} (target <= {target}): "
              f"{'HOLDS' if ratio <= target else 'does not hold'}{loadavg(label)}")
        # The cold start: every agent's first turn has no hit and its second, in a replay without
        # think time, comes before the first's blocks are published; both cost the two systems
        # alike. What the ratio is once they are done (docs/replay.md "where 1P2D's ratio goes").
        cold = {s: max((x["done_s"] for x in by[s]["records"] if x["turn"] <= 1), default=0.0)
                for s in ("basic", "dualpath")}
        rest = {s: by[s]["jct_s"] - cold[s] for s in cold}
        if rest["basic"] > 0:
            print(f"  after every agent's first two turns (done at basic {cold['basic']:.1f} s, "
                  f"dualpath {cold['dualpath']:.1f} s): basic {rest['basic']:.2f} s, dualpath "
                  f"{rest['dualpath']:.2f} s, ratio {rest['dualpath'] / rest['basic']:.3f}")
    for s, r in by.items():
        links = ", ".join(f"{l['node']} {100*l['steady_utilization']:.0f}% steady "
                          f"({100*l['utilization']:.0f}% whole run)" for l in r["storage_links"])
        print(f"  {s}: mismatches {r['mismatches']}, failed {r['failed']}; storage links: {links}"
              f"; steady window {r['steady_s']:.1f} s")
import glob, statistics
reps = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, "compute-1p1d-*.json")))]
if reps:
    jcts = {}
    for k, d in enumerate(reps, 1):
        by = {r["system"]: r for r in d["results"]}
        for s, r in by.items():
            jcts.setdefault(s, []).append(r["jct_s"])
        print(f"compute-1p1d rep {k}: JCT " + ", ".join(f"{s} {r['jct_s']:.2f} s" for s, r in by.items())
              + "; " + ", ".join(f"{s} mismatches {r['mismatches']} failed {r['failed']}"
                                 for s, r in by.items()) + loadavg(f"compute-1p1d-{k}"))
    med = {s: statistics.median(v) for s, v in jcts.items()}
    print("compute-1p1d median JCT over %d reps: " % len(reps) +
          ", ".join(f"{s} {v:.2f} s" for s, v in med.items()))
    if "dualpath" in med and "basic" in med:
        for other in ("basic", "oracle"):
            if other in med:
                r = med["dualpath"] / med[other]
                print(f"  dualpath/{other} {r:.3f} (target: within 10%): "
                      f"{'HOLDS' if abs(r - 1) <= 0.10 else 'does not hold'}")
PY
