"""Loads and saves of paged KV between a GPU's caches and the node pool, against the copies a
GPU does anyway (run on a machine with CUDA; docs/integrations/vllm.md has the figures).

The geometry is a Qwen3-32B-like layer (8 KV heads of 128, K and V, bf16, 16-token blocks: 64 KiB
pages) x --layers; every figure is a ratio against a baseline measured in the same process:
  load  = KVStore batch get of N Full Blocks from the pool into pinned staging, then the upload
          and per-layer scatter into the paged caches (PagedLayers, as the vLLM connector does),
          against one pinned host-to-device copy of the same bytes;
  get   = the batch get alone, against a host memcpy of the same bytes (torch copy_);
  save  = per-layer gather from the caches, download, and the batch put into the pool, against
          one device-to-host copy of the same bytes into pinned memory.
    python bench/python/gpu_pages_bench.py [--blocks 256] [--layers 64] [--repeat 5]
                                           [--copy-threads N]
"""

import argparse
import os
import statistics
import time
import uuid

import torch

import dualpath
from dualpath.integrations._pages import PagedLayers

PAGE_SHAPE = (16, 16, 128)  # [K+V heads, tokens, head size] of one layer's block page, bf16


def timed(fn, repeat):
    times = []
    for _ in range(repeat):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=256)
    ap.add_argument("--layers", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--copy-threads", type=int, default=0, help="KVStore copy_threads (0: auto)")
    args = ap.parse_args()
    assert torch.cuda.is_available(), "needs a GPU"
    dev = torch.device("cuda")
    n, total = args.blocks, 2 * args.blocks  # caches hold twice the blocks moved
    caches = {f"l{i}": torch.randn((total, *PAGE_SHAPE), device=dev).to(torch.bfloat16)
              for i in range(args.layers)}
    layers = PagedLayers(caches, pinned_cap_bytes=4 << 30)
    nbytes = n * layers.block_bytes
    keys = [i.to_bytes(4, "little") * 8 for i in range(n)]
    src_ids, dst_ids = list(range(n)), list(range(n, total))
    pool = f"/dev/shm/dualpath-gpubench-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    try:
        with dualpath.KVStore(pool, None, pool_size=nbytes + (nbytes >> 2) + (64 << 20),
                              namespace="bench", copy_threads=args.copy_threads) as store:
            def save():
                pending = layers.start_save(src_ids, keys)
                for name, kv in caches.items():
                    pending.add_layer(name, kv)
                rcs = pending.finish(store)
                assert all(rc == 0 for rc in rcs), [dualpath.error_name(rc) for rc in rcs]

            def load():
                assert layers.start_load(store, keys).resolve([(dst_ids, 0)]) == set()

            def old_load():  # the connector before PagedLayers: pageable staging, per-layer upload
                staging = torch.empty((n, layers.block_bytes), dtype=torch.uint8)
                store.batch_get(keys, list(staging))
                r = torch.arange(n)
                ids = torch.tensor(dst_ids)
                for name, kv in caches.items():
                    off, size = layers.offsets[name]
                    pages = staging[r, off:off + size]
                    kv[ids] = pages.view(kv.dtype).view(-1, *kv.shape[1:]).to(kv.device)

            def old_save_gather():  # ... and its save: a synchronous download per layer
                staging = torch.empty((n, layers.block_bytes), dtype=torch.uint8)
                idx = torch.tensor(src_ids, device=dev)
                for name, kv in caches.items():
                    off, size = layers.offsets[name]
                    pages = kv.index_select(0, idx).contiguous().view(torch.uint8).reshape(n, -1)
                    staging[:, off:off + size] = pages.cpu()
                return staging

            save()  # warm: the pool holds the blocks from here on
            load()
            for name in caches:  # the loaded blocks are the saved ones
                assert torch.equal(caches[name][n:], caches[name][:n]), name
            host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
            host2 = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
            gpu = torch.empty(nbytes, dtype=torch.uint8, device=dev)
            rows = list(host.view(n, layers.block_bytes))
            t_h2d = timed(lambda: gpu.copy_(host, non_blocking=True), args.repeat)
            t_d2h = timed(lambda: host.copy_(gpu, non_blocking=True), args.repeat)
            t_memcpy = timed(lambda: host2.copy_(host), args.repeat)
            t_get = timed(lambda: store.batch_get(keys, rows), args.repeat)
            t_load = timed(load, args.repeat)
            t_old_load = timed(old_load, args.repeat)
            t_old_gather = timed(old_save_gather, args.repeat)
            t_gather = timed(lambda: _gather(layers, caches, src_ids, keys), args.repeat)
            for k in keys:  # save measures a put that writes
                store.remove(k)
            t_save = []
            for _ in range(args.repeat):
                torch.cuda.synchronize()
                t = time.perf_counter()
                save()
                t_save.append(time.perf_counter() - t)
                for k in keys:
                    store.remove(k)
            t_save = statistics.median(t_save)
    finally:
        if os.path.exists(pool):
            os.unlink(pool)
    gb = nbytes / 1e9
    print(f"gpu_pages_bench: {torch.cuda.get_device_name()} {n} blocks x {args.layers} layers "
          f"({layers.block_bytes >> 10} KiB per block, {gb:.2f} GB), median of {args.repeat}, "
          f"copy_threads {args.copy_threads or 'auto'} ({os.cpu_count()} CPUs)")
    print(f"  baseline h2d {gb / t_h2d:7.1f} GB/s   d2h {gb / t_d2h:7.1f} GB/s   "
          f"host memcpy {gb / t_memcpy:7.1f} GB/s")
    print(f"  get  {gb / t_get:7.1f} GB/s  {t_memcpy / t_get:5.2f}x memcpy")
    print(f"  load {gb / t_load:7.1f} GB/s  {t_h2d / t_load:5.2f}x h2d  "
          f"{t_memcpy / t_load:5.2f}x memcpy")
    print(f"  save {gb / t_save:7.1f} GB/s  {t_d2h / t_save:5.2f}x d2h  "
          f"{t_memcpy / t_save:5.2f}x memcpy")
    print(f"  before PagedLayers: load {gb / t_old_load:7.1f} GB/s ({t_old_load / t_load:4.2f}x "
          f"the time of now); save's gather+download {gb / t_old_gather:7.1f} GB/s "
          f"({t_old_gather / t_gather:4.2f}x the time of now: {gb / t_gather:7.1f} GB/s)")


def _gather(layers, caches, block_ids, keys):
    """PagedLayers' save up to the host copy (no put): gather, download, block-major layout."""
    pending = layers.start_save(block_ids, keys)
    for name, kv in caches.items():
        pending.add_layer(name, kv)
    layers._save_staging.fence(layers.device)
    layers._save_staging.wait()
    return torch.cat([pending._slices[name] for name in layers.names], dim=1)


if __name__ == "__main__":
    main()
