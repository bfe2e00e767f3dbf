"""dualpath.kv block hashes against the installed vLLM's own sha256_cbor block hashes
(issue 15, acceptance 2), and the hasher's input checks."""

import random

import numpy as np
import pytest

import dualpath

MAX_ID = 2**31 - 1


def _random_tokens(rng, n):
    # Mix every CBOR integer width and the edges, like tests/kv/gen_vectors.py.
    edges = [0, 23, 24, 255, 256, 65535, 65536, 2**24 - 1, 2**24, MAX_ID]
    return [rng.choice(edges) if rng.random() < 0.1 else rng.randint(0, MAX_ID) for _ in range(n)]


@pytest.fixture(scope="module")
def vllm_hashing():
    pytest.importorskip("vllm", reason="vLLM is installed in .venv only")
    from vllm.utils.hashing import sha256_cbor
    from vllm.v1.core import kv_cache_utils

    return sha256_cbor, kv_cache_utils


def _vllm_request_hashes(vllm_hashing, tokens, block_size, cache_salt=None, lora=None):
    """vLLM's block hashes of a real vllm.v1.request.Request (its own block hasher, extra keys
    included)."""
    from vllm import SamplingParams
    from vllm.v1.request import Request

    sha256_cbor, kv_cache_utils = vllm_hashing
    lora_request = None
    if lora is not None:
        from vllm.lora.request import LoRARequest

        lora_request = LoRARequest(lora[0], 1, lora[1])
    req = Request(
        request_id="r",
        prompt_token_ids=list(tokens),
        sampling_params=SamplingParams(max_tokens=1),
        pooling_params=None,
        lora_request=lora_request,
        cache_salt=cache_salt,
        block_hasher=kv_cache_utils.get_request_block_hasher(block_size, sha256_cbor),
    )
    return list(req.block_hashes)


@pytest.mark.parametrize("block_size", [16, 64, 256])
@pytest.mark.parametrize("seed", ["0", "42", None])
def test_hashes_equal_vllm(vllm_hashing, monkeypatch, block_size, seed):
    sha256_cbor, kv_cache_utils = vllm_hashing
    if seed is None:
        monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    else:
        monkeypatch.setenv("PYTHONHASHSEED", seed)
    kv_cache_utils.init_none_hash(sha256_cbor)
    ours = dualpath.kv.BlockHasher(seed or dualpath.kv.VLLM_DEFAULT_SEED, block_size)
    assert ours.none_hash == kv_cache_utils.NONE_HASH

    rng = random.Random(f"{seed}-{block_size}")
    for _ in range(4):
        tokens = _random_tokens(rng, rng.randint(block_size, 12 * block_size + block_size - 1))
        want = _vllm_request_hashes(vllm_hashing, tokens, block_size)
        assert len(want) == len(tokens) // block_size
        assert ours.hash_blocks(tokens) == want
        # numpy input, and one block at a time through hash_block, give the same chain.
        assert ours.hash_blocks(np.array(tokens, dtype=np.int64)) == want
        parent = None
        for b, h in enumerate(want):
            parent = ours.hash_block(parent, tokens[b * block_size : (b + 1) * block_size])
            assert parent == h


@pytest.mark.parametrize("block_size", [16, 64, 256])
def test_hashes_with_extra_keys_equal_vllm(vllm_hashing, monkeypatch, block_size):
    """vLLM 0.33 tags extra keys: (("lora", name, path), ("cache_salt", salt)) on the first block,
    (("lora", name, path),) on the others."""
    sha256_cbor, kv_cache_utils = vllm_hashing
    monkeypatch.setenv("PYTHONHASHSEED", "7")
    kv_cache_utils.init_none_hash(sha256_cbor)
    ours = dualpath.kv.BlockHasher("7", block_size)
    rng = random.Random(block_size)
    cases = [("salt-é", None), (None, ("adapter", "/loras/a")), ("s", ("b", "/p"))]
    for salt, lora in cases:
        tokens = _random_tokens(rng, 5 * block_size + 3)
        want = _vllm_request_hashes(vllm_hashing, tokens, block_size, cache_salt=salt, lora=lora)
        extra = []
        for b in range(len(want)):
            keys = []
            if lora is not None:
                keys.append(("lora", lora[0], lora[1]))
            if salt is not None and b == 0:
                keys.append(("cache_salt", salt))
            extra.append(tuple(keys) or None)
        assert ours.hash_blocks(tokens, extra_keys=extra) == want
        assert ours.hash_blocks(tokens) != want  # the keys matter


def test_bad_tokens_name_the_token():
    h = dualpath.kv.BlockHasher("0", 4)
    with pytest.raises(ValueError, match="token #2 = -1"):
        h.hash_blocks([1, 2, -1, 3])
    with pytest.raises(ValueError, match="token #0 = 2147483648"):
        h.hash_blocks([2**31, 1, 2, 3])
    with pytest.raises(TypeError, match="token #1"):
        h.hash_blocks([1, "x", 2, 3])
    with pytest.raises(ValueError, match="1-D"):
        h.hash_blocks(np.zeros((2, 4), dtype=np.int32))
    with pytest.raises(ValueError, match="block_size = 0"):
        dualpath.kv.BlockHasher("0", 0)
    with pytest.raises(ValueError, match="extra_keys: 1 entries for 2 full blocks"):
        h.hash_blocks(list(range(8)), extra_keys=[None])
    with pytest.raises(TypeError, match="float"):
        h.hash_blocks(list(range(4)), extra_keys=[(1.5,)])


def test_model_presets():
    names = [m["name"] for m in dualpath.kv.models()]
    assert "ds660b" in names and "qwen3-32b" in names
    m = dualpath.kv.model("r1-llama-8b")
    assert m["kv_bytes_per_token"] == m["num_layers"] * m["kv_bytes_per_token_per_layer"]
    with pytest.raises(ValueError, match="unknown model 'gpt-5'"):
        dualpath.kv.model("gpt-5")
