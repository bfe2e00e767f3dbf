#!/usr/bin/env python3
"""CPU and wall time of a remote ClusterStore put over UCX tcp (issue 27, acceptance 1's UCX put row).

One ClusterStore client as a host no node is on ("elsewhere": every byte goes over the transfer
engine) puts 64 MiB per batch_put_from call from a registered numpy buffer, REPS timed calls after
one untimed one (keys removed after each call). Prints the median wall time, and the means per
call of the client process's CPU (getrusage: all its threads) and of the store node's CPU
(/proc/NODE_PID/stat, so the node must run on this host). On a 2-core machine a loopback put is
bound by both processes' CPU together, which a loaded machine scales less than the wall time.
A second line splits the wall time of a call, median per call, into the client's put phases
(ClientStats put_start_ns / put_write_ns / put_commit_ns: the PutStart round trip, the writes with
the checksums beside them, the PutCommit round trip); a build without those counters shows 0.

  store_put_cpu.py CLUSTER ETCD NODE_PID OBJECT_BYTES REPS

bench/store/put_cpu_ab.sh starts the services and alternates two builds.
"""
import os
import resource
import statistics
import sys
import time

import dualpath
import numpy as np


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    cluster, etcd = sys.argv[1], sys.argv[2]
    node_pid, size, reps = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    if size <= 0 or (64 << 20) % size or reps < 1:
        sys.exit("store_put_cpu: OBJECT_BYTES must divide 64 MiB and REPS be >= 1")
    count = (64 << 20) // size
    s = dualpath.ClusterStore(cluster, etcd, model_fingerprint=27, etcd_insecure=True,
                              master_insecure=True, host="elsewhere", replicas=1,
                              retry_deadline=30.0)
    buf = np.random.default_rng(1).integers(0, 255, count * size, dtype=np.uint8)
    s.register_buffer(buf)
    ptrs = [buf.ctypes.data + i * size for i in range(count)]
    sizes = [size] * count
    tick = os.sysconf("SC_CLK_TCK")

    def node_cpu():
        with open(f"/proc/{node_pid}/stat") as f:
            fields = f.read().split(")")[1].split()
        return (int(fields[11]) + int(fields[12])) / tick

    wall, client, node = [], [], []
    phases = ("put_start_ns", "put_write_ns", "put_commit_ns")
    spent = {k: [] for k in phases}  # per timed call, ns
    for r in range(reps + 1):
        keys = [f"r{r}-{i}" for i in range(count)]
        s0 = s.stats()
        r0, n0, t0 = resource.getrusage(resource.RUSAGE_SELF), node_cpu(), time.perf_counter()
        res = s.batch_put_from(keys, ptrs, sizes)
        t1, r1, n1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF), node_cpu()
        s1 = s.stats()
        if any(x != 0 for x in res):
            sys.exit(f"store_put_cpu: put failed: {sorted(set(res))}")
        if r > 0:  # the first call is untimed (connections, first touch)
            wall.append((t1 - t0) * 1e3)
            client.append((r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) * 1e3)
            node.append((n1 - n0) * 1e3)
            for k in phases:  # absent from builds before the counters (an older wheel): 0
                spent[k].append(s1.get(k, 0) - s0.get(k, 0))
        s.remove(keys)
    c, n = statistics.mean(client), statistics.mean(node)
    print(f"size {size >> 10}K wall_ms {statistics.median(wall):.1f} (min {min(wall):.1f}) "
          f"client_cpu_ms {c:.1f} node_cpu_ms {n:.1f} total_cpu_ms {c + n:.1f} "
          f"load {os.getloadavg()[0]:.1f}")
    # Where the wall time went, median per call (the client's ClientStats put_*_ns counters).
    print("  phases ms (median): " + " ".join(
        f"{k[4:-3]} {statistics.median(spent[k]) / 1e6:.2f}" for k in phases))
    s.close()


if __name__ == "__main__":
    main()
