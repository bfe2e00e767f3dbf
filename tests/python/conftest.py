"""Fixtures for the dualpath Python tests (run by scripts/test_python.sh inside the project's
venvs, against the installed package)."""

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

FORKCHECK = Path(__file__).resolve().parent / "forkcheck.py"
FORKCHECK_DEADLINE_S = 150.0  # hang guard: each forked child has its own 60 s guard in forkcheck.py


@pytest.fixture
def pool_path():
    """A fresh shared-memory pool path, removed afterwards."""
    path = f"/dev/shm/dualpath-pytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    yield path
    if os.path.exists(path):
        os.unlink(path)


@pytest.fixture
def store_path(tmp_path):
    return str(tmp_path / "store")


@pytest.fixture
def forkcheck():
    """Runs a case of forkcheck.py (``forkcheck(CASE, *ARGS)``) in a fresh interpreter in its own
    process group; returns its output, or fails with it (killing the whole group) if it failed or
    ran past the deadline, so a hang in a forked child cannot hang the suite."""

    def run(*args: str) -> str:
        proc = subprocess.Popen([sys.executable, str(FORKCHECK), *args], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=FORKCHECK_DEADLINE_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            raise AssertionError(
                f"forkcheck {args[0]} hung (killed after {FORKCHECK_DEADLINE_S} s):\n{out}"
            ) from None
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # a forked child the script left behind
            except ProcessLookupError:
                pass
        assert proc.returncode == 0, f"forkcheck {args[0]} failed (exit {proc.returncode}):\n{out}"
        assert f"forkcheck {args[0]}: ok" in out, out
        return out

    return run


@pytest.fixture(scope="module")
def store_cluster(tmp_path_factory):
    """A real distributed KV store (etcd, a master, two nodes; mutual TLS and a transfer token)
    for one test module: tests/python/store_cluster.py. Skips when etcd or the binary is
    missing."""
    from store_cluster import start_cluster

    yield from start_cluster(tmp_path_factory)
