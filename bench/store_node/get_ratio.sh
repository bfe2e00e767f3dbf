#!/usr/bin/env bash
# Prints the store client's remote get throughput of 1 MiB objects (zero-copy and staged) and its
# ratio to bare transfer-engine gets of the same bytes in the same process (issue 16, acceptance 3:
# >= 0.9x the link's goodput). On the development VM this is loopback TCP, not the testbed's
# 2 Gbit/s compute link.
#
# Usage: bench/store_node/get_ratio.sh [path/to/store_get_bench]
#        (default: build/release/bin/store_get_bench)
# Build: cmake --preset release && cmake --build --preset release -j2 --target store_get_bench
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
bench_setup get_ratio.sh build/release/bin/store_get_bench store_get_bench "$@"
bench_medians
/usr/bin/python3 - "$json" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
med = {b["run_name"]: b for b in data["benchmarks"] if b.get("aggregate_name") == "median"}
def mibs(name):
    return med[name]["bytes_per_second"] / 2**20
print("store remote get, 1 MiB objects (medians of 5, same process)")
print(f"{'batch':6s} {'store_MiB/s':>12s} {'raw_MiB/s':>10s} {'ratio':>6s}")
for n in (1, 16):
    s, r = mibs(f"StoreGet/batch:{n}/real_time"), mibs(f"RawGet/batch:{n}/real_time")
    print(f"{n:<6d} {s:12.0f} {r:10.0f} {s/r:6.2f}")
st = mibs("StoreGetStaged/batch:16/real_time")
r16 = mibs("RawGet/batch:16/real_time")
print(f"staged (unregistered destination), batch 16: {st:.0f} MiB/s, ratio {st/r16:.2f}")
PY
