#!/usr/bin/env bash
# Issue 28 acceptance 5's tools (docs/sim.md "Against the engines"), without a cluster:
#   - `model calibrate` measures the reference model and writes a sim config that `sim --config`
#     accepts, with the testbed's links in it and FLOP rates far below any GPU's;
#   - `sim --model ref --replay-workload` simulates the workload `cluster run` replays (built by
#     the same replay::ShapeWorkload; here checked by its shape: at most --turns per agent) on the
#     calibrated testbed, where Oracle < DualPath < Basic;
#   - bad input: one line naming the flag, exit 2.
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

check_bad() {  # WANT ARGS...: exit 2, one stderr line containing WANT
  local want=$1; shift
  timeout 60 "$bin" "$@" >/dev/null 2>"$tmp/err.txt"
  local rc=$?
  [[ $rc -eq 2 ]] || fail "'$*' exited $rc, want 2: $(head -c 400 "$tmp/err.txt")"
  [[ $(wc -l <"$tmp/err.txt") -eq 1 ]] || fail "'$*' printed not one line: $(cat "$tmp/err.txt")"
  grep -qF -- "$want" "$tmp/err.txt" || fail "'$*' error lacks '$want': $(cat "$tmp/err.txt")"
}

"$bin" model calibrate --reps 1 --stor-rate 400mbit --comp-rate 2gbit --storage-efficiency 0.95 \
  --sim-config "$tmp/cfg.json" --json >"$tmp/cal.json" || fail "model calibrate failed"
python3 - "$tmp/cal.json" "$tmp/cfg.json" <<'PY' || fail "calibration output"
import json, sys
cal, cfg = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
c = cal["costs"]
assert c["linear_s_per_token"] > 0 and c["attention_s_per_flop"] > 0 and c["decode_s_per_flop"] > 0, c
assert len(cal["shapes"]) == 15, len(cal["shapes"])  # 9 prefill + 6 decode shapes measured
hw = cfg["hardware"]
assert abs(hw["snic_gbps"] - 0.4) < 1e-9 and abs(hw["cnic_gbps"] - 2) < 1e-9, hw
assert abs(hw["snic_efficiency"] - 0.95) < 1e-9, hw
assert hw["gpu_fp8_tflops"] < 1, hw  # a CPU: well below a GPU's TFLOP/s
assert cfg["engine"]["linear_half_tokens"] == 0 and cfg["engine"]["decode_weight_gb"] == 0
PY

"$bin" sim --model ref --pd 1P1D --config "$tmp/cfg.json" --replay-workload synthetic \
  --agents 3 --turns 4 --append 16 --gen 8 --max-context 1024 --system basic,dualpath,oracle \
  --json "$tmp/sim.json" >"$tmp/sim.txt" || fail "sim failed: $(cat "$tmp/sim.txt")"
python3 - "$tmp/sim.json" <<'PY' || fail "sim output: $(cat "$tmp/sim.txt")"
import json, sys
d = json.load(open(sys.argv[1]))
by = {r["system"]: r for r in d["results"]}
assert d["config"]["model"] == "ref", d["config"]["model"]
assert 3 <= by["basic"]["requests"] <= 12, by["basic"]["requests"]
# The links are what the config says: DualPath reads on both nodes' links, so it finishes before
# Basic; Oracle reads nothing, so before both.
assert by["oracle"]["jct_s"] < by["dualpath"]["jct_s"] < by["basic"]["jct_s"], \
    {k: v["jct_s"] for k, v in by.items()}
PY

check_bad "--turns, --append, --gen and --max-context need --replay-workload" sim --turns 3
check_bad "--replay-workload and --trace are exclusive" sim --replay-workload synthetic \
  --trace "$tmp/cal.json" --agents 2
check_bad "--gen" sim --model ref --pd 1P1D --replay-workload synthetic --agents 2 --gen 0
check_bad "--reps" model calibrate --reps 0
check_bad "--stor-rate" model calibrate --stor-rate fast
check_bad "--storage-efficiency" model calibrate --storage-efficiency 2
check_bad "q_heads" sim --model ref:q_heads=0 --pd 1P1D
echo PASS
