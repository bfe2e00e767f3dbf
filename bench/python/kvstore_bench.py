#!/usr/bin/env python3
"""dualpath.KVStore speed from Python (issue 15, acceptance 5), ratios within one run.

  batch_get_into: 256 KiB blocks from the node pool into a registered numpy (and, if installed,
                  torch) buffer, against memcpy of the same bytes (numpy.copyto of the batch,
                  source and destination both warm); target >= 0.8x memcpy.
  batch_exists:   1,000-key batches of 32-byte keys, all present; target >= 1 M keys/s.

Usage: .venv/bin/python bench/python/kvstore_bench.py [--blocks 256] [--reps 7] [--json]
"""

import argparse
import json
import os
import statistics
import time
import uuid

import numpy as np

import dualpath

BLOCK = 256 << 10


def best_of(fn, reps):
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times), statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=256, help="blocks per batch (256 = 64 MiB)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if not 1 <= a.blocks <= 4096 or not 1 <= a.reps <= 1000:
        ap.error("--blocks must be in [1, 4096] and --reps in [1, 1000]")

    pool = f"/dev/shm/dualpath-bench-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    n = a.blocks
    out = {"block_bytes": BLOCK, "blocks": n}
    try:
        with dualpath.KVStore(pool, None, pool_size=(n * BLOCK) * 2 + (256 << 20)) as s:
            src = np.random.default_rng(0).integers(0, 256, n * BLOCK, dtype=np.uint8)
            dst = np.zeros_like(src)
            keys = [i.to_bytes(32, "little") for i in range(n)]
            s.register_buffer(src)
            s.register_buffer(dst)
            ptrs_src = [src.ctypes.data + i * BLOCK for i in range(n)]
            ptrs_dst = [dst.ctypes.data + i * BLOCK for i in range(n)]
            assert s.batch_put_from(keys, ptrs_src, [BLOCK] * n) == [0] * n
            get = lambda: s.batch_get_into(keys, ptrs_dst, [BLOCK] * n)  # noqa: E731
            assert get() == [BLOCK] * n and (dst == src).all()
            memcpy = lambda: np.copyto(dst, src)  # noqa: E731
            memcpy()
            # Interleave so that both see the same machine load.
            g, m = [], []
            for _ in range(a.reps):
                g.append(best_of(get, 1)[0])
                m.append(best_of(memcpy, 1)[0])
            out["get_gbps"] = n * BLOCK / min(g) / 1e9
            out["memcpy_gbps"] = n * BLOCK / min(m) / 1e9
            out["get_vs_memcpy"] = min(m) / min(g)
            out["get_vs_memcpy_median"] = statistics.median(m) / statistics.median(g)
            try:
                import torch

                t = torch.zeros(n * BLOCK, dtype=torch.uint8)
                s.register_buffer(t)
                tp = [t.data_ptr() + i * BLOCK for i in range(n)]
                tget = lambda: s.batch_get_into(keys, tp, [BLOCK] * n)  # noqa: E731
                assert tget() == [BLOCK] * n and bool((t.numpy() == src).all())
                tg = [best_of(tget, 1)[0] for _ in range(a.reps)]
                out["torch_get_vs_memcpy"] = min(m) / min(tg)
            except ImportError:
                pass

            # 1,000 distinct small blocks for the lookups.
            small = np.zeros(4096, np.uint8)
            batch = [(10**6 + i).to_bytes(32, "little") for i in range(1000)]
            assert s.batch_put(batch, [small] * 1000) == [0] * 1000
            assert s.batch_exists(batch) == 1000
            ex = [best_of(lambda: s.batch_exists(batch), 1)[0] for _ in range(a.reps * 20)]
            out["exists_keys_per_s"] = 1000 / min(ex)
            out["exists_keys_per_s_median"] = 1000 / statistics.median(ex)
    finally:
        if os.path.exists(pool):
            os.unlink(pool)
    if a.json:
        print(json.dumps(out))
    else:
        print(f"batch_get_into {n} x 256 KiB from the pool: {out['get_gbps']:.2f} GB/s; "
              f"memcpy {out['memcpy_gbps']:.2f} GB/s; ratio {out['get_vs_memcpy']:.2f} "
              f"(median {out['get_vs_memcpy_median']:.2f}; acceptance >= 0.8)")
        if "torch_get_vs_memcpy" in out:
            print(f"  into a torch tensor: ratio {out['torch_get_vs_memcpy']:.2f}")
        print(f"batch_exists, 1000-key batches: {out['exists_keys_per_s'] / 1e6:.2f} M keys/s "
              f"(median {out['exists_keys_per_s_median'] / 1e6:.2f}; acceptance >= 1)")


if __name__ == "__main__":
    main()
