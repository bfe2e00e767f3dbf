#!/usr/bin/env bash
# Sensitivity of the offline DualPath / Basic speedup (DS 660B, 2P4D, 64K) at 1,024 and 2,048 agents
# to the simulator's free parameters (docs/sim.md, "What the paper does not say and what we
# chose"). Each row runs `dualpath sim --system basic,dualpath` with one --config override (or
# one flag) and prints the speedups next to the defaults'. Usage:
#   scripts/sim/sensitivity.sh [path/to/dualpath]
# Run it niced on a shared machine: each row is ~10 s of CPU.
set -euo pipefail
bin=${1:-build/release/bin/dualpath}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# speedups NAME CONFIG_JSON [extra flags...]: prints "| NAME | 1K speedup | 2K speedup |".
speedups() {
  local name=$1 cfg=$2
  shift 2
  echo "$cfg" >"$tmp/c.json"
  local cells=""
  for n in 1024 2048; do
    "$bin" sim --agents "$n" --system basic,dualpath --config "$tmp/c.json" --json "$tmp/r.json" \
      "$@" >/dev/null
    cells+=$(python3 -c '
import json, sys
r = {x["system"]: x["jct_s"] for x in json.load(open(sys.argv[1]))["results"]}
b, d = r["basic"], r["dualpath"]
print(f" {b / d:.2f}x ({d:,.0f} s) |", end="")' "$tmp/r.json")
  done
  echo "| $name |$cells"
}

echo "| variant | 1,024 agents: DualPath/Basic (DualPath JCT) | 2,048 agents |"
echo "|---|---|---|"
speedups "defaults" '{}'
speedups "linear_efficiency 0.30 (default 0.40)" '{"engine": {"linear_efficiency": 0.30}}'
speedups "linear_efficiency 0.50" '{"engine": {"linear_efficiency": 0.50}}'
speedups "attention_efficiency 0.20 (default 0.30)" '{"engine": {"attention_efficiency": 0.20}}'
speedups "attention_efficiency 0.40" '{"engine": {"attention_efficiency": 0.40}}'
speedups "layer_overhead_us 300 (default 150)" '{"engine": {"layer_overhead_us": 300}}'
speedups "ep_pe_workspace_gb 12 (default 6)" '{"engine": {"ep_pe_workspace_gb": 12}}'
speedups "ep_de_workspace_gb 8 (default 2)" '{"engine": {"ep_de_workspace_gb": 8}}'
speedups "decode_moe_layer_overhead_us 450 (default 318, fitted)" \
  '{"engine": {"decode_moe_layer_overhead_us": 450}}'
speedups "snic_efficiency 0.75 (default 0.90)" '{"hardware": {"snic_efficiency": 0.75}}'
speedups "cnic_kv_share 0.50 (default 0.90)" '{"hardware": {"cnic_kv_share": 0.50}}'
speedups "short_read_queue_s 0.5 (alpha, default 1)" '{"sched": {"short_read_queue_s": 0.5}}'
speedups "unfinished_token_limit_s 4 (beta, default 2)" '{"sched": {"unfinished_token_limit_s": 4}}'
speedups "fetch_interval_ms 50 (default 20)" '{"sched": {"fetch_interval_ms": 50}}'
speedups "synthetic_trajectories 2000 (default 500)" '{"synthetic_trajectories": 2000}'
speedups "workload seed 2 (default 1)" '{}' --seed 2
speedups "start skew 60 s (default 0)" '{}' --start-skew 60
speedups "start skew 600 s" '{}' --start-skew 600
