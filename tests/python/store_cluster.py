"""A real distributed KV store for tests, started as `cluster run --store` runs it
(docs/store.md "Security"): an etcd (/usr/bin/etcd, or $DUALPATH_ETCD_BIN) on free localhost ports
in a temporary directory with mutual TLS, one `dualpath store master` and two `dualpath store node`
processes of the project's binary (tests/python/dualpath_bin.py), with certificates of a CA made
here with `openssl` and a transfer token, none with --insecure.

Shared by the tests that need one (conftest.py's module-scoped ``store_cluster`` fixture):
tests/python/test_cluster_store.py (the ClusterStore client) and test_vllm_cluster.py (vLLM's
connector over it). ``Cluster.client(**kw)`` opens a client with the fixture's files;
``Cluster.connector_config()`` gives the same as a connector's kv_connector_extra_config.

Waits poll a condition with a generous deadline (a hang guard only); nothing asserts speed.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path

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

    def connector_config(self, **kw) -> dict:
        """A KV connector's kv_connector_extra_config for this store ("backend": "cluster",
        docs/integrations/vllm.md): the fixture's TLS files and transfer token. ``host`` defaults
        to a name no store node has, so the engine reads and writes over the transfer engine, as
        an instance on another node would, not through a node's shm tier file."""
        cfg = {"backend": "cluster", "etcd": self.etcd, "cluster": self.name,
               "tls_cert": self.pki["cert"], "tls_key": self.pki["key"],
               "tls_ca": self.pki["ca"], "transfer_token_file": self.pki["token"],
               "host": "vllm-engine", "shm_dir": str(self.tmp), "retry_deadline": 30.0}
        cfg.update(kw)
        return cfg

    def stop(self) -> None:
        for c in reversed(self.children):
            c.stop()


def start_cluster(tmp_path_factory):
    """Generator behind conftest's ``store_cluster`` fixture: yields a started Cluster, stops it.
    Skips, saying why, when etcd or the dualpath binary is missing."""
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
