#!/usr/bin/env bash
# Prints the store master's Exists throughput over 1,000-key batches (one thread) and its ratio to
# bare std::unordered_set finds of the same keys in the same process, and the master's memory per
# million committed objects (issue 16, acceptance 3: exists >= 1 M keys/s on one master core;
# issue 27: <= 100 B per object at 10 M objects, exists over gRPC >= 3 M keys/s on one client
# thread). Over gRPC it prints the wall-clock rate and the rate per CPU-second of the process
# (client, gRPC and master together): under the load of a shared machine the first measures the
# load, the second the work; report both, with `uptime`.
#
# Usage: bench/store/exists_ratio.sh [path/to/store_master_bench]
#        (default: build/release/bin/store_master_bench)
# Build: cmake --preset release && cmake --build --preset release -j2 --target store_master_bench store_rpc_bench
set -euo pipefail
cd "$(dirname "$0")/../.."
bench="${1:-build/release/bin/store_master_bench}"
if [[ ! -x "$bench" ]]; then
  echo "exists_ratio.sh: $bench not built (cmake --build --preset release --target store_master_bench)" >&2
  exit 2
fi
json="$(mktemp)"
memjson="$(mktemp)"
trap 'rm -f "$json" "$memjson"' EXIT
# Medians of 5 repetitions tame the noise of a shared machine (the memory figures are counts of
# bytes, not times: one run each, at 1 M and 10 M objects).
"$bench" --benchmark_filter=Batch --benchmark_repetitions=5 \
  --benchmark_report_aggregates_only=true --benchmark_format=json >"$json" 2>/dev/null
"$bench" --benchmark_filter=MemoryPerObject --benchmark_format=json >"$memjson" 2>/dev/null
/usr/bin/python3 - "$json" "$memjson" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
mems = json.load(open(sys.argv[2]))["benchmarks"]
med = {}
for b in data["benchmarks"]:
    if b.get("aggregate_name") == "median":
        med[b["run_name"]] = b
print("store master Exists, 1,000-key batches, one thread, 1 M objects (medians of 5, same process)")
print(f"{'keys':6s} {'master_Mkeys/s':>14s} {'hashset_Mkeys/s':>15s} {'ratio':>6s}")
for hits, name in ((1, "hits"), (0, "misses")):
    m = med[f"ExistsBatch/hits:{hits}"]["items_per_second"]
    h = med[f"HashSetBatch/hits:{hits}"]["items_per_second"]
    print(f"{name:6s} {m/1e6:14.2f} {h/1e6:15.2f} {m/h:6.2f}")
worst = min(med[f"ExistsBatch/hits:{h}"]["items_per_second"] for h in (0, 1))
print(f"minimum {worst/1e6:.2f} M keys/s (issue 16's acceptance: >= 1 M keys/s)")
for mem in mems:
    print(f"memory at {mem['objects'] / 1e6:.0f} M objects: heap {mem['heap_bytes_per_object']:.1f} "
          f"B/object ({mem['heap_MiB_per_million']:.0f} MiB per million), RSS "
          f"{mem['rss_bytes_per_object']:.1f} B/object (acceptance at 10 M: <= 100 B/object)")
PY

# The same through the master's gRPC service (store_rpc_bench, beside the core's bench; needs
# Debian's etcd): a real MasterServer elected through a real etcd, against the same batches on an
# in-process MasterState in the same run.
rpc_bench="$(dirname "$bench")/store_rpc_bench"
if [[ ! -x "$rpc_bench" ]]; then
  echo "($rpc_bench not built: no gRPC figures)"
  exit 0
fi
"$rpc_bench" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  --benchmark_format=json >"$json" 2>/dev/null
uptime
/usr/bin/python3 - "$json" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
med = {b["run_name"]: b for b in data["benchmarks"] if b.get("aggregate_name") == "median"}
print()
print("StoreMaster.Exists over gRPC (127.0.0.1, one client thread; the master in the client's")
print("process, or apart: in a process of its own), 1,000-key batches, 1 M objects, against")
print("MasterState::Exists in-process (medians of 5); sw/call: context switches per call")
print(f"{'path':56s} {'keys':6s} {'Mkeys/s':>8s} {'ratio':>6s} {'Mkeys/cpu_s':>11s} {'ratio':>6s} "
      f"{'sw/call':>7s}")
rows = [("local (MasterState, no gRPC)", "ExistsLocal/hits:{h}/real_time")]
for proc in (0, 1):
    where = "apart" if proc else "in-process"
    rows.append((f"stub, plaintext, 1 call, {where}", f"ExistsRpc/hits:{{h}}/proc:{proc}/real_time"))
    for tls in (0, 1):
        for fl, poll in ((1, 1), (1, 0), (4, 1)):
            how = f"{fl} in flight" + ("" if poll else " sleeping")
            rows.append((f"StoreClient, {'mTLS' if tls else 'plaintext'}, {how}, {where}",
                         f"ExistsClient/hits:{{h}}/tls:{tls}/in_flight:{fl}/proc:{proc}/poll:{poll}"
                         "/real_time"))
worst = {}
for label, pat in rows:
    for hits, name in ((1, "hits"), (0, "misses")):
        b = med[pat.format(h=hits)]
        l = med[f"ExistsLocal/hits:{hits}/real_time"]
        r, c = b["items_per_second"], b["keys_per_cpu_s"]
        print(f"{label:56s} {name:6s} {r/1e6:8.2f} {r/l['items_per_second']:6.2f} {c/1e6:11.2f} "
              f"{c/l['keys_per_cpu_s']:6.2f} {b.get('switches_per_call', 0):7.2f}")
        if pat.startswith("ExistsClient"):
            w = worst.setdefault(label, [1e30, 1e30])
            w[0], w[1] = min(w[0], r), min(w[1], c)
for label, (r, c) in worst.items():
    print(f"minimum of hits and misses, {label}: {r/1e6:.2f} M keys/s wall clock, {c/1e6:.2f} M keys "
          f"per CPU-second (acceptance: >= 3 M keys/s)")
PY
