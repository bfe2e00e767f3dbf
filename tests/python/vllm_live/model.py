"""A tiny random-weight model that a CPU vLLM engine can serve (made at test time, offline)."""

from __future__ import annotations

import os

# Small enough to build in a second and serve on one core, shaped so vLLM's CPU attention takes
# it (head size 32, GQA) with a 32-token block. Every layer's page of a block is
# num_key_value_heads * block_size * 2 * head_size * 2 bytes (K and V, bf16): 8 KiB at block 32.
TINY_LLAMA = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=1024,
                  max_position_embeddings=4096)


def tiny_llama(path: str | os.PathLike, seed: int = 0, tokenizer: bool = False,
               **overrides) -> str:
    """Writes a random-weight bf16 ``LlamaForCausalLM`` (``TINY_LLAMA`` with ``overrides``) to
    ``path`` with ``save_pretrained`` unless it is there already; returns the path. The same seed
    gives the same weights, so separate engine processes serve the same model. ``tokenizer``:
    also a word-level tokenizer whose words are ``t3`` .. ``t<vocab-1>`` (text "t5 t9" is token
    ids 5, 9; ids 0-2 are <unk>, <s>, </s>) with a chat template that concatenates the messages' contents, so the model serves
    /v1/chat/completions and /tokenize."""
    path = os.fspath(path)
    if not os.path.exists(os.path.join(path, "config.json")):
        import torch
        import transformers

        torch.manual_seed(seed)
        cfg = transformers.LlamaConfig(**{**TINY_LLAMA, **overrides})
        transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(path)
    if tokenizer and not os.path.exists(os.path.join(path, "tokenizer.json")):
        from tokenizers import Tokenizer, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast

        # Special tokens (matched before words) must not be prefixes of words: ids 0-2 are
        # <unk>, <s>, </s>; words are t3 .. t<vocab-1>.
        words = {"<unk>": 0, "<s>": 1, "</s>": 2}
        words.update({f"t{i}": i for i in range(3, {**TINY_LLAMA, **overrides}["vocab_size"])})
        tok = Tokenizer(models.WordLevel(vocab=words, unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                       eos_token="</s>")
        fast.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
        fast.save_pretrained(path)
    return path
