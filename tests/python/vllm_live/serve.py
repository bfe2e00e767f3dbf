"""Real vLLM OpenAI servers on the CPU (``python -m vllm.entrypoints.openai.api_server``), one
process group each (API server, engine core and worker: vLLM's CPU platform always runs the worker
in its own process), for tests that drive instances over HTTP (P/D behind dualpath's proxy).

Readiness is event-driven: a thread copies the server's output to its log and signals when vLLM
prints "Application startup complete", so no test sleeps or polls for it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .engine import BLOCK_SIZE, engine_env

READY_LINE = "Application startup complete"


def free_port() -> int:
    """A TCP port the OS had free a moment ago (bind to 0, read it, close)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """One vLLM OpenAI server. The constructor starts it and returns; ``wait_ready`` waits for
    its startup line (start several, then wait for each, so their imports overlap)."""

    def __init__(self, name: str, model: str, log_dir: str | os.PathLike, port: int,
                 kv_transfer_config: dict | None = None, cpu: int | None = None,
                 extra_args: list[str] | None = None, env: dict[str, str] | None = None,
                 host: str = "127.0.0.1", wrapper: list[str] | None = None,
                 tokenizer: bool = False) -> None:
        """`wrapper`: a command the server runs under (e.g. entering a testbed node's network
        namespace); `host`: the address it listens on; `tokenizer`: the model has one
        (tiny_llama(tokenizer=True)), else the server runs without (prompts as token ids)."""
        self.name = name
        self.port = port
        self.url = f"http://{host}:{port}"
        self.log_path = Path(log_dir) / f"server-{name}.log"
        args = list(wrapper or []) + [
                sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
                "--host", host, "--port", str(port)] + (
                    [] if tokenizer else ["--skip-tokenizer-init"]) + [
                "--block-size", str(BLOCK_SIZE), "--dtype", "bfloat16", "--enforce-eager",
                "--max-model-len", "2048", "--max-num-seqs", "8", "--seed", "0",
                "--disable-log-stats"]
        if kv_transfer_config is not None:
            args += ["--kv-transfer-config", json.dumps(kv_transfer_config)]
        args += extra_args or []
        full_env = engine_env(cpu)
        # The OpenAI server runs the engine core and the worker in processes of their own.
        full_env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
        full_env.update(env or {})
        self._ready = threading.Event()
        self._started = time.monotonic()
        self.ready_s: float | None = None
        self._proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      env=full_env, start_new_session=True)
        self._pump = threading.Thread(target=self._copy_log, daemon=True)
        self._pump.start()

    def _copy_log(self) -> None:
        with open(self.log_path, "wb") as log:
            for line in self._proc.stdout:
                log.write(line)
                log.flush()
                if not self._ready.is_set() and READY_LINE.encode() in line:
                    self.ready_s = time.monotonic() - self._started
                    self._ready.set()
        self._ready.set()  # the process ended: wake a waiter (it checks the exit)

    def wait_ready(self, timeout: float = 900) -> float:
        """Seconds the server took to start; RuntimeError with its log tail if it did not."""
        if not self._ready.wait(timeout) or self._proc.poll() is not None:
            raise RuntimeError(f"vLLM server {self.name} did not start (exit "
                               f"{self._proc.poll()}); log tail:\n{self.log_tail()}")
        return self.ready_s

    def alive(self) -> bool:
        return self._proc.poll() is None

    def kill(self) -> None:
        """SIGKILL to the whole process group (API server, engine core, worker)."""
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._proc.wait()

    def stop(self) -> None:
        if self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, signal.SIGTERM)
                self._proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()
            except ProcessLookupError:
                pass
        self._pump.join(timeout=10)

    def log_tail(self, chars: int = 6000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def kv_config(role: str, transfer_port: int, token_file: str, store_path: str, namespace: str,
              stats_dir: str, policy: str, timeout_s: float = 20.0,
              extra: dict[str, Any] | None = None, host: str = "127.0.0.1") -> dict:
    """DualPathConnector's --kv-transfer-config for a P/D instance: no pool (every stored block
    is read from the persistent tier), transfers on `host` (loopback) with the run's token."""
    cfg = {"pool_path": "", "store_path": store_path, "namespace": namespace, "sync": "none",
           "transfer_listen": f"{host}:{transfer_port}", "transfer_token_file": token_file,
           "transfer_timeout_s": timeout_s,
           "stats_path": os.path.join(stats_dir, "pd-{pid}.jsonl")}
    cfg.update(extra or {})
    return {"kv_connector": "DualPathConnector",
            "kv_connector_module_path": "dualpath.integrations.vllm",
            "kv_role": role, "kv_load_failure_policy": policy,
            "kv_connector_extra_config": cfg}
