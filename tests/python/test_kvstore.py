"""dualpath.KVStore: round trips through both tiers, sharing between processes, corruption, and
bad input (issue 15, acceptance 6)."""

import mmap
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dualpath

BLOCK = 64 << 10
MISS = -200


def key(i):
    return i.to_bytes(4, "little") * 8  # 32 bytes: used as the block hash itself


def blocks(n, seed=0, size=BLOCK):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size, dtype=np.uint8) for _ in range(n)]


@pytest.fixture
def store(pool_path, store_path):
    with dualpath.KVStore(pool_path, store_path, pool_size=64 << 20, sync="none") as s:
        yield s


def test_round_trip_both_tiers(pool_path, store_path):
    vals = blocks(8)
    with dualpath.KVStore(pool_path, store_path, pool_size=64 << 20) as s:
        assert s.batch_put([key(i) for i in range(8)], vals) == [0] * 8
        out = [np.zeros(BLOCK, np.uint8) for _ in range(8)]
        assert s.batch_get([key(i) for i in range(8)], out) == [BLOCK] * 8
        assert all((a == b).all() for a, b in zip(vals, out))
        assert s.stats()["pool_hits"] == 8
    os.unlink(pool_path)  # the pool is gone: the persistent tier still has every block
    with dualpath.KVStore(pool_path, store_path, pool_size=64 << 20) as s:
        out = [np.zeros(BLOCK, np.uint8) for _ in range(8)]
        assert s.batch_get([key(i) for i in range(8)], out) == [BLOCK] * 8
        assert all((a == b).all() for a, b in zip(vals, out))
        st = s.stats()
        assert st["store_hits"] == 8 and st["pool"]["ready_entries"] == 8  # promoted


def test_raw_pointers_need_registration(store):
    src = np.concatenate(blocks(4, seed=1))
    dst = np.zeros_like(src)
    keys = [key(i) for i in range(4)]
    ptrs = [src.ctypes.data + i * BLOCK for i in range(4)]
    with pytest.raises(ValueError, match="block #0.*not inside a registered buffer"):
        store.batch_put_from(keys, ptrs, [BLOCK] * 4)
    store.register_buffer(src)
    store.register_buffer(dst.ctypes.data, dst.nbytes)
    assert store.batch_put_from(keys, ptrs, [BLOCK] * 4) == [0] * 4
    dptrs = [dst.ctypes.data + i * BLOCK for i in range(4)]
    assert store.batch_get_into(keys + [key(99)], dptrs + [dptrs[0]], [BLOCK] * 5) == [BLOCK] * 4 + [MISS]
    assert (src == dst).all()
    assert dualpath.error_name(MISS) == "kStorageMiss"
    store.unregister_buffer(dst)
    with pytest.raises(ValueError, match="not inside a registered buffer"):
        store.batch_get_into(keys, dptrs, [BLOCK] * 4)


def test_exists_counts_leading_hits_and_remove(store):
    assert store.batch_put([key(i) for i in (0, 1, 3)], blocks(3)) == [0, 0, 0]
    assert store.batch_exists([key(0), key(1), key(2), key(3)]) == 2
    assert store.batch_exists([key(2), key(0)]) == 0
    assert store.batch_is_exist([key(0), key(2), key(3)]) == [True, False, True]
    store.remove(key(1))
    assert store.batch_exists([key(0), key(1)]) == 1
    with pytest.raises(KeyError, match="no block"):
        store.remove(key(1))


def test_string_keys(store):
    v = blocks(1)[0]
    store.put("sglang-page-abc", v)
    out = np.zeros_like(v)
    assert store.get_into("sglang-page-abc", out) == BLOCK and (out == v).all()
    assert store.exists("sglang-page-abc") and not store.exists("sglang-page-abd")


def test_batch_str_keys_are_the_sha256_of_their_utf8(store):
    # Batches hash str keys in place (issue 27: no per-key label or allocation); the key is still
    # the SHA-256 of the UTF-8, as for a single key, ASCII or not.
    import hashlib
    names = ["page-0", "página-1", "ページ-2", ""]
    vals = blocks(len(names), seed=3)
    assert store.batch_put(names, vals) == [0] * len(names)
    digests = [hashlib.sha256(n.encode()).digest() for n in names]
    assert store.batch_is_exist(digests) == [True] * len(names)
    out = [np.zeros(BLOCK, np.uint8) for _ in names]
    assert store.batch_get(digests, out) == [BLOCK] * len(names)
    assert all((a == b).all() for a, b in zip(vals, out))
    assert store.batch_exists(names + ["page-9"]) == len(names)
    # A str that has no UTF-8 (a lone surrogate) is an error naming its place in the batch.
    with pytest.raises(ValueError, match=r"keys\[1\]: a str key must have a UTF-8 form"):
        store.batch_is_exist(["page-0", "bad-\ud800"])


def test_async_handles(store):
    vals = blocks(6, seed=2)
    h = store.batch_put_async([key(i) for i in range(6)], vals)
    assert h.wait(timeout=60) == [0] * 6 and h.done()
    out = [np.zeros(BLOCK, np.uint8) for _ in range(6)]
    g = store.batch_get_async([key(i) for i in range(6)], out)
    assert g.wait(timeout=60) == [BLOCK] * 6
    assert all((a == b).all() for a, b in zip(vals, out))


def test_torch_tensors(store):
    torch = pytest.importorskip("torch")
    t = torch.arange(BLOCK // 4, dtype=torch.int32)
    store.put(key(7), t)
    out = torch.zeros_like(t)
    assert store.get_into(key(7), out) == BLOCK and torch.equal(out, t)
    with pytest.raises(ValueError, match="not contiguous"):
        store.get_into(key(7), torch.zeros(2 * BLOCK // 4, dtype=torch.int32)[::2])


def _flip_pattern(path, pattern, offset):
    """Flips one byte at `offset` inside the first copy of `pattern` in the file at `path`."""
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
        at = m.find(pattern)
        assert at >= 0, "block bytes not found in " + path
        m[at + offset] ^= 0xFF


def test_corrupt_pool_block_is_a_miss_then_served_from_store(pool_path, store_path):
    v = blocks(1, seed=3)[0]
    with dualpath.KVStore(pool_path, store_path, pool_size=64 << 20) as s:
        s.put(key(1), v)
        _flip_pattern(pool_path, v[:4096].tobytes(), 100)
        out = np.zeros_like(v)
        assert s.batch_get([key(1)], [out]) == [BLOCK]  # the store's copy, verified
        assert (out == v).all() and s.stats()["corrupt"] == 1
    w = blocks(1, seed=33)[0]  # bytes that occur nowhere else in the region
    # Pool only: nothing to fall back on.
    with dualpath.KVStore(pool_path, None, pool_size=64 << 20) as s:
        s.put(key(2), w)
        _flip_pattern(pool_path, w[:4096].tobytes(), 7)
        assert s.batch_get([key(2)], [np.zeros_like(w)]) == [MISS]
        assert s.batch_exists([key(2)]) == 0  # dropped from the pool


def test_corrupt_stored_block_is_a_miss(store_path):
    v = blocks(1, seed=4)[0]
    with dualpath.KVStore(None, store_path) as s:
        s.put(key(5), v)
    files = [os.path.join(d, f) for d, _, fs in os.walk(store_path) for f in fs
             if "quarantine" not in d]
    assert len(files) == 1
    _flip_pattern(files[0], v[:4096].tobytes(), 1)
    with dualpath.KVStore(None, store_path) as s:
        assert s.batch_get([key(5)], [np.zeros_like(v)]) == [MISS]
        assert s.stats()["corrupt"] == 1
        with pytest.raises(KeyError):
            s.get_into(key(5), np.zeros_like(v))


CHILD = textwrap.dedent("""
    import sys, numpy as np, dualpath
    pool, i = sys.argv[1], int(sys.argv[2])
    s = dualpath.KVStore(pool, None, pool_size=64 << 20)
    assert s.batch_put([bytes([i]) * 32], [np.full(4096, i, np.uint8)]) == [0]
    print("put", flush=True)
    sys.stdin.readline()  # the parent says: the other process has put its block
    out = np.zeros(4096, np.uint8)
    rc = s.batch_get([bytes([3 - i]) * 32], [out])[0]
    print(rc, int(out[0]), s.stats()["pool"]["live_procs"], flush=True)
    sys.stdin.read()  # stay attached until the parent has checked
""")


def test_two_processes_share_one_pool(pool_path):
    with dualpath.KVStore(pool_path, None, pool_size=64 << 20) as s:
        procs = [subprocess.Popen([sys.executable, "-c", CHILD, pool_path, str(i)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                 for i in (1, 2)]
        try:
            assert [p.stdout.readline().strip() for p in procs] == ["put", "put"]
            for p in procs:
                p.stdin.write("go\n")
                p.stdin.flush()
            lines = [[int(x) for x in p.stdout.readline().split()] for p in procs]
            assert s.batch_exists([bytes([1]) * 32, bytes([2]) * 32]) == 2
        finally:
            for p in procs:
                p.communicate("", timeout=120)
        assert [p.returncode for p in procs] == [0, 0]
    # Each child read the other's 4096-byte block (filled with the other's id), while all three
    # processes were attached to the one pool.
    assert lines == [[4096, 2, 3], [4096, 1, 3]]


# ---- bad input (acceptance 6) ------------------------------------------------------------------

def test_wrong_sizes_raise_and_write_nothing(store):
    a = np.zeros(BLOCK, np.uint8)
    store.register_buffer(a)
    with pytest.raises(ValueError, match="differ in length"):
        store.batch_put_from([key(1), key(2)], [a.ctypes.data], [BLOCK, BLOCK])
    with pytest.raises(ValueError, match="block #1 size 0"):
        store.batch_put_from([key(1), key(2)], [a.ctypes.data] * 2, [BLOCK, 0])
    with pytest.raises(ValueError, match="block #1.*not inside a registered buffer"):
        store.batch_put_from([key(1), key(2)], [a.ctypes.data] * 2, [BLOCK, BLOCK + 1])
    with pytest.raises(ValueError, match="2 keys but 1 buffers"):
        store.batch_put([key(1), key(2)], [a])
    assert store.batch_exists([key(1)]) == 0 and store.stats()["puts"] == 0  # nothing partial
    store.put(key(1), a)
    with pytest.raises(ValueError, match="block #0.*more than the buffer's 100"):
        store.batch_get([key(1)], [np.zeros(100, np.uint8)])


def test_bad_buffers_and_keys(store):
    with pytest.raises(ValueError, match="not C-contiguous"):
        store.batch_put([key(1)], [np.zeros((64, 64), np.uint8)[:, ::2]])
    ro = np.zeros(BLOCK, np.uint8)
    ro.setflags(write=False)
    store.put(key(1), ro)
    with pytest.raises(ValueError, match="read-only"):
        store.batch_get([key(1)], [ro])
    with pytest.raises(TypeError, match="buffer protocol or data_ptr"):
        store.batch_put([key(2)], [object()])
    with pytest.raises(TypeError, match=r"keys\[0\]: a key must be bytes or str, got int"):
        store.batch_exists([3])
    with pytest.raises(KeyError, match="no block"):
        store.get_into(key(42), np.zeros(BLOCK, np.uint8))


def test_closed_store_raises(pool_path):
    s = dualpath.KVStore(pool_path, None, pool_size=64 << 20)
    s.close()
    assert s.closed
    for call in (lambda: s.batch_exists([key(1)]), lambda: s.put(key(1), b"x"),
                 lambda: s.stats(), lambda: s.batch_get_async([key(1)], [bytearray(1)])):
        with pytest.raises(ValueError, match="closed"):
            call()


def test_store_path_without_permission(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o700)
    code = textwrap.dedent(f"""
        import os, sys, dualpath
        if os.geteuid() == 0:
            os.setgid(65534); os.setuid(65534)  # root ignores permissions
        try:
            dualpath.KVStore(None, {str(locked / 'store')!r})
        except PermissionError as e:
            print("PermissionError:", e)
            sys.exit(0)
        sys.exit(1)
    """)
    if os.geteuid() != 0:
        locked.chmod(0o500)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "permission denied" in r.stdout and str(locked) in r.stdout


def test_bad_options():
    with pytest.raises(ValueError, match="pool path, a store path, or both"):
        dualpath.KVStore()
    with pytest.raises(ValueError, match="sync = 'sometimes'"):
        dualpath.KVStore(None, "/tmp/x", sync="sometimes")
