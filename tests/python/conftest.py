"""Fixtures for the dualpath Python tests (run by scripts/test_python.sh inside the project's
venvs, against the installed package)."""

import os
import uuid

import pytest


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
