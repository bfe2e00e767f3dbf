"""Page movement between paged KV caches and dualpath.KVStore (dualpath.integrations._pages).

The vLLM connector's worker side does its data movement through these classes. Here they run on
every device this machine has: always CPU, and CUDA where a GPU is present (the GPU test machine:
vLLM cannot be installed there, so this is where the connector's GPU copies are tested). Caches
are permuted views of one allocation, as vLLM's standardized per-layer views are.
"""

import pytest

torch = pytest.importorskip("torch")

import dualpath  # noqa: E402
from dualpath.integrations._pages import PagedLayers  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
LAYERS = 4
BLOCKS = 32
SHAPE = (BLOCKS, 2, 16, 64)  # [blocks, heads, tokens, head size], vLLM's logical layout


def make_caches(device, dtype, seed=None):
    """Per-layer caches: logical [B, H, N, C] views of a [B, N, H, C] allocation (not contiguous)."""
    caches = {}
    g = torch.Generator().manual_seed(seed) if seed is not None else None
    for i in range(LAYERS):
        base = torch.zeros((SHAPE[0], SHAPE[2], SHAPE[1], SHAPE[3]), dtype=dtype)
        if g is not None:
            base.copy_(torch.randn(base.shape, generator=g).to(dtype))
        caches[f"layer.{i}"] = base.to(device).permute(0, 2, 1, 3)
    return caches


def keys(n, salt=0):
    return [bytes([salt, i]) * 16 for i in range(n)]


def save(layers, caches, block_ids, hashes, store):
    pending = layers.start_save(block_ids, hashes)
    for name, kv in caches.items():
        pending.add_layer(name, kv)
    return pending.finish(store)


@pytest.fixture
def store(pool_path, store_path):
    with dualpath.KVStore(pool_path, store_path, pool_size=64 << 20, namespace="pages") as s:
        yield s


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.int8])
def test_saved_pages_load_byte_identical_into_other_blocks(store, device, dtype):
    src = make_caches(device, dtype, seed=1)
    layers = PagedLayers(src)
    assert save(layers, src, [3, 5, 7], keys(3), store) == [0, 0, 0]

    dst = make_caches(device, dtype)
    loader = PagedLayers(dst)
    errors = loader.start_load(store, keys(3)).resolve([([10, 11, 12], 0)])
    assert errors == set()
    for name in dst:
        for s_blk, d_blk in zip([3, 5, 7], [10, 11, 12]):
            assert torch.equal(dst[name][d_blk].cpu(), src[name][s_blk].cpu()), (name, d_blk)
        others = [b for b in range(BLOCKS) if b not in (10, 11, 12)]
        assert not dst[name][others].cpu().float().abs().sum()


@pytest.mark.parametrize("device", DEVICES)
def test_a_miss_and_every_later_block_of_the_request_are_errors_and_untouched(store, device):
    src = make_caches(device, torch.bfloat16, seed=2)
    hashes = keys(4, salt=1)
    layers = PagedLayers(src)
    save(layers, src, [0, 1, 3], [hashes[0], hashes[1], hashes[3]], store)  # hashes[2] absent
    dst = make_caches(device, torch.bfloat16)
    loader = PagedLayers(dst)
    # Two requests in one batch: A = blocks 4..7 (its third block misses), B = blocks 8..9.
    all_hashes = hashes + [hashes[0], hashes[1]]
    errors = loader.start_load(store, all_hashes).resolve([([4, 5, 6, 7], 0), ([8, 9], 4)])
    assert errors == {6, 7}
    for name in dst:
        assert torch.equal(dst[name][4].cpu(), src[name][0].cpu())
        assert torch.equal(dst[name][5].cpu(), src[name][1].cpu())
        assert not dst[name][[6, 7]].cpu().float().abs().sum(), "a block after a miss was loaded"
        assert torch.equal(dst[name][8].cpu(), src[name][0].cpu())
        assert torch.equal(dst[name][9].cpu(), src[name][1].cpu())


@pytest.mark.parametrize("device", DEVICES)
def test_reused_staging_and_chunked_uploads_keep_every_step_exact(store, device):
    """Many steps through one PagedLayers whose pinned staging is reused (small cap) and whose
    GPU uploads are split into 3-row chunks: each step's loads are exactly that step's blocks."""
    src = make_caches(device, torch.bfloat16, seed=3)
    layers = PagedLayers(src)
    save(layers, src, list(range(BLOCKS)), keys(BLOCKS, salt=2), store)
    dst = make_caches(device, torch.bfloat16)
    block_bytes = PagedLayers(dst).block_bytes
    loader = PagedLayers(dst, pinned_cap_bytes=8 * block_bytes, gpu_chunk_bytes=3 * block_bytes)
    for step in range(6):
        n = 4 + step  # from 4 to 9 blocks: the last steps exceed the kept staging (one-off buffer)
        src_blocks = [(step * 5 + j) % BLOCKS for j in range(n)]
        hashes = [keys(BLOCKS, salt=2)[b] for b in src_blocks]
        dst_blocks = list(range(n))
        assert loader.start_load(store, hashes).resolve([(dst_blocks, 0)]) == set()
        for name in dst:
            for s_blk, d_blk in zip(src_blocks, dst_blocks):
                assert torch.equal(dst[name][d_blk].cpu(), src[name][s_blk].cpu()), (step, d_blk)


@pytest.mark.parametrize("device", DEVICES)
def test_a_save_missing_a_layer_stores_nothing(store, device):
    src = make_caches(device, torch.bfloat16, seed=4)
    layers = PagedLayers(src)
    pending = layers.start_save([1, 2], keys(2, salt=3))
    pending.add_layer("layer.0", src["layer.0"])
    with pytest.raises(RuntimeError, match="never started"):
        pending.finish(store)
    assert store.batch_exists(keys(2, salt=3)) == 0


def test_layers_on_several_devices_or_none_are_refused():
    with pytest.raises(ValueError, match="no KV cache layers"):
        PagedLayers({})
    if torch.cuda.is_available():
        caches = make_caches("cpu", torch.int8)
        caches["layer.0"] = caches["layer.0"].cuda()
        with pytest.raises(ValueError, match="several devices"):
            PagedLayers(caches)


def test_amx_permission_follows_the_cpu():
    """request_amx_permission (called by the vLLM connector when it registers CPU caches) leaves
    this process allowed to run AMX tile instructions exactly when the CPU has them (asked twice:
    idempotent); on a CPU without AMX it is a no-op that says so. In a fresh interpreter, so that
    what the check sees is this call's doing, not an earlier bf16 GEMM's (oneDNN asks too)."""
    import subprocess
    import sys

    code = ("import torch; from dualpath.integrations._pages import amx_permitted, "
            "request_amx_permission as r; s = bool(torch.cpu._is_amx_tile_supported()); "
            "g = r(); print(s, g, amx_permitted(), r())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    supported, granted, after, again = (w == "True" for w in out.stdout.split())
    assert granted == supported and after == supported and again == supported
