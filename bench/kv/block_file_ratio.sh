#!/usr/bin/env bash
# Prints the cost of verifying (DecodeBlockFile) and encoding a 2.5 MiB Full Block as a throughput
# ratio to memcpy of the same payload, measured in the same process (medians of 5).
# Build: cmake --preset release && cmake --build --preset release -j2 --target kv_block_file_bench
set -euo pipefail
cd "$(dirname "$0")/../.."
bench="${1:-build/release/bin/kv_block_file_bench}"
if [[ ! -x "$bench" ]]; then
  echo "block_file_ratio.sh: $bench not built" >&2
  exit 2
fi
json="$(mktemp)"
trap 'rm -f "$json"' EXIT
"$bench" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  --benchmark_min_time=0.05 --benchmark_format=json >"$json" 2>/dev/null
/usr/bin/python3 - "$json" <<'PY'
import json, sys
rate = {b["run_name"]: b["bytes_per_second"] for b in json.load(open(sys.argv[1]))["benchmarks"]
        if b.get("aggregate_name") == "median"}
m = rate["Memcpy"]
print(f"memcpy {m/1e9:.1f} GB/s; decode+verify {rate['Decode']/1e9:.1f} GB/s"
      f" ({rate['Decode']/m:.2f}x memcpy); encode {rate['Encode']/1e9:.1f} GB/s"
      f" ({rate['Encode']/m:.2f}x memcpy)")
PY
