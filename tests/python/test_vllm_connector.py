"""DualPathConnector through vLLM's own classes on CPU (issue 15, acceptance 3).

vLLM's own Scheduler (loading the connector from --kv-transfer-config's module path) plans saves
and loads; the worker side runs as vLLM's model runner would call it, on CPU tensors shaped as
vLLM's paged KV cache for a real model geometry (tests/python/data/qwen2.5-0.5b/config.json:
Qwen2.5-0.5B, 24 layers, 2 KV heads of 64, bf16). What cannot run without a GPU: the model's
forward pass (vLLM's PyPI wheel has CUDA kernels only), so the layers' save/load calls are made
here in layer order, as the attention layers make them.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm", reason="vLLM is installed in .venv only")

from vllm import SamplingParams  # noqa: E402
from vllm.config import (  # noqa: E402
    CacheConfig,
    DeviceConfig,
    KVTransferConfig,
    ModelConfig,
    SchedulerConfig,
    VllmConfig,
)
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole  # noqa: E402
from vllm.utils.hashing import sha256_cbor  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    compute_layer_kv_cache_shape_bytes,
)
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

from dualpath.integrations.vllm import DualPathConnector  # noqa: E402
from vllm_live import flip_pattern  # noqa: E402

MODEL_DIR = Path(__file__).parent / "data" / "qwen2.5-0.5b"
BLOCK = 16
NUM_BLOCKS = 64


class Engine:
    """One vLLM instance's scheduler and worker-side connector, sharing the node's tiers."""

    def __init__(self, pool_path, store_path):
        hf = json.loads((MODEL_DIR / "config.json").read_text())
        model = ModelConfig(model=str(MODEL_DIR), tokenizer=str(MODEL_DIR),
                            skip_tokenizer_init=True, dtype="bfloat16", max_model_len=1024, seed=0)
        self.config = VllmConfig(
            model_config=model,
            scheduler_config=SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=1024,
                                             max_model_len=1024, enable_chunked_prefill=True,
                                             is_encoder_decoder=False),
            cache_config=CacheConfig(block_size=BLOCK, cache_dtype="auto",
                                     enable_prefix_caching=True),
            kv_transfer_config=KVTransferConfig(
                kv_connector="DualPathConnector",
                kv_connector_module_path="dualpath.integrations.vllm",
                kv_role="kv_both",
                kv_load_failure_policy="recompute",  # vLLM 0.33's default is "fail"
                kv_connector_extra_config={"pool_path": pool_path, "store_path": store_path,
                                           "pool_size": 64 << 20, "sync": "none"}),
            device_config=DeviceConfig("cpu"),
        )
        self.spec = FullAttentionSpec(
            block_size=BLOCK, num_kv_heads=hf["num_key_value_heads"],
            head_size=hf["hidden_size"] // hf["num_attention_heads"], dtype=torch.bfloat16)
        self.layers = [f"model.layers.{i}.self_attn.attn" for i in range(hf["num_hidden_layers"])]
        self.kv_cache_config = KVCacheConfig(
            num_blocks=NUM_BLOCKS, kv_cache_tensors=[],
            kv_cache_groups=[KVCacheGroupSpec(self.layers, self.spec)])
        self.config.cache_config.num_gpu_blocks = NUM_BLOCKS
        self.scheduler = Scheduler(
            vllm_config=self.config, kv_cache_config=self.kv_cache_config,
            structured_output_manager=StructuredOutputManager(self.config), block_size=BLOCK)
        assert isinstance(self.scheduler.connector, DualPathConnector)
        self.worker = DualPathConnector(self.config, KVConnectorRole.WORKER, self.kv_cache_config)
        # vLLM's per-layer paged cache view: logical [B, H, N, C bytes], blocks at dim 0.
        shape = compute_layer_kv_cache_shape_bytes(self.spec, NUM_BLOCKS)
        self.caches = {name: torch.zeros(shape, dtype=torch.int8) for name in self.layers}
        self.worker.register_kv_caches(self.caches)

    def request(self, req_id, tokens):
        init_none_hash(sha256_cbor)
        req = Request(request_id=req_id, prompt_token_ids=tokens,
                      sampling_params=SamplingParams(max_tokens=4), pooling_params=None,
                      block_hasher=get_request_block_hasher(BLOCK, sha256_cbor))
        self.scheduler.add_request(req)
        return req

    def step(self):
        """schedule(), then the worker side of that step (loads, then saves, layer by layer)."""
        out = self.scheduler.schedule()
        meta = out.kv_connector_metadata
        self.worker.bind_connector_metadata(meta)
        self.worker.start_load_kv(None)
        for name in self.layers:
            self.worker.wait_for_layer_load(name)
            self.worker.save_kv_layer(name, self.caches[name], None)
        self.worker.wait_for_save()
        self.worker.clear_connector_metadata()
        return out, meta

    def page(self, block_id):
        return torch.stack([self.caches[n][block_id] for n in self.layers])


def fill_random(engine, block_ids, seed):
    g = torch.Generator().manual_seed(seed)
    for name in engine.layers:
        for b in block_ids:
            c = engine.caches[name][b]
            c.copy_(torch.randint(-128, 128, c.shape, generator=g, dtype=torch.int8))


@pytest.fixture
def tiers(pool_path, store_path):
    return pool_path, store_path


PROMPT = list(range(1000, 1100))  # 100 tokens: 6 full blocks


def save_prompt(tiers):
    """Engine A computes PROMPT (its 'forward' fills the pages) and saves its full blocks."""
    a = Engine(*tiers)
    req = a.request("a", PROMPT)
    out = a.scheduler.schedule()
    meta = out.kv_connector_metadata
    assert meta.loads == []
    (save,) = meta.saves
    assert save.hashes == list(req.block_hashes[:6])
    fill_random(a, save.block_ids, seed=1)
    a.worker.bind_connector_metadata(meta)
    for name in a.layers:
        a.worker.save_kv_layer(name, a.caches[name], None)
    a.worker.wait_for_save()
    a.worker.clear_connector_metadata()
    return a, save.block_ids


def test_prefix_saved_by_one_engine_loads_byte_identical_in_another(tiers):
    a, a_blocks = save_prompt(tiers)
    b = Engine(*tiers)  # a fresh instance: nothing in its own prefix cache
    req = b.request("b", PROMPT[:96] + list(range(7, 47)))
    out, meta = b.step()
    # vLLM's scheduler asked the connector and took the full 6-block hit.
    assert out.scheduled_new_reqs[0].num_computed_tokens == 96
    assert out.num_scheduled_tokens["b"] == len(req.prompt_token_ids) - 96
    (load,) = meta.loads
    assert load.hashes == list(req.block_hashes[:6])
    for i, blk in enumerate(load.block_ids):
        assert torch.equal(b.page(blk), a.page(a_blocks[i])), f"block {i}"
    assert b.worker.get_block_ids_with_load_errors() == set()
    untouched = set(range(1, NUM_BLOCKS)) - set(load.block_ids) - set(meta.saves[0].block_ids)
    assert all(not b.page(blk).any() for blk in untouched)


def test_corrupt_block_is_a_miss_and_recomputed(tiers):
    pool_path, store_path = tiers
    a, a_blocks = save_prompt(tiers)
    pattern = a.caches[a.layers[0]][a_blocks[2]].numpy().tobytes()[:512]
    assert flip_pattern(pool_path, pattern)
    files = [os.path.join(d, f) for d, _, fs in os.walk(store_path) for f in fs]
    assert sum(flip_pattern(path, pattern) for path in files) == 1
    c = Engine(*tiers)
    req = c.request("c", PROMPT)
    out, meta = c.step()
    assert out.scheduled_new_reqs[0].num_computed_tokens == 96  # present: reads verify later
    (load,) = meta.loads
    errors = c.worker.get_block_ids_with_load_errors()
    assert errors == set(load.block_ids[2:])  # block 2 failed its checksum, 3-5 depend on it
    for i in (0, 1):
        assert torch.equal(c.page(load.block_ids[i]), a.page(a_blocks[i]))
    for blk in load.block_ids[2:]:
        assert not c.page(blk).any(), "a corrupt block was loaded"
    # vLLM's scheduler takes the errors and recomputes from block 2.
    c.scheduler.update_from_output(out, ModelRunnerOutput(
        req_ids=["c"], req_id_to_index={"c": 0}, sampled_token_ids=[[]],
        kv_connector_output=KVConnectorOutput(invalid_block_ids=errors)))
    assert req.num_computed_tokens == 2 * BLOCK
    out2 = c.scheduler.schedule()
    assert out2.num_scheduled_tokens["c"] == len(PROMPT) - 2 * BLOCK
    # The tiers dropped the corrupt copies (a clean miss from now on), and the step that
    # recomputes block 2 stores it afresh; blocks 3-5 are present and not saved again.
    present = c.worker._store.batch_is_exist(list(req.block_hashes[:6]))
    assert present == [True, True, False, True, True, True]
    (resave,) = out2.kv_connector_metadata.saves
    assert resave.block_ids == [load.block_ids[2]]
    assert resave.hashes == [req.block_hashes[2]]


WORKER_PROC = textwrap.dedent("""
    import sys, torch
    sys.path.insert(0, sys.argv[3])
    import test_vllm_connector as t
    e = t.Engine(sys.argv[1], None)
    req = e.request("p", t.PROMPT)
    if sys.argv[2] == "save":
        out = e.scheduler.schedule()
        t.fill_random(e, out.kv_connector_metadata.saves[0].block_ids, seed=5)
        e.worker.bind_connector_metadata(out.kv_connector_metadata)
        for n in e.layers:
            e.worker.save_kv_layer(n, e.caches[n], None)
        e.worker.wait_for_save()
        ids = out.kv_connector_metadata.saves[0].block_ids
    else:
        out, meta = e.step()
        assert out.scheduled_new_reqs[0].num_computed_tokens == 96
        ids = meta.loads[0].block_ids
    torch.save(torch.stack([e.page(b) for b in ids]), sys.argv[4])
""")


def test_two_worker_processes_share_one_pool(pool_path, tmp_path):
    """Two vLLM engine processes on a node, pool only (no persistent tier): the second loads
    what the first saved, through the shared-memory pool."""
    here = str(Path(__file__).parent)
    outs = [tmp_path / "saved.pt", tmp_path / "loaded.pt"]
    for role, out in zip(("save", "load"), outs):
        r = subprocess.run([sys.executable, "-c", WORKER_PROC, pool_path, role, here, str(out)],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
    saved, loaded = (torch.load(p) for p in outs)
    assert saved.shape[0] == 6 and saved.any()
    assert torch.equal(saved, loaded)
