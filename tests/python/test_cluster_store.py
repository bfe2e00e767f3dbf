"""dualpath.ClusterStore (the distributed KV store's client, docs/store.md "Python") against real
processes: etcd, one `dualpath store master` and two `dualpath store node` processes, started with
mutual TLS and a transfer token by tests/python/store_cluster.py (conftest's ``store_cluster``
fixture; the clients pass the files: tls_cert/tls_key/tls_ca, transfer_token_file). The cluster
tests skip, saying why, when etcd or the dualpath binary is missing; the bad-endpoint and option
tests need neither.

Waits poll a condition with a generous deadline (a hang guard only); nothing asserts speed.
"""

from __future__ import annotations

import hashlib
import threading
import time

import numpy as np
import pytest

import dualpath
from store_cluster import DEADLINE_S, free_port


@pytest.fixture(scope="module")
def cluster(store_cluster):
    return store_cluster


@pytest.fixture
def client(cluster, request):
    # A fingerprint per test: the tests' objects never meet.
    fp = int.from_bytes(hashlib.sha256(request.node.name.encode()).digest()[:8], "little")
    with cluster.client(model_fingerprint=fp) as c:
        yield c


def arrays(n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=65536 + 4096 * i, dtype=np.uint8) for i in range(n)]


def test_fork(cluster, forkcheck, request):
    """Issue 25 item 11 for ClusterStore (forkcheck.py "cluster"): a worker forked before any
    client was opened opens its own; in a child of a process with a client, the inherited client
    and a new one raise naming fork (gRPC state cannot be re-created there without breaking the
    parent's connections), a child that exits at once does not hang, and the parent's client
    still works."""
    fp = int.from_bytes(hashlib.sha256(request.node.name.encode()).digest()[:8], "little")
    pki = cluster.pki
    forkcheck("cluster", cluster.name, cluster.etcd, str(fp), str(cluster.tmp), pki["cert"],
              pki["key"], pki["ca"], pki["token"])


def test_put_and_get_numpy_arrays(client):
    keys = [f"block-{i}" for i in range(6)]
    values = arrays(6, seed=1)
    assert client.batch_put(keys, values) == [0] * 6
    out = [np.zeros_like(v) for v in values]
    assert client.batch_get(keys, out) == [v.nbytes for v in values]
    for v, o in zip(values, out):
        assert np.array_equal(v, o)
    # 32-byte keys are used as they are, other keys are hashed: both are found again.
    raw = [bytes([i]) * 32 for i in range(2)]
    f32 = np.arange(1024, dtype=np.float32)
    assert client.batch_put(raw, [f32, f32 * 2]) == [0, 0]
    got = [np.empty_like(f32), np.empty_like(f32)]
    assert client.batch_get(raw, got) == [f32.nbytes] * 2
    assert np.array_equal(got[0], f32) and np.array_equal(got[1], f32 * 2)
    s = client.stats()
    # Placement spreads a batch over both nodes (most free space first); the client's host is
    # node1's, so node1's objects came through its shm file and node2's over the transfer engine.
    assert s["hits_local"] > 0 and s["hits_remote"] > 0
    assert s["hits_local"] + s["hits_remote"] == 8
    assert s["puts_ok"] == 8 and s["misses"] == 0
    assert s["leader"] != ""
    # Where the puts' wall time went (issue 27): each phase of a put ran.
    assert s["put_start_ns"] > 0 and s["put_write_ns"] > 0 and s["put_commit_ns"] > 0


def test_a_sleeping_client_reads_what_a_polling_one_wrote(cluster, client):
    # transfer_poll=False (an engine sharing few cores) and exists_poll=0 change how the client
    # waits, not what it reads: over the transfer engine (a host no node has) and the master.
    keys = [f"poll-{i}" for i in range(4)]
    values = arrays(4, seed=7)
    assert client.batch_put(keys, values) == [0] * 4
    with cluster.client(host="elsewhere", transfer_poll=False, exists_poll=0,
                        model_fingerprint=client.model_fingerprint) as sleeper:
        out = [np.zeros_like(v) for v in values]
        assert sleeper.batch_get(keys, out) == [v.nbytes for v in values]
        for v, o in zip(values, out):
            assert np.array_equal(v, o)
        assert sleeper.stats()["hits_remote"] == 4
        assert sleeper.batch_is_exist(keys + ["poll-absent"]) == [True] * 4 + [False]


def test_raw_pointers_in_a_registered_buffer(client):
    n, size = 4, 32768
    src = np.random.default_rng(2).integers(0, 256, size=n * size, dtype=np.uint8)
    dst = np.zeros_like(src)
    keys = [f"raw-{i}" for i in range(n)]
    with pytest.raises(ValueError, match="not inside a registered buffer"):
        client.batch_put_from(keys, [src.ctypes.data + i * size for i in range(n)], [size] * n)
    client.register_buffer(src)
    client.register_buffer(dst.ctypes.data, dst.nbytes)
    base, dbase = src.ctypes.data, dst.ctypes.data
    assert client.batch_put_from(keys, [base + i * size for i in range(n)], [size] * n) == [0] * n
    dptrs = [dbase + i * size for i in range(n)]
    assert client.batch_get_into(keys, dptrs, [size] * n) == [size] * n
    assert np.array_equal(src, dst)
    # A range running past the end of the registered buffer.
    with pytest.raises(ValueError, match=r"block #0 .*not inside a registered buffer"):
        client.batch_get_into(keys[:1], [dbase + dst.nbytes - 100], [size])
    client.unregister_buffer(dst)
    with pytest.raises(ValueError, match="not inside a registered buffer"):
        client.batch_get_into(keys[:1], [dbase], [size])
    with pytest.raises(KeyError):
        client.unregister_buffer(dst)
    client.unregister_buffer(src)


def test_exists_prefix_and_a_miss(client):
    keys = [f"prefix-{i}" for i in range(4)]
    assert client.batch_put(keys, arrays(4, seed=3)) == [0] * 4
    unknown = "never-put"
    assert client.batch_exists(keys) == 4
    assert client.batch_exists([keys[0], keys[1], unknown, keys[3]]) == 2
    assert client.batch_exists([unknown] + keys) == 0
    assert client.batch_is_exist([keys[0], unknown, keys[3]]) == [True, False, True]
    assert client.exists(keys[2]) and not client.exists(unknown)
    buf = np.zeros(65536, dtype=np.uint8)
    rcs = client.batch_get([unknown, keys[0]], [np.zeros(65536, dtype=np.uint8), buf])
    assert rcs == [-200, 65536]  # a miss is -200 (kStorageMiss), as for KVStore
    assert dualpath.error_name(rcs[0]) == "kStorageMiss"
    assert client.batch_exists([]) == 0 and client.batch_is_exist([]) == []


def test_model_fingerprint_separates_objects(cluster, client):
    value = np.full(4096, 7, dtype=np.uint8)
    assert client.batch_put(["shared-name"], [value]) == [0]
    with cluster.client(model_fingerprint=client.model_fingerprint ^ 1) as other:
        assert other.batch_is_exist(["shared-name"]) == [False]
        assert other.batch_get(["shared-name"], [np.zeros(4096, dtype=np.uint8)]) == [-200]


def test_remove(client):
    keys = [f"rm-{i}" for i in range(3)]
    assert client.batch_put(keys, arrays(3, seed=4)) == [0] * 3
    assert client.remove(keys[:2]) == 2
    assert client.batch_is_exist(keys) == [False, False, True]
    assert client.batch_get(keys[:1], [np.zeros(65536, dtype=np.uint8)]) == [-200]
    assert client.remove(keys[:2]) == 0  # already gone: not an error
    assert client.remove(keys[2]) == 1  # one key
    assert client.batch_exists(keys) == 0


def test_async_verbs(client):
    keys = [f"async-{i}" for i in range(3)]
    values = arrays(3, seed=5)
    assert client.batch_put_async(keys, values).wait(DEADLINE_S) == [0] * 3
    out = [np.zeros_like(v) for v in values]
    h = client.batch_get_async(keys, out)
    assert h.wait(DEADLINE_S) == [v.nbytes for v in values] and h.done()
    assert all(np.array_equal(v, o) for v, o in zip(values, out))


def run_threads(target, n: int) -> list[BaseException]:
    errors: list[BaseException] = []

    def wrap(t):
        try:
            target(t)
        except BaseException as e:  # reported by the test, not lost in the thread
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(t,)) for t in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(DEADLINE_S)  # hang guard
    assert not any(th.is_alive() for th in threads), "a thread is still running"
    return errors


def test_threads_share_one_client(client):
    def worker(t):
        for r in range(3):
            keys = [f"thread-{t}-{r}-{i}" for i in range(4)]
            values = arrays(4, seed=100 * t + r)
            assert client.batch_put(keys, values) == [0] * 4
            out = [np.zeros_like(v) for v in values]
            assert client.batch_get(keys, out) == [v.nbytes for v in values]
            assert all(np.array_equal(v, o) for v, o in zip(values, out)), "wrong bytes"
            assert client.batch_exists(keys) == 4

    assert run_threads(worker, 4) == []


def test_close_while_other_threads_call(cluster):
    c = cluster.client()
    keys = [f"closing-{i}" for i in range(2)]
    values = arrays(2, seed=6)
    assert c.batch_put(keys, values) == [0, 0]
    started = threading.Barrier(3)

    def reader(t):
        started.wait(DEADLINE_S)
        while True:
            out = [np.zeros_like(v) for v in values]
            try:
                rcs = c.batch_get(keys, out)
            except ValueError as e:  # the only way out: the client was closed
                assert "ClusterStore is closed" in str(e)
                return
            assert rcs == [v.nbytes for v in values]
            assert all(np.array_equal(v, o) for v, o in zip(values, out)), "wrong bytes"

    def closer(t):
        started.wait(DEADLINE_S)
        c.close()  # waits for the calls in flight, then later calls raise

    assert run_threads(lambda t: closer(t) if t == 2 else reader(t), 3) == []
    assert c.closed


def test_bad_input_raises_naming_it(cluster, client):
    v = np.zeros(4096, dtype=np.uint8)
    with pytest.raises(ValueError, match="1 keys but 2 buffers"):
        client.batch_put(["a"], [v, v])
    with pytest.raises(ValueError, match=r"differ in length \(1, 2, 1\)"):
        client.batch_put_from(["a"], [1, 2], [3])
    with pytest.raises(TypeError, match=r"batch_put keys\[1\]: a key must be bytes or str"):
        client.batch_put(["a", 5], [v, v])
    with pytest.raises(TypeError, match="expected a sequence of keys"):
        client.batch_exists("one-string")
    with pytest.raises(ValueError, match=r"block #0 size 0 is outside"):
        client.batch_put(["a"], [b""])
    with pytest.raises(ValueError, match="read-only"):
        client.batch_get(["a"], [b"\0" * 16])
    with pytest.raises(ValueError, match="not C-contiguous"):
        client.batch_put(["a"], [np.zeros((64, 64), dtype=np.uint8)[:, ::2]])
    # A buffer smaller than its object shows once the object is found: ValueError naming both.
    assert client.batch_put(["big"], [np.ones(8192, dtype=np.uint8)]) == [0]
    with pytest.raises(ValueError, match=r"batch_get: block #0"):
        client.batch_get(["big"], [np.zeros(100, dtype=np.uint8)])
    # Options.
    with pytest.raises(ValueError, match="replicas = 4"):
        cluster.client(replicas=4)
    with pytest.raises(ValueError, match="model_fingerprint"):
        cluster.client(model_fingerprint=-1)
    with pytest.raises(ValueError, match="retry_deadline"):
        cluster.client(retry_deadline=-1)
    with pytest.raises(ValueError, match="etcd TLS"):
        cluster.client(etcd_tls_ca="/nonexistent/ca.pem")
    with pytest.raises(ValueError, match="exists_poll = 2"):
        cluster.client(exists_poll=2)
    with pytest.raises(ValueError, match="cluster"):
        dualpath.ClusterStore("bad cluster/name", cluster.etcd, etcd_insecure=True,
                              master_insecure=True)


def test_store_refuses_a_client_without_its_certificate(cluster):
    # Plaintext towards etcd and the masters: the TLS handshake fails, nothing is read; the same
    # with TLS but no client certificate. Only the options differ from the fixture's client.
    for opts in (dict(tls_cert=None, tls_key=None, tls_ca=None, etcd_insecure=True,
                      master_insecure=True),
                 dict(tls_cert=None, tls_key=None)):
        with cluster.client(retry_deadline=1.0, rpc_timeout=0.5, etcd_timeout=0.5,
                            **opts) as c:
            with pytest.raises(dualpath.Error, match="etcd"):
                c.batch_is_exist(["a"])
    # The store's certificate towards etcd, none towards the masters: refused by the master.
    with cluster.client(retry_deadline=1.0, rpc_timeout=0.5, master_tls_ca=cluster.pki["ca"]) as c:
        with pytest.raises(dualpath.Error):
            c.batch_is_exist(["a"])


def test_closed_store_raises(cluster):
    c = cluster.client()
    c.close()
    assert c.closed
    with pytest.raises(ValueError, match="ClusterStore is closed"):
        c.batch_exists(["a"])
    with pytest.raises(ValueError, match="closed"):
        c.batch_put_async(["a"], [b"x"])
    c.close()  # twice is fine


def test_wrong_etcd_endpoint_fails_within_the_retry_deadline():
    # No etcd and no dualpath binary needed: nothing listens on this port.
    endpoint = f"127.0.0.1:{free_port()}"
    with dualpath.ClusterStore("nowhere", endpoint, etcd_insecure=True, master_insecure=True,
                               retry_deadline=1.0, rpc_timeout=0.5, etcd_timeout=0.5) as c:
        t0 = time.monotonic()
        with pytest.raises(dualpath.Error) as e:
            c.batch_is_exist(["a"])
        assert "batch_is_exist" in str(e.value) and "etcd" in str(e.value), str(e.value)
        assert e.value.code != 0
        with pytest.raises(dualpath.Error, match="batch_get"):
            c.batch_get(["a"], [bytearray(16)])
        # A put answers per key: a code, never a hit.
        (rc,) = c.batch_put(["a"], [b"x"])
        assert rc < 0, rc
        # Hang guard, not a speed check: the calls end on their own (a 1 s retry deadline).
        assert time.monotonic() - t0 < DEADLINE_S
        assert c.stats()["retries"] > 0


def test_model_presets_carry_their_fingerprint():
    # The model half of every object key, as the docs' examples take it.
    a = dualpath.kv.model("qwen3-32b")["fingerprint"]
    b = dualpath.kv.model("r1-llama-8b")["fingerprint"]
    assert isinstance(a, int) and 0 <= a < 1 << 64 and a != b
    assert dualpath.kv.model("qwen3-32b")["fingerprint"] == a
