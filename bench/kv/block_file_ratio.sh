#!/usr/bin/env bash
# Prints the cost of verifying (DecodeBlockFile) and encoding a 2.5 MiB Full Block as a throughput
# ratio to memcpy of the same payload, measured in the same process (medians of 5).
# Build: cmake --preset release && cmake --build --preset release -j2 --target kv_block_file_bench
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
bench_setup block_file_ratio.sh build/release/bin/kv_block_file_bench kv_block_file_bench "$@"
bench_medians --benchmark_min_time=0.05
/usr/bin/python3 - "$json" <<'PY'
import json, sys
rate = {b["run_name"]: b["bytes_per_second"] for b in json.load(open(sys.argv[1]))["benchmarks"]
        if b.get("aggregate_name") == "median"}
m = rate["Memcpy"]
print(f"memcpy {m/1e9:.1f} GB/s; decode+verify {rate['Decode']/1e9:.1f} GB/s"
      f" ({rate['Decode']/m:.2f}x memcpy); encode {rate['Encode']/1e9:.1f} GB/s"
      f" ({rate['Encode']/m:.2f}x memcpy)")
PY
