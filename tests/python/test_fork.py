"""The package after os.fork() (issue 25 item 11): every object either works in the child or
raises naming fork; nothing hangs. vLLM and SGLang fork their worker processes, so a store made
before the fork (or one made in the worker) must behave.

Each case runs tests/python/forkcheck.py in a fresh interpreter in its own process group, with a
deadline (the ``forkcheck`` fixture, conftest.py): a hang in a forked child fails the test (and the
group is killed) instead of hanging the suite. test_cluster_store.py runs the ClusterStore case
against its cluster.
"""

from __future__ import annotations


def test_kvstore_with_a_tier_works_in_a_forked_child(forkcheck, pool_path, store_path):
    forkcheck("kvstore", pool_path, store_path)


def test_native_store_raises_in_a_forked_child(forkcheck, pool_path, store_path):
    forkcheck("raw", pool_path, store_path)


def test_hasher_in_a_forked_child(forkcheck):
    forkcheck("hasher")
