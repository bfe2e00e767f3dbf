"""DualPathHiCacheStorage through SGLang's own dynamic backend factory, with a real host KV pool
on CPU (issue 15, acceptance 4). Runs in .venv-sglang (SGLang pins another torch than vLLM).

The pools are built as SGLang's own storage unit tests build them (MHATokenToKVPool on "cpu",
then MHATokenToKVPoolHost over its buffers); the backend is created the way SGLang's cache
controller does: StorageBackendFactory.create_backend("dynamic", ...), then
register_mem_pool_host(host_pool).
"""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sglang", reason="SGLang is installed in .venv-sglang only")

from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig  # noqa: E402
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool  # noqa: E402
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost  # noqa: E402
from sglang.srt.mem_cache.storage import StorageBackendFactory  # noqa: E402

from dualpath.integrations.sglang import DualPathHiCacheStorage  # noqa: E402

PAGE = 16
LAYERS = 4
HEADS = 2
HEAD_DIM = 64


@pytest.fixture
def backend_and_pool(pool_path, store_path):
    device_pool = MHATokenToKVPool(size=1024, page_size=PAGE, dtype=torch.bfloat16, head_num=HEADS,
                                   head_dim=HEAD_DIM, layer_num=LAYERS, device="cpu",
                                   enable_memory_saver=False)
    host_pool = MHATokenToKVPoolHost(
        device_pool.get_device_pool_infos()[0].buffer_info, 2, 0, PAGE, "page_first",
        pin_memory=False,
        device_capacity_tokens=device_pool.size if device_pool.host_capacity_tokens is None
        else device_pool.host_capacity_tokens,
        start_layer=device_pool.start_layer, end_layer=device_pool.end_layer,
        write_back_staging=device_pool.hicache_write_back_staging)
    config = HiCacheStorageConfig(
        tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
        is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True,
        model_name="test-model",
        extra_config={"backend_name": "dualpath", "module_path": "dualpath.integrations.sglang",
                      "class_name": "DualPathHiCacheStorage", "pool_path": pool_path,
                      "store_path": store_path, "pool_size": 64 << 20, "sync": "none"})
    backend = StorageBackendFactory.create_backend("dynamic", config, host_pool)
    backend.register_mem_pool_host(host_pool)
    yield backend, host_pool
    backend.close()


def test_factory_builds_our_backend(backend_and_pool):
    backend, _ = backend_and_pool
    assert isinstance(backend, DualPathHiCacheStorage)


def test_batch_set_then_batch_get_round_trip(backend_and_pool):
    backend, _ = backend_and_pool
    g = torch.Generator().manual_seed(0)
    shape = (2, LAYERS, PAGE, HEADS, HEAD_DIM)
    values = [torch.randn(shape, generator=g).to(torch.bfloat16) for _ in range(4)]
    keys = [f"page-{i}" for i in range(4)]
    assert backend.batch_exists(keys) == 0
    assert backend.batch_set(keys, values)
    out = [torch.zeros(shape, dtype=torch.bfloat16).flatten() for _ in range(4)]
    got = backend.batch_get(keys, out)
    assert all(g is o for g, o in zip(got, out))
    for v, o in zip(values, out):
        assert torch.equal(v.flatten().view(torch.int16), o.view(torch.int16))  # byte-exact
    assert backend.batch_exists(keys) == 4
    assert backend.batch_exists(keys[:2] + ["missing"] + keys[2:]) == 2
    assert backend.exists("page-3") and not backend.exists("missing")
    assert backend.batch_get(["missing"], [torch.zeros(8)]) == [None]


def test_v1_zero_copy_writes_into_the_host_pool(backend_and_pool):
    backend, host = backend_and_pool
    n = 3
    src = host.alloc(n * PAGE)
    g = torch.Generator().manual_seed(1)
    kv = host.kv_buffer  # page_first: (2, tokens, layers, heads, head_dim)
    kv[:, src] = torch.randn(kv[:, src].shape, generator=g).to(kv.dtype)
    expected = kv[:, src].clone()
    keys = [f"v1-{i}" for i in range(n)]
    assert backend.batch_set_v1(keys, src) == [True] * n
    assert backend.batch_exists(keys) == n
    dst = host.alloc(n * PAGE)
    assert not torch.equal(kv[:, dst], expected)
    # The pointers the backend reads into are the host pool's own memory.
    ptrs, sizes = host.get_page_buffer_meta(dst)
    lo, hi = kv.data_ptr(), kv.data_ptr() + kv.numel() * kv.element_size()
    assert all(lo <= p and p + s <= hi for p, s in zip(ptrs, sizes))
    assert backend.batch_get_v1(keys, dst) == [True] * n
    assert torch.equal(kv[:, dst].view(torch.int16), expected.view(torch.int16))
    # A missing page fails alone; the pages before it load.
    assert backend.batch_get_v1(keys[:1] + ["nope"], host.alloc(2 * PAGE)) == [True, False]
