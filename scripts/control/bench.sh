#!/usr/bin/env bash
# Scheduler service overhead per request (docs/control.md "What is measured"). Runs control_bench
# (in-process server on a Unix socket, gRPC client in the same process), 5 repetitions, and prints
# the median time of each benchmark and its ratio to the ListEngines round trip measured in the
# same run.
#   usage: scripts/control/bench.sh [build/release/bin/control_bench]
set -euo pipefail
bin=${1:-build/release/bin/control_bench}
[[ -x "$bin" ]] || { echo "bench.sh: $bin not built (cmake --build --preset release --target control_bench)" >&2; exit 2; }
json=$(mktemp)
trap 'rm -f "$json"' EXIT
"$bin" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  --benchmark_min_time=0.3 --benchmark_format=json >"$json"
python3 - "$json" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))["benchmarks"]
med = {r["run_name"]: r for r in runs if r.get("aggregate_name") == "median"}
def us(r):
    scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3}[r["time_unit"]]
    return r["real_time"] * scale
base = us(med["BM_RpcBaseline"])
print(f"{'benchmark (median of 5)':24s} {'wall us':>10s} {'x RPC baseline':>15s}")
for name, r in med.items():
    print(f"{name:24s} {us(r):>10.1f} {us(r) / base:>15.2f}")
PY
