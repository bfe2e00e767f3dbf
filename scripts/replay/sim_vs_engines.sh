#!/usr/bin/env bash
# Issue 28 acceptance 5: the simulator against the engines. For one 1P1D configuration, the
# DualPath / Basic JCT ratio the engines measure on the emulated cluster (`cluster run`) beside the
# one `dualpath sim` predicts for the same cluster and workload, its cost model fed this machine's
# measured costs of the reference model (docs/sim.md "Against the engines"):
#   1. the measured run: `cluster run --pd 1P1D --system basic,dualpath` (root), or MEASURED=FILE,
#      the JSON of such a run (e.g. scripts/replay/acceptance.sh's io-1p1d.json);
#   2. every simulator input is read from that JSON's config, not typed in: the model spec, the
#      storage and compute link rates, the storage links' measured goodput (-> snic_efficiency),
#      the workload (source, agents, turns, append, gen, max context, seed);
#   3. `dualpath model calibrate` measures the reference model's prefill and decode costs here
#      (thread CPU time) and writes the sim config: those costs on that testbed;
#   4. `dualpath sim --model ref:SPEC --pd 1P1D --replay-workload SOURCE ...` on the same workload.
#      The engines' Basic is the PE read path with layerwise prefill (docs/e2e.md, request flow
#      step 3): the sim's `layerwise` system (its `basic` also loads a batch's whole KV before
#      computing, the paper's Basic; printed for reference);
#   5. prints both JCTs and both ratios side by side, and whether the prediction is within 10%.
#
# usage: scripts/replay/sim_vs_engines.sh [DUALPATH_BINARY]   (default build/release/bin/dualpath)
# env:   MEASURED (a cluster run JSON; unset: run one), and for that run AGENTS (16), TURNS (30),
#        APPEND (16), GEN (8), MAX_CONTEXT (3072), STOR_RATE (400mbit), COMP_RATE (2gbit),
#        PREFILL (batched), RANKS (1), DECODE (continuous), NAME (simeng: the testbed cluster's
#        name); CAL_REPS (calibration runs per shape, 5); OUT_DIR (build/sim-vs-engines)
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
PREFILL=${PREFILL:-batched}
RANKS=${RANKS:-1}
DECODE=${DECODE:-continuous}
NAME=${NAME:-simeng}
CAL_REPS=${CAL_REPS:-5}
OUT_DIR=${OUT_DIR:-$here/build/sim-vs-engines}
MEASURED=${MEASURED:-}
mkdir -p "$OUT_DIR"

if [[ -z "$MEASURED" ]]; then
  MEASURED=$OUT_DIR/measured.json
  trap '"$bin" cluster down --name "$NAME" >/dev/null 2>&1' EXIT
  echo "=== measured: load before $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT_DIR/measured.load"
  "$bin" cluster run --name "$NAME" --pd 1P1D --stor-rate "$STOR_RATE" --comp-rate "$COMP_RATE" \
    --system basic,dualpath --workload synthetic --agents "$AGENTS" --turns "$TURNS" \
    --append "$APPEND" --gen "$GEN" --max-context "$MAX_CONTEXT" \
    --engine-arg=--prefill-batching --engine-arg="$PREFILL" --engine-arg=--ranks \
    --engine-arg="$RANKS" --engine-arg=--decode-batching --engine-arg="$DECODE" \
    --json "$MEASURED" || { echo "cluster run failed" >&2; exit 1; }
  echo "=== measured: load after $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT_DIR/measured.load"
fi
[[ -f "$MEASURED" ]] || { echo "MEASURED=$MEASURED: no such file" >&2; exit 2; }

# The simulator's inputs, from the measured run's own config (one line of shell words).
read -r spec stor_bps comp_bps eff source agents turns append gen max_context seed < <(
  python3 - "$MEASURED" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["config"]
if c["cluster"]["pd"] != "1P1D":
    sys.exit(f"{sys.argv[1]}: a {c['cluster']['pd']} run; this compares 1P1D")
rate = c["cluster"]["storage_rate_bps"]
eff = sum(c["goodput_bps"]) / len(c["goodput_bps"]) / rate
w = c["workload"]
print(c["model_spec"], rate, c["cluster"]["compute_rate_bps"], f"{eff:.4f}", w["source"],
      w["agents"], w["turns"], w["append"], w["gen"], w["max_context"], w["seed"])
PY
) || exit 2

echo "=== calibrate: load before $(cut -d' ' -f1-3 /proc/loadavg)"
"$bin" model calibrate --spec "$spec" --reps "$CAL_REPS" --sim-config "$OUT_DIR/sim-config.json" \
  --stor-rate "${stor_bps}bit" --comp-rate "${comp_bps}bit" --storage-efficiency "$eff" \
  --ranks "$RANKS" --json >"$OUT_DIR/calibration.json" || exit 1
"$bin" sim --model "ref:$spec" --pd 1P1D --config "$OUT_DIR/sim-config.json" \
  --replay-workload "$source" --agents "$agents" --turns "$turns" --append "$append" \
  --gen "$gen" --max-context "$max_context" --seed "$seed" --system basic,layerwise,dualpath \
  --json "$OUT_DIR/sim.json" >"$OUT_DIR/sim.txt" || { cat "$OUT_DIR/sim.txt"; exit 1; }

python3 - "$MEASURED" "$OUT_DIR" <<'PY'
import json, os, sys
measured = json.load(open(sys.argv[1]))
out = sys.argv[2]
sim = json.load(open(os.path.join(out, "sim.json")))
cal = json.load(open(os.path.join(out, "calibration.json")))
m = {r["system"]: r for r in measured["results"]}
s = {r["system"]: r for r in sim["results"]}
w = measured["config"]["workload"]
print(f"\n=== 1P1D, {w['source']} workload: {w['agents']} agents, {w['requests']} requests "
      f"(turns <= {w['turns']}, append {w['append']}, gen {w['gen']}, max context "
      f"{w['max_context']}); measured: {sys.argv[1]}")
c = cal["costs"]
print(f"reference model costs here ({cal['isa']}, thread CPU time): prefill "
      f"{c['forward_overhead_s']*1e3:.3f} ms/forward + {c['linear_s_per_token']*1e6:.2f} us/token + "
      f"{c['attention_s_per_flop']*1e9:.3f} ns/attention FLOP; decode "
      f"{c['decode_step_overhead_s']*1e3:.3f} ms/step + {c['decode_s_per_flop']*1e9:.3f} ns/FLOP "
      f"(fit rms relative error {cal['fit_rms_relative_error']['prefill']:.3f} / "
      f"{cal['fit_rms_relative_error']['decode']:.3f})")
print(f"{'':10}{'basic JCT':>12}{'dualpath JCT':>14}{'DualPath/Basic':>16}")
mr = m["dualpath"]["jct_s"] / m["basic"]["jct_s"]
# The engines' Basic loads layer by layer: the sim's `layerwise` is that system.
sr = s["dualpath"]["jct_s"] / s["layerwise"]["jct_s"]
print(f"{'measured':10}{m['basic']['jct_s']:>11.2f}s{m['dualpath']['jct_s']:>13.2f}s{mr:>16.3f}")
print(f"{'sim':10}{s['layerwise']['jct_s']:>11.2f}s{s['dualpath']['jct_s']:>13.2f}s{sr:>16.3f}"
      f"   (sim's Basic without layerwise prefill: {s['basic']['jct_s']:.2f} s, ratio "
      f"{s['dualpath']['jct_s'] / s['basic']['jct_s']:.3f})")
err = sr / mr - 1
print(f"sim / measured ratio: {sr / mr:.3f} ({100*err:+.1f}%; target: within 10%): "
      f"{'HOLDS' if abs(err) <= 0.10 else 'does not hold'}")
print("measured mismatches: " + ", ".join(f"{k} {r['mismatches']}" for k, r in m.items()))
PY
