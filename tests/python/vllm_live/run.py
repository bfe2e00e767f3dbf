"""The frame every live-engine test module's fixture shares: the work directory and tiny model,
the engines it started (closed however the fixture ends), the phases' times, the seeded prompts,
and the connector's kv_transfer_config.

    with live_run(tmp_path_factory, "vllm-live", "vllm live engines") as r:
        a = r.start(EngineProcess("a", r.model, r.work, connector_config(extra, "fail"), cpu=1))
        r.a_out = ...
        yield r

Tests read what the fixture stored on ``r`` (an attribute bag). When the block ends, every engine
``r.start`` started and not ``r.close_all``-ed is closed, ``times["total_s"]`` is set and the times
are printed (pytest -s or the captured output shows them).
"""

import contextlib
import random
import time

from .model import tiny_llama


def seeded_prompts(seed, names, length, vocab=1024):
    """{name: [token ids]}: `length` ids below `vocab` per name, the same on every run."""
    rnd = random.Random(seed)
    return {n: [rnd.randrange(vocab) for _ in range(length)] for n in names}


def connector_config(extra, policy, role="kv_both"):
    """vLLM's kv_transfer_config for DualPathConnector with `extra` as its
    kv_connector_extra_config and `policy` as kv_load_failure_policy."""
    return {"kv_connector": "DualPathConnector",
            "kv_connector_module_path": "dualpath.integrations.vllm",
            "kv_role": role,
            "kv_load_failure_policy": policy,
            "kv_connector_extra_config": extra}


class LiveRun:
    """What a module's engines returned (attributes set by the fixture), and the engines."""

    def __init__(self, work, model):
        self.t0 = time.monotonic()
        self.work = work
        self.model = model
        self.times = {}
        self.engines = []

    def start(self, *engines):
        """Waits until every engine is ready (they were constructed first, so their imports
        overlap); they are closed when the run ends. Returns the engines (one: the engine)."""
        self.engines += engines
        for e in engines:
            e.wait_ready()
        return engines[0] if len(engines) == 1 else engines

    def close_all(self, check=False):
        """Closes the engines started so far; with `check`, asserts each exited with status 0."""
        engines, self.engines = self.engines, []
        rcs = [e.close() for e in engines]  # all closed before any assertion
        if check:
            for e, rc in zip(engines, rcs):
                assert rc == 0, e.log_tail()


@contextlib.contextmanager
def live_run(tmp_path_factory, name, label, tokenizer=False):
    """A LiveRun in a fresh directory `name` with a tiny model; `label` prefixes the times."""
    work = tmp_path_factory.mktemp(name)
    r = LiveRun(work, None)
    try:
        r.model = tiny_llama(work / "model", tokenizer=tokenizer)
        yield r
    finally:
        r.close_all()
        r.times["total_s"] = time.monotonic() - r.t0
        print(f"\n{label}: {r.times}")
