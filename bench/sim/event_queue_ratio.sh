#!/usr/bin/env bash
# Prints the simulator's event queue throughput (pop + push per second) as the ratio of the
# 4-ary EventQueue to the binary-heap queue it replaced (issue 27), both measured in the same
# benchmark process on the same operation stream; medians of 5 repetitions.
#
# Usage: bench/sim/event_queue_ratio.sh [path/to/sim_event_queue_bench]
#        (default: build/release/bin/sim_event_queue_bench)
# Build: cmake --preset release && cmake --build --preset release -j2 --target sim_event_queue_bench
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
bench_setup event_queue_ratio.sh build/release/bin/sim_event_queue_bench sim_event_queue_bench "$@"
bench_medians --benchmark_min_time=0.1
/usr/bin/python3 - "$json" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
rate = {}
for b in data["benchmarks"]:
    if b.get("aggregate_name") != "median":
        continue
    name, size = b["run_name"].split("/")
    rate[(name, int(size))] = b["items_per_second"]
print("event queue pop+push per second, 4-ary EventQueue vs the binary heap (medians of 5)")
print(f"{'events queued':>13s} {'4-ary M/s':>9s} {'binary M/s':>10s} {'ratio':>6s}")
for size in sorted({s for _, s in rate}):
    new, old = rate[("EventQueue", size)], rate[("BinaryHeap", size)]
    print(f"{size:13d} {new / 1e6:9.1f} {old / 1e6:10.1f} {new / old:6.2f}")
PY
