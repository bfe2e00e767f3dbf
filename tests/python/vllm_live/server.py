"""One vLLM engine in this process, driven over a pipe (vllm_live.engine.EngineProcess):
    python -m vllm_live.server REPLY_FD
The first line on stdin is {"engine_args": {...}} (``vllm.LLM`` keyword arguments); then one JSON
request per line, {"cmd": ..., "args": {...}}; one JSON reply per request on REPLY_FD, {"ok": ...}
or {"error": traceback}. vLLM's own output (logs) goes to stdout/stderr."""

import json
import os
import sys
import time
import traceback


def main() -> None:
    replies = os.fdopen(int(sys.argv[1]), "w", buffering=1)

    def reply(msg: dict) -> None:
        replies.write(json.dumps(msg) + "\n")

    config = json.loads(sys.stdin.readline())
    t0 = time.monotonic()
    from vllm import LLM, SamplingParams

    t1 = time.monotonic()
    llm = LLM(**config["engine_args"])
    reply({"ok": {"import_s": t1 - t0, "start_s": time.monotonic() - t1}})

    def generate(prompts, max_tokens):
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        return [{"token_ids": list(o.outputs[0].token_ids),
                 "finish_reason": o.outputs[0].finish_reason,
                 "num_cached_tokens": o.num_cached_tokens} for o in outs]

    def block_hashes(tokens):
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.kv_cache_utils import hash_block_tokens

        cache = llm.llm_engine.vllm_config.cache_config
        fn = get_hash_fn_by_name(cache.prefix_caching_hash_algo)
        out, parent = [], None
        for i in range(len(tokens) // cache.block_size):
            parent = hash_block_tokens(fn, parent, tokens[i * cache.block_size:
                                                         (i + 1) * cache.block_size])
            out.append(bytes(parent).hex())
        return out

    def connector_stats():
        from vllm.distributed.kv_transfer import get_kv_transfer_group

        return get_kv_transfer_group().stats()  # the worker side (this process: in-process core)

    def amx():
        import torch

        from dualpath.integrations._pages import amx_permitted

        return {"supported": bool(torch.cpu._is_amx_tile_supported()),
                "permitted": amx_permitted()}

    handlers = {"generate": generate, "block_hashes": block_hashes,
                "connector_stats": connector_stats, "amx": amx}
    for line in sys.stdin:
        request = json.loads(line)
        if request["cmd"] == "quit":
            break
        try:
            reply({"ok": handlers[request["cmd"]](**request.get("args", {}))})
        except Exception:
            reply({"error": traceback.format_exc()})


if __name__ == "__main__":
    main()
