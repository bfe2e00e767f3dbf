#!/usr/bin/env bash
# Issue 28 acceptance 2 on the emulated cluster (root): the decode engine's continuous batching
# against the one-at-a-time engine (`engine --decode-batching serial`), in one script, same
# binary, same workload: 1P1D, 16 agents, the I/O-bound synthetic workload, DualPath. Runs
# alternate serial / continuous REPS times (so machine load hits both alike) and every run checks
# outputs (mismatches must be 0). Prints per run: TTST p50 (and mean) with its pieces (handoff:
# PE first token -> DE ready; decode wait: DE ready -> taken into decode), DE TTST (ready ->
# second token: the DE's own part, which its batching decides; acceptance 2 is worded on it) p50
# and p90, the share of requests that waited for the DE (decode wait > 1 ms: their decodes
# overlapped another's), JCT, TTFT p50, TPOT, the decode batch (time-weighted mean and max, from
# the JSON's decode_batches) and the load average before and after the run; then per rep the
# ratios continuous / serial and their medians, as one table. The JSON of each run is kept in
# OUT_DIR.
#
# usage: scripts/replay/decode_batching.sh [DUALPATH_BINARY]   (default build/release/bin/dualpath)
# env:   AGENTS (16), TURNS (30), APPEND (16), GEN (8), MAX_CONTEXT (3072), STOR_RATE (400mbit),
#        COMP_RATE (2gbit), SYSTEM (dualpath), PREFILL (the PE's --prefill-batching, batched: the
#        system with batching on, as acceptance 1; serial gives the PE of the first measurements,
#        which hands the DE one request at a time), REPS (1), OUT_DIR (build/decode-batching), NAME (batdb: the testbed
#        cluster's name), EXTRA (more `cluster run` arguments)
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
PREFILL=${PREFILL:-batched}
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
  echo "=== $mode rep $rep: 1P1D $SYSTEM agents=$AGENTS turns=$TURNS append=$APPEND gen=$GEN prefill=$PREFILL (load $(cat "$OUT_DIR/load-$mode-$rep.txt"))"
  # shellcheck disable=SC2086
  "$bin" cluster run --name "$NAME" --pd 1P1D --stor-rate "$STOR_RATE" --comp-rate "$COMP_RATE" \
    --system "$SYSTEM" --workload synthetic --agents "$AGENTS" --turns "$TURNS" \
    --append "$APPEND" --gen "$GEN" --max-context "$MAX_CONTEXT" \
    --engine-arg=--decode-batching --engine-arg="$mode" \
    --engine-arg=--prefill-batching --engine-arg="$PREFILL" \
    --json "$OUT_DIR/$mode-$rep.json" $EXTRA
  local rc=$?
  cut -d' ' -f1-3 /proc/loadavg >>"$OUT_DIR/load-$mode-$rep.txt"
  echo "=== $mode rep $rep: exit $rc (load after $(tail -1 "$OUT_DIR/load-$mode-$rep.txt"))"
}

for ((k = 1; k <= REPS; k++)); do
  # The order alternates between reps so that neither mode always runs first.
  if ((k % 2 == 1)); then run serial "$k"; run continuous "$k"; else run continuous "$k"; run serial "$k"; fi
done

python3 - "$OUT_DIR" "$REPS" <<'PY'
import json, math, os, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
rows = {"serial": {}, "continuous": {}}
ms = lambda v: f"{1e3 * v:.1f}"
def pct(xs, q):  # nearest rank, as the run JSON's p50s
    xs = sorted(xs)
    return xs[max(0, min(len(xs) - 1, math.ceil(q * len(xs)) - 1))] if xs else float("nan")
for mode in rows:
    for k in range(1, reps + 1):
        p = os.path.join(out, f"{mode}-{k}.json")
        if not os.path.exists(p):
            print(f"{mode} rep {k}: no result ({p})")
            continue
        r = json.load(open(p))["results"][0]
        load = open(os.path.join(out, f"load-{mode}-{k}.txt")).read().split()
        # TTST = handoff (PE first token -> DE ready: the PE's last KV puts, PrefillDone) + decode
        # wait (DE ready -> taken into decode) + the first step.
        batches = r.get("decode_batches") or []
        busy = sum(b["busy_s"] for b in batches)
        mean = sum(b["mean"] * b["busy_s"] for b in batches) / busy if busy else 0
        share1 = sum(b["time_share"][1] * b["busy_s"] for b in batches if len(b["time_share"]) > 1) / busy if busy else 0
        recs = [x for x in r["records"] if x["ok"] and x["gen_tokens"] > 1 and x["ttst_s"] is not None]
        de = [x["de_ttst_s"] for x in recs if x.get("de_ttst_s") is not None]
        waited = [x for x in recs if (x.get("decode_wait_s") or 0) > 1e-3]
        r["_de_p90"] = pct(de, 0.9)
        r["_load"] = (load[0], load[3] if len(load) > 3 else "?")
        rows[mode][k] = r
        side = {sd: statistics.median([x["ttst_s"] for x in recs if x["side"] == sd])
                for sd in ("prefill", "decode", "split") if any(x["side"] == sd for x in recs)}
        print(f"{mode:10s} rep {k}: TTST p50 {ms(r['ttst_p50_s'])} ms (mean {ms(r['ttst_s'])}; by read side "
              + ", ".join(f"{sd} {ms(v)}" for sd, v in side.items())
              + f"; handoff p50 {ms(r.get('handoff_p50_s', 0))}, decode wait p50 {ms(r.get('decode_wait_p50_s', 0))}), "
              f"DE TTST p50 {ms(r.get('de_ttst_p50_s', 0))} ms p90 {ms(r['_de_p90'])} ms, "
              f"waited for the DE {100 * len(waited) / max(1, len(recs)):.0f}% of requests, "
              f"JCT {r['jct_s']:.2f} s, TTFT p50 {r['ttft_p50_s']:.2f} s, TPOT {ms(r['tpot_s'])} ms, "
              f"decode batch mean {mean:.2f} max {max((b['max'] for b in batches), default=0)} "
              f"(batch 1 {100 * share1:.0f}% of busy {busy:.1f} s), "
              f"requests {r['requests']}, failed {r['failed']}, mismatches {r['mismatches']}; "
              f"load before {r['_load'][0]} after {r['_load'][1]}")
ttst, jct, de, de90 = [], [], [], []
ratio = lambda c, s, key: c[key] / s[key] if s.get(key) else float("nan")
print()
print("| rep | serial DE TTST p50 | continuous DE TTST p50 | DE TTST p50 c/s | DE TTST p90 c/s "
      "| TTST p50 c/s (client) | JCT s / c | JCT c/s | mismatches s / c | load before s / c |")
print("|---|---|---|---|---|---|---|---|---|---|")
for k in sorted(set(rows["serial"]) & set(rows["continuous"])):
    s, c = rows["serial"][k], rows["continuous"][k]
    de.append(ratio(c, s, "de_ttst_p50_s"))
    de90.append(c["_de_p90"] / s["_de_p90"] if s["_de_p90"] else float("nan"))
    ttst.append(ratio(c, s, "ttst_p50_s"))
    jct.append(ratio(c, s, "jct_s"))
    print(f"| {k} | {ms(s['de_ttst_p50_s'])} ms | {ms(c['de_ttst_p50_s'])} ms | {de[-1]:.3f}x | {de90[-1]:.3f}x "
          f"| {ttst[-1]:.3f}x | {s['jct_s']:.2f} / {c['jct_s']:.2f} s | {jct[-1]:.3f}x "
          f"| {s['mismatches']} / {c['mismatches']} | {s['_load'][0]} / {c['_load'][0]} |")
if ttst:
    d, t, j = statistics.median(de), statistics.median(ttst), statistics.median(jct)
    bad = sum(r["mismatches"] or 0 for m in rows.values() for r in m.values())
    failed = sum(r["failed"] or 0 for m in rows.values() for r in m.values())
    print(f"median of {len(ttst)} per-rep ratios, continuous / serial: DE TTST p50 {d:.3f}x "
          f"(acceptance 2, <= 0.5: {'HOLDS' if d <= 0.5 else 'does not hold'}), "
          f"DE TTST p90 {statistics.median(de90):.3f}x, client TTST p50 {t:.3f}x "
          f"(<= 0.5: {'holds' if t <= 0.5 else 'does not hold'}), JCT {j:.3f}x "
          f"(<= 1: {'HOLDS' if j <= 1.0 else 'does not hold'}); mismatches in all runs: {bad}, "
          f"failed: {failed}")
PY
