"""A tiny random-weight model that a CPU vLLM engine can serve (made at test time, offline)."""

from __future__ import annotations

import os

# Small enough to build in a second and serve on one core, shaped so vLLM's CPU attention takes
# it (head size 32, GQA) with a 32-token block. Every layer's page of a block is
# num_key_value_heads * block_size * 2 * head_size * 2 bytes (K and V, bf16): 8 KiB at block 32.
TINY_LLAMA = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=1024,
                  max_position_embeddings=4096)


def tiny_llama(path: str | os.PathLike, seed: int = 0, **overrides) -> str:
    """Writes a random-weight bf16 ``LlamaForCausalLM`` (``TINY_LLAMA`` with ``overrides``) to
    ``path`` with ``save_pretrained`` unless it is there already; returns the path. The same seed
    gives the same weights, so separate engine processes serve the same model."""
    path = os.fspath(path)
    if not os.path.exists(os.path.join(path, "config.json")):
        import torch
        import transformers

        torch.manual_seed(seed)
        cfg = transformers.LlamaConfig(**{**TINY_LLAMA, **overrides})
        transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(path)
    return path
