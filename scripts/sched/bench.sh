#!/usr/bin/env bash
# Scheduler microbenchmark (issue 4 acceptance 5: >= 200,000 decisions/s on one core on a
# 1,152-GPU cluster). Runs sched_bench pinned to one CPU, 5 repetitions, and prints the median
# decisions/s per cluster plus the ratio 48P96D / 2P4D measured in the same run.
#   usage: scripts/sched/bench.sh [build/release/bin/sched_bench]
set -euo pipefail
bin=${1:-build/release/bin/sched_bench}
[[ -x "$bin" ]] || { echo "bench.sh: $bin not built (cmake --build --preset release --target sched_bench)" >&2; exit 2; }
json=$(mktemp)
trap 'rm -f "$json"' EXIT
taskset -c 0 "$bin" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  --benchmark_min_time=0.3 --benchmark_format=json >"$json"
python3 - "$json" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))["benchmarks"]
med = {r["run_name"]: r for r in runs if r.get("aggregate_name") == "median"}
def rate(name, key="decisions_per_s"):
    r = med[name]
    return r.get(key, r.get("items_per_second"))
# Rates are per CPU second of the benchmark thread; "wall" rescales by real/CPU time, which
# differs when other processes share the core.
print(f"{'benchmark (median of 5)':34s} {'per CPU second':>16s} {'per wall second':>16s}")
for name, r in med.items():
    key = "decisions_per_s" if "Decisions" in name else "items_per_second"
    wall = r[key] * r["cpu_time"] / r["real_time"]
    print(f"{name:34s} {r[key]:>16,.0f} {wall:>16,.0f}")
base = rate("BM_Decisions_2P4D")
big = rate("BM_Decisions_48P96D")
print(f"ratio 48P96D / 2P4D decisions/s: {big / base:.2f}")
print(f"acceptance (>= 200,000 decisions/s at 1,152 GPUs): {'PASS' if big >= 200000 else 'FAIL'}")
PY
