"""Block hashing byte-exact with vLLM's ``sha256_cbor`` prefix-caching hash, and model presets.

    hasher = dualpath.kv.BlockHasher(seed="0", block_size=16)   # seed: vLLM's PYTHONHASHSEED
    hashes = hasher.hash_blocks(token_ids)                       # list of 32-byte bytes

``hash_blocks(tokens, parent=None, extra_keys=None)`` hashes every full block (a partial tail is
ignored), chaining from ``parent`` (``none_hash`` when None). ``extra_keys`` is None or one entry
per full block, each None or the tuple vLLM builds for that block (e.g. ``(("cache_salt", "s"),)``
on the first block), encoded as canonical CBOR exactly as ``cbor2.dumps(..., canonical=True)``.
``hash_block(parent, tokens, extra_keys=None)`` hashes one block. Token ids must lie in
[0, 2**31 - 1] (a list of ints or a 1-D integer numpy array).

``models()`` lists the built-in presets; ``model(name_or_json_path)`` resolves one (see
docs/models.md).
"""

from dualpath._core.kv import BlockHasher, MAX_BLOCK_SIZE, MAX_TOKEN_ID, model, models

__all__ = ["BlockHasher", "MAX_BLOCK_SIZE", "MAX_TOKEN_ID", "model", "models"]

# vLLM 0.33's DEFAULT_NONE_HASH_SEED: the seed its sha256_cbor chain starts from when
# PYTHONHASHSEED is unset (vllm/v1/core/kv_cache_utils.py). Pass PYTHONHASHSEED instead when set.
VLLM_DEFAULT_SEED = "vllm-none-hash"

__all__.append("VLLM_DEFAULT_SEED")
