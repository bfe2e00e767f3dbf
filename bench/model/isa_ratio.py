#!/usr/bin/env python3
"""AVX2 / baseline speed ratios of the reference model, measured in one model_bench run.

Usage: bench/model/isa_ratio.py [path/to/model_bench] [repetitions]
Runs the BM_Isa* benchmarks (both instruction sets, randomly interleaved repetitions so machine
load hits both alike) and prints, per shape, the median CPU time of each path and the speedup
baseline_time / avx2_time (> 1: AVX2 is faster).
"""
import json
import statistics
import subprocess
import sys

bench = sys.argv[1] if len(sys.argv) > 1 else "build/release/bin/model_bench"
reps = sys.argv[2] if len(sys.argv) > 2 else "5"
out = subprocess.run(
    [bench, "--benchmark_filter=BM_Isa", f"--benchmark_repetitions={reps}",
     "--benchmark_enable_random_interleaving=true", "--benchmark_format=json"],
    check=True, capture_output=True, text=True).stdout
times = {}  # (benchmark, shape) -> {isa: [cpu times]}
units = {}
for b in json.loads(out)["benchmarks"]:
    if b.get("run_type") != "iteration" or b.get("error_occurred"):
        continue
    name, isa, shape = b["run_name"].split("/", 2)
    isa = "baseline" if isa == "0" else "avx2"
    times.setdefault((name, shape), {}).setdefault(isa, []).append(b["cpu_time"])
    units[(name, shape)] = b["time_unit"]
print(f"{'benchmark':<22} {'tokens':>6} {'baseline':>12} {'avx2':>12} {'speedup':>8}")
scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3}  # to microseconds
for (name, shape), per in sorted(times.items(), key=lambda kv: (kv[0][0], int(kv[0][1]))):
    if "baseline" not in per or "avx2" not in per:
        continue
    base = statistics.median(per["baseline"]) * scale[units[(name, shape)]]
    avx2 = statistics.median(per["avx2"]) * scale[units[(name, shape)]]
    print(f"{name:<22} {shape:>6} {base:>10.0f}us {avx2:>10.0f}us {base / avx2:>7.2f}x")
