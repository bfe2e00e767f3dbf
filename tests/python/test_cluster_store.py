"""dualpath.ClusterStore (the distributed KV store's client, docs/store.md "Python") against real
processes: an etcd (/usr/bin/etcd, or $DUALPATH_ETCD_BIN) on free localhost ports in a temporary
directory, one `dualpath store master` and two `dualpath store node` processes of the project's
binary ($DUALPATH_BIN, else $DUALPATH_BINARY_DIR/dualpath, else the newest of
build/{dev,release,debug}/bin/dualpath). The cluster tests skip, saying why, when etcd or the
binary is missing; the bad-endpoint and option tests need neither.

The store runs as `cluster run --store` runs it (docs/store.md "Security"): etcd with mutual TLS,
master and nodes with certificates of a CA the fixture makes with `openssl` and a transfer token,
none with --insecure; the clients pass the files (tls_cert/tls_key/tls_ca,
transfer_token_file).

Waits poll a condition with a generous deadline (a hang guard only); nothing asserts speed.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import dualpath
from dualpath_bin import dualpath_binary

DEADLINE_S = 60.0  # hang guard of every wait below


def wait_until(done, what: str, deadline_s: float = DEADLINE_S) -> None:
    end = time.monotonic() + deadline_s
    while not done():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {deadline_s} s waiting for {what}")
        time.sleep(0.02)  # polling interval of a condition, not a synchronisation


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def etcd_binary() -> str | None:
    path = os.environ.get("DUALPATH_ETCD_BIN") or "/usr/bin/etcd"
    return path if os.access(path, os.X_OK) else None


def _die_with_parent() -> None:
    # The children get SIGKILL if pytest dies (prctl(PR_SET_PDEATHSIG)), so none outlives the run.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1


def make_pki(d: Path) -> dict[str, str]:
    """A CA (its key deleted once used) and one certificate for every process here (SANs
    127.0.0.1 and localhost, server and client use), made with the openssl command line; and a
    transfer token. Returns the paths the flags and options take."""
    d.mkdir(mode=0o700)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    openssl("req", "-x509", *ec, "-days", "1", "-subj", "/CN=pytest store CA",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout", str(d / "ca.key"), "-out", str(d / "ca.crt"))
    openssl("req", *ec, "-subj", "/CN=store", "-keyout", str(d / "store.key"),
            "-out", str(d / "store.csr"))
    (d / "ext.cnf").write_text("basicConstraints=critical,CA:FALSE\n"
                               "keyUsage=critical,digitalSignature,keyEncipherment\n"
                               "extendedKeyUsage=serverAuth,clientAuth\n"
                               "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", str(d / "store.csr"), "-CA", str(d / "ca.crt"),
            "-CAkey", str(d / "ca.key"), "-CAcreateserial", "-days", "1",
            "-extfile", str(d / "ext.cnf"), "-out", str(d / "store.crt"))
    (d / "ca.key").unlink()
    (d / "store.key").chmod(0o600)
    token = d / "transfer.token"
    token.write_text(secrets.token_hex(32) + "\n")
    token.chmod(0o600)
    return {"cert": str(d / "store.crt"), "key": str(d / "store.key"), "ca": str(d / "ca.crt"),
            "token": str(token)}


class Child:
    """A child process with its output in a log file."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.log = log
        self._f = open(log, "wb")
        self.proc = subprocess.Popen(
            argv, stdout=self._f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, needle: str) -> None:
        wait_until(lambda: needle in self.text() or self.proc.poll() is not None, f"'{needle}'")
        assert self.proc.poll() is None, f"{self.log.name} exited:\n{self.text()}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=DEADLINE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._f.close()


class Cluster:
    def __init__(self, tmp: Path, binary: str, etcd_bin: str) -> None:
        self.tmp = tmp
        self.name = f"py{os.getpid()}"
        self.children: list[Child] = []
        try:
            self._boot(binary, etcd_bin)
        except BaseException:
            self.stop()  # a failed start leaves no process behind
            raise

    def _boot(self, binary: str, etcd_bin: str) -> None:
        tmp = self.tmp
        self.pki = make_pki(tmp / "pki")
        pki = self.pki
        client_port, peer_port = free_port(), free_port()
        self.etcd = f"127.0.0.1:{client_port}"
        client_url, peer_url = f"https://{self.etcd}", f"https://127.0.0.1:{peer_port}"
        # As coord::EtcdServerArgv starts etcd with TLS (docs/coord.md "etcd with TLS").
        tls = [f"--cert-file={pki['cert']}", f"--key-file={pki['key']}", "--client-cert-auth",
               f"--trusted-ca-file={pki['ca']}", f"--peer-cert-file={pki['cert']}",
               f"--peer-key-file={pki['key']}", "--peer-client-cert-auth",
               f"--peer-trusted-ca-file={pki['ca']}"]
        etcd = self._start(
            [etcd_bin, "--name=dp-pytest", f"--data-dir={tmp}/etcd",
             f"--listen-client-urls={client_url}", f"--advertise-client-urls={client_url}",
             f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
             f"--initial-cluster=dp-pytest={peer_url}", "--heartbeat-interval=50",
             "--election-timeout=500", "--log-level=warn", *tls], "etcd")
        wait_until(lambda: etcd.proc.poll() is not None or self._etcd_healthy(client_url),
                   f"etcd on {self.etcd}")
        assert etcd.proc.poll() is None, f"etcd exited:\n{etcd.text()}"
        # No --insecure anywhere: etcd is reached with the --tls-* files too.
        flags = ["--cluster", self.name, "--etcd", self.etcd, "--tls-cert", pki["cert"],
                 "--tls-key", pki["key"], "--tls-ca", pki["ca"]]
        master = self._start([binary, "store", "master", *flags, "--listen", "127.0.0.1:0"],
                             "master")
        master.wait_for("listening on")
        for node_id in (1, 2):
            node = self._start(
                [binary, "store", "node", *flags, "--id", str(node_id), "--host", f"node{node_id}",
                 "--dram-mib", "16", "--shm-dir", str(tmp), "--rpc-listen", "127.0.0.1:0",
                 "--transfer-token-file", pki["token"], "--ttl", "5"],
                f"node{node_id}")
            node.wait_for(f"store node {node_id}:")
        # Ready when the leader has both nodes: a put of 2 replicas needs two live, joined nodes.
        with self.client(replicas=2, model_fingerprint=0xFFFF) as probe:
            try:
                wait_until(lambda: probe.batch_put([b"probe"], [b"x" * 64]) == [0],
                           "a leader master with both store nodes joined")
            except AssertionError as e:
                raise AssertionError(f"{e}\n{self.logs()}") from None
            assert probe.remove(b"probe") == 1

    def logs(self) -> str:
        return "\n".join(f"--- {c.log.name} (last 2000 chars):\n{c.text()[-2000:]}"
                         for c in self.children)

    def _start(self, argv: list[str], name: str) -> Child:
        c = Child(argv, self.tmp / f"{name}.log")
        self.children.append(c)
        return c

    def _etcd_healthy(self, url: str) -> bool:
        ctx = ssl.create_default_context(cafile=self.pki["ca"])
        ctx.load_cert_chain(self.pki["cert"], self.pki["key"])
        try:
            with urllib.request.urlopen(url + "/health", timeout=2, context=ctx) as r:
                return b'"health":"true"' in r.read()
        except OSError:
            return False

    def client(self, **kw) -> dualpath.ClusterStore:
        opts = dict(tls_cert=self.pki["cert"], tls_key=self.pki["key"], tls_ca=self.pki["ca"],
                    transfer_token_file=self.pki["token"], host="node1", retry_deadline=30.0,
                    shm_dir=str(self.tmp))
        opts.update(kw)
        return dualpath.ClusterStore(self.name, self.etcd, **opts)

    def stop(self) -> None:
        for c in reversed(self.children):
            c.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    etcd_bin = etcd_binary()
    if etcd_bin is None:
        pytest.skip("etcd is not installed (/usr/bin/etcd from scripts/setup.sh, or "
                    "$DUALPATH_ETCD_BIN): skipping the cluster tests")
    binary = dualpath_binary()
    if binary is None:
        env = os.environ.get("DUALPATH_BIN")
        why = (f"$DUALPATH_BIN={env} is not an executable" if env else
               "no dualpath binary: set $DUALPATH_BIN or build it "
               "(cmake --build --preset dev --target dualpath)")
        pytest.skip(f"{why}: skipping the cluster tests")
    tmp = tmp_path_factory.mktemp("cluster")
    c = Cluster(tmp, binary, etcd_bin)
    try:
        yield c
    finally:
        c.stop()
    shutil.rmtree(tmp, ignore_errors=True)


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
