"""Fork checks of the dualpath package, run by test_fork.py and test_cluster_store.py in a fresh
interpreter (``python forkcheck.py CASE ARGS...``), so that neither a hang nor a crash in a forked
child can take pytest with it: the test runs this script with a deadline and kills its whole
process group when the deadline passes.

Each case opens dualpath objects in this process, uses them, calls ``os.fork()`` and checks what a
child can do with them (``in_child``: the parent waits for the child with its own deadline and
reports a hang as a failure). Children leave through ``sys.exit``, so the interpreter's normal
finalization (which destroys the inherited native objects) runs as in a real worker process.
Prints ``forkcheck CASE: ok`` and exits 0 when every check held; any failure raises.
"""

from __future__ import annotations

import concurrent.futures
import os
import select
import signal
import sys
import traceback

import numpy as np

import dualpath

CHILD_DEADLINE_S = 60.0  # hang guard of one child; the test's own deadline is longer


def in_child(fn, *args) -> None:
    """Runs fn(*args) in a forked child; raises AssertionError if it failed or did not end within
    CHILD_DEADLINE_S (the child is then killed)."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            fn(*args)
        except BaseException:  # noqa: BLE001 - reported to the parent through the exit status
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.exit(code)  # normal finalization: inherited objects are destroyed here
    pidfd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([pidfd], [], [], CHILD_DEADLINE_S)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError(f"{fn.__name__}: the child did not end within "
                                 f"{CHILD_DEADLINE_S} s (hung)")
    finally:
        os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise AssertionError(f"{fn.__name__}: the child failed (exit "
                             f"{os.waitstatus_to_exitcode(status)}); its traceback is above")


def blocks(n: int, size: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=size, dtype=np.uint8) for _ in range(n)]


def check_get(store, keys, values) -> None:
    out = [np.zeros_like(v) for v in values]
    got = store.batch_get(keys, out)
    assert got == [v.nbytes for v in values], (got, store.stats())
    for i, (v, o) in enumerate(zip(values, out)):
        assert np.array_equal(v, o), f"block {i} differs"


# -- KVStore --------------------------------------------------------------------------------------

def kvstore(pool: str, store_dir: str) -> None:
    """Issue 25 item 11: a KVStore whose puts overflowed its 64 MiB pool into the persistent tier,
    then fork: the child's first batch_get hung inside the native call (the tier's verify threads
    and io_uring rings, the pool's background thread, belong to the parent)."""
    size = 1 << 20
    keys = [f"blk-{i}" for i in range(96)]
    values = blocks(len(keys), size, seed=1)
    s = dualpath.KVStore(pool, store_dir, pool_size=64 << 20)
    assert s.batch_put(keys, values) == [0] * len(keys)
    assert s.stats()["pool"]["evictions"] > 0  # the pool overflowed: some gets read the tier
    staging = np.zeros(4 * size, dtype=np.uint8)
    s.register_buffer(staging)
    # The async pool's threads exist in the parent only.
    assert s.batch_get_async(keys[:2], [np.zeros(size, np.uint8)] * 2).wait(30) == [size] * 2
    never = dualpath.Handle(concurrent.futures.Future(), ())  # a batch still in flight at fork

    def inherited() -> None:
        check_get(s, keys, values)  # hung here before the fix
        assert s.batch_exists(keys) == len(keys)
        ptrs = [staging.ctypes.data + i * size for i in range(4)]  # registered in the parent
        assert s.batch_get_into(keys[:4], ptrs, [size] * 4) == [size] * 4
        assert np.array_equal(staging[:size], values[0])
        h = s.batch_get_async(keys[4:6], [np.zeros(size, np.uint8)] * 2)
        assert h.wait(30) == [size] * 2
        assert s.batch_put(["from-child"], [values[7]]) == [0]
        try:
            never.wait(30)
        except dualpath.Error as e:
            assert "fork" in str(e), e
        else:
            raise AssertionError("a batch in flight at fork() must not be waited for")
        assert s.stats()["gets"] > 0
        s.close()
        assert s.closed

    def untouched() -> None:
        pass  # exits at once: finalization destroys the parent's store in the child

    def opened_after_fork() -> None:
        with dualpath.KVStore(pool, store_dir, pool_size=64 << 20) as mine:
            check_get(mine, keys[:8], values[:8])
            check_get(mine, ["from-child"], [values[7]])

    def closed_before_fork(closed) -> None:
        try:
            closed.batch_exists(keys)
        except ValueError as e:
            assert "closed" in str(e), e
        else:
            raise AssertionError("a store closed before fork() stays closed")

    in_child(inherited)
    check_get(s, keys, values)  # the parent's threads and pool attachment are intact
    check_get(s, ["from-child"], [values[7]])
    in_child(untouched)
    in_child(opened_after_fork)
    assert s.stats()["pool"]["live_procs"] >= 1
    other = dualpath.KVStore(pool, store_dir, pool_size=64 << 20)
    other.close()
    in_child(closed_before_fork, other)
    s.close()


def raw(pool: str, store_dir: str) -> None:
    """The native object (dualpath._core.KVStore) cannot re-create itself: in a child it raises
    naming fork, instead of hanging in the parent's threads and rings."""
    size = 1 << 20
    keys = [f"raw-{i}" for i in range(80)]
    values = blocks(len(keys), size, seed=2)
    s = dualpath._core.KVStore(pool, store_dir, pool_size=64 << 20)
    assert s.batch_put(keys, values) == [0] * len(keys)

    def child() -> None:
        try:
            s.batch_get(keys, [np.zeros(size, np.uint8) for _ in keys])
        except dualpath.Error as e:
            assert "fork" in str(e) and "open" in str(e), e
        else:
            raise AssertionError("the native store must refuse to run in a forked child")
        s.close()  # abandons the parent's state without touching it

    in_child(child)
    check_get(s, keys, values)
    s.close()


def hasher() -> None:
    """BlockHasher has no threads or handles: the same hashes in a child."""
    h = dualpath.kv.BlockHasher(seed="0", block_size=16)
    tokens = list(range(1000))
    want = h.hash_blocks(tokens)

    def child() -> None:
        assert h.hash_blocks(tokens) == want
        assert dualpath.kv.BlockHasher(seed="0", block_size=16).hash_blocks(tokens) == want

    in_child(child)


# -- ClusterStore ---------------------------------------------------------------------------------

def expect_forked_error(fn, *args, **kwargs) -> str:
    try:
        fn(*args, **kwargs)
    except dualpath.Error as e:
        assert e.code == dualpath._core.FORKED_CODE and "fork" in str(e), e
        return str(e)
    raise AssertionError(f"{fn.__name__} must raise dualpath.Error naming fork in a forked child")


def cluster(name: str, etcd: str, fingerprint: str, shm_dir: str, tls_cert: str, tls_key: str,
            tls_ca: str, token_file: str) -> None:
    """ClusterStore after fork. A client's gRPC polling state and sockets are shared with the
    child, and a child making any gRPC call consumes the parent's events (the parent's next call
    failed), so a child of a process that had a client raises on the inherited client and on a new
    one, saying to open the store after forking; it does not hang, exiting does not hang, and the
    parent's client still works. A child forked before any client was opened opens its own.
    The store runs with TLS and a transfer token (test_cluster_store.py): the client's files."""
    opts = dict(tls_cert=tls_cert, tls_key=tls_key, tls_ca=tls_ca, transfer_token_file=token_file,
                host="node1", retry_deadline=30.0, model_fingerprint=int(fingerprint),
                shm_dir=shm_dir)
    keys = [f"c-{i}" for i in range(6)]
    values = blocks(len(keys), 65536, seed=3)

    def fresh_worker() -> None:  # the common case: the worker opens its own store
        with dualpath.ClusterStore(name, etcd, **opts) as mine:
            assert mine.batch_put(keys, values) == [0] * len(keys)
            check_get(mine, keys, values)

    in_child(fresh_worker)  # before this process has any client
    c = dualpath.ClusterStore(name, etcd, **opts)
    check_get(c, keys, values)  # the worker's puts
    h = c.batch_get_async(keys, [np.zeros_like(v) for v in values])
    assert h.wait(30) == [v.nbytes for v in values]

    def inherited() -> None:
        msg = expect_forked_error(c.batch_get, keys, [np.zeros_like(v) for v in values])
        assert "open the ClusterStore only after forking" in msg, msg
        expect_forked_error(c.batch_exists, keys)
        expect_forked_error(c.batch_put_async, ["c-child"], [values[0]])
        c.close()
        assert c.closed

    def opened_after_fork() -> None:
        msg = expect_forked_error(dualpath.ClusterStore, name, etcd, **opts)
        assert "open the ClusterStore only after forking" in msg, msg

    def untouched() -> None:
        pass

    in_child(inherited)
    in_child(opened_after_fork)
    in_child(untouched)
    check_get(c, keys, values)  # the parent's client is intact
    assert c.remove(keys) == len(keys)
    c.close()


CASES = {"kvstore": kvstore, "raw": raw, "hasher": hasher, "cluster": cluster}

if __name__ == "__main__":
    CASES[sys.argv[1]](*sys.argv[2:])
    print(f"forkcheck {sys.argv[1]}: ok", flush=True)
