#!/usr/bin/env python3
"""dualpath vs Mooncake Store, side by side on one machine (issue 27): ratios from one run.

Every path is timed for both systems in the same round, in a rotated order, and reported as the
median over rounds of the per-round speed ratio dualpath / Mooncake (> 1: dualpath is faster), so
the load of a shared machine hits both sides of each ratio alike. Every get is byte-checked
(numpy.array_equal against the bytes that were put, stamped per round), outside the timed call.

Systems (each client is a long-lived worker process driven over a pipe; the timing is taken in
the worker around the single store call):
  Mooncake Store   PyPI's mooncake-transfer-engine-non-cuda 0.3.13.post1 (the CUDA wheel needs
                   libcuda), its own mooncake_master with the HTTP metadata server, protocol tcp:
                   mc-A owns a segment (Mooncake's in-process memcpy path), mc-B reads mc-A's
                   objects from a second process, mc-T owns a segment with MC_STORE_MEMCPY=0
                   (its TCP transfer engine, loopback).
  dualpath         KVStore over one shm pool (dpkv-A, and dpkv-B reading from a second process);
                   ClusterStore against one etcd, one `dualpath store master`, one `dualpath store
                   node`: dpcl-A on the node's host (its shm tier file), dpcl-B a second process
                   on that host, dpcl-T on another "host" (UCX tcp over loopback). Checksums on.
                   With --sleeping-client also dpcl-S: dpcl-T's client with transfer_poll=False.

Workloads: batch_put_from / batch_get_into of 256 x 256 KiB and 64 x 1 MiB (64 MiB per batch)
from and into registered numpy buffers, fresh keys every round (removed, untimed, at the end of
the round); a second process's get of the same objects; exists over 1,000-key batches of str
keys and (dualpath) 32-byte keys.

Setup: the bench makes its own venv, .venv-bench (scripts/setup_python.sh with
python/requirements/bench-mooncake.txt: under ~/.cache like the project's other venvs, not made
by scripts/setup.sh, not part of CI), builds the dualpath wheel into it, and starts every service
itself (ports picked by the OS; logs and scratch under $TMPDIR/peer-bench-<pid>).

  bench/python/peer_bench.py [--reps 15] [--warmup 2] [--no-install] [--json out.json]
                             [--writers mc-A,dpcl-A] [--sizes 1M]   (some rows alone)
                             [--sleeping-client]
  bench/python/peer_bench.py --smoke         dualpath only, small batches, 2 rounds: no Mooncake

Environment: DP_BIN (the `dualpath` binary; default build/release/bin/dualpath, else
build/dev/bin/dualpath), ETCD_BIN (/usr/bin/etcd).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
VENV = os.path.join(ROOT, ".venv-bench")
REQS = os.path.join(ROOT, "python", "requirements", "bench-mooncake.txt")
ETCD = os.environ.get("ETCD_BIN", "/usr/bin/etcd")

SEGMENT = 2 << 30      # Mooncake's global segment, KVStore's pool, the store node's DRAM tier
LOCAL_BUFFER = 1 << 30  # Mooncake's local buffer
EX_KEYS, EX_OBJECT, EX_CALLS = 1000, 4096, 20


# ------------------------------------------------------------------------------ worker processes
def stamp(arr, count, size, rnd, salt):
    """Writes (round, salt, block) into each block's first 24 bytes: each round's bytes differ."""
    import numpy as np
    v = arr.reshape(count, size)[:, :24].view(np.int64)
    v[:, 0] = rnd
    v[:, 1] = salt
    v[:, 2] = np.arange(count)


def open_store(cfg):
    """The store client of this worker, with the verbs the bench uses."""
    kind = cfg["kind"]
    if kind == "mc":
        from mooncake.store import MooncakeDistributedStore

        class Mooncake:
            def __init__(self):
                self.s = MooncakeDistributedStore()
                rc = self.s.setup(cfg["host"], cfg["metadata"], cfg["segment"], LOCAL_BUFFER,
                                  "tcp", "", cfg["master"])
                if rc != 0:
                    raise RuntimeError(f"mooncake setup returned {rc}")

            def register(self, a):
                rc = self.s.register_buffer(a.ctypes.data, a.nbytes)
                if rc != 0:
                    raise RuntimeError(f"mooncake register_buffer returned {rc}")

            def put(self, keys, ptrs, sizes):
                return [r == 0 for r in self.s.batch_put_from(keys, ptrs, sizes)]

            def get(self, keys, ptrs, sizes):
                return [r == s for r, s in zip(self.s.batch_get_into(keys, ptrs, sizes), sizes)]

            def is_exist(self, keys):
                return [r == 1 for r in self.s.batch_is_exist(keys)]

            def remove(self, keys):
                self.s.batch_remove(keys, True)

            def close(self):
                self.s.close()

        return Mooncake()

    import dualpath

    class Dualpath:
        def __init__(self):
            if kind == "kv":
                self.s = dualpath.KVStore(cfg["pool"], None, pool_size=SEGMENT)
            else:
                self.s = dualpath.ClusterStore(
                    cfg["cluster"], cfg["etcd"], model_fingerprint=cfg["fingerprint"],
                    etcd_insecure=True, master_insecure=True, host=cfg["host"], replicas=1,
                    retry_deadline=30.0, transfer_poll=cfg.get("transfer_poll", True))

        def register(self, a):
            self.s.register_buffer(a)

        def put(self, keys, ptrs, sizes):
            return [r == 0 for r in self.s.batch_put_from(keys, ptrs, sizes)]

        def get(self, keys, ptrs, sizes):
            return [r == s for r, s in zip(self.s.batch_get_into(keys, ptrs, sizes), sizes)]

        def is_exist(self, keys):
            return [bool(r) for r in self.s.batch_is_exist(keys)]

        def remove(self, keys):
            if kind == "kv":
                for k in keys:
                    self.s.remove(k)
            else:
                self.s.remove(keys)

        def close(self):
            self.s.close()

    return Dualpath()


def usage(r0):
    """The worker process's CPU seconds (all its threads) and minor page faults since r0: what
    one call cost this client, which the load of a shared machine does not scale as it does the
    wall-clock time (the master and node processes are not counted, on either side)."""
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu": r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime,
            "minflt": r1.ru_minflt - r0.ru_minflt}


def worker(cfg):
    import hashlib

    import numpy as np
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever the libraries print goes to the log, not the reply pipe
    store = open_store(cfg)
    buffers = {}
    for name, (count, size) in cfg["sizes"].items():
        src = np.random.default_rng(size).integers(0, 256, count * size, dtype=np.uint8)
        dst = np.zeros_like(src)
        store.register(src)
        store.register(dst)
        buffers[name] = (count, size, src, dst)
    small = np.zeros(EX_KEYS * EX_OBJECT, np.uint8)
    store.register(small)
    str_keys = [f"exists-{i}" for i in range(EX_KEYS)]
    b32_keys = [hashlib.sha256(k.encode()).digest() for k in str_keys]
    reply.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        req = json.loads(line)
        op, out = req["op"], {}
        if op == "quit":
            store.close()
            reply.write("{}\n")
            return
        if op in ("put", "get", "remove"):
            count, size, src, dst = buffers[req["size"]]
            keys = [f"{req['tag']}-{i}" for i in range(count)]
            if op == "remove":
                store.remove(keys)
            elif op == "put":
                stamp(src, count, size, req["round"], req["salt"])
                ptrs = [src.ctypes.data + i * size for i in range(count)]
                r0, t = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
                ok = store.put(keys, ptrs, [size] * count)
                out["t"] = time.perf_counter() - t
                out.update(usage(r0))
                out["ok"] = all(ok)
            else:
                # A get that writes nothing cannot pass on an earlier round's bytes.
                dst[::4096] = 0xA5
                ptrs = [dst.ctypes.data + i * size for i in range(count)]
                r0, t = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
                ok = store.get(keys, ptrs, [size] * count)
                out["t"] = time.perf_counter() - t
                out.update(usage(r0))
                stamp(src, count, size, req["round"], req["salt"])  # what the writer put
                out["ok"] = all(ok) and bool(np.array_equal(src, dst))
        elif op == "exists_setup":
            ptrs = [small.ctypes.data + i * EX_OBJECT for i in range(EX_KEYS)]
            out["ok"] = all(store.put(str_keys, ptrs, [EX_OBJECT] * EX_KEYS))
        elif op == "exists":
            keys = str_keys if req["keys"] == "str" else b32_keys
            ts = []
            for _ in range(EX_CALLS):
                t = time.perf_counter()
                found = store.is_exist(keys)
                ts.append(time.perf_counter() - t)
            out["ts"] = ts
            out["ok"] = all(found)
        reply.write(json.dumps(out) + "\n")


# ------------------------------------------------------------------------------------ the driver
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """A child process in its own session, its output in <logs>/<name>.log."""

    def __init__(self, logs, name, argv, env=None, pipes=False):
        self.name, self.path = name, os.path.join(logs, f"{name}.log")
        self.log = open(self.path, "wb")
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE if pipes else self.log,
                                  stdin=subprocess.PIPE if pipes else subprocess.DEVNULL,
                                  stderr=self.log, env=env, start_new_session=True)

    def text(self):
        with open(self.path, "rb") as f:
            return f.read().decode(errors="replace")

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(20)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


class Worker(Proc):
    def __init__(self, logs, name, cfg, env=None):
        super().__init__(logs, name, [os.path.join(VENV, "bin", "python"),
                                      os.path.abspath(__file__), "--worker", json.dumps(cfg)],
                         env=env, pipes=True)
        if not self.read(180).get("ready"):
            raise RuntimeError(f"worker {name} did not start:\n{self.text()[-3000:]}")

    def read(self, timeout=600):
        if not select.select([self.p.stdout], [], [], timeout)[0]:
            raise TimeoutError(
                f"worker {self.name}: no reply in {timeout} s\n{self.text()[-3000:]}")
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.name} exited:\n{self.text()[-3000:]}")
        return json.loads(line)

    def call(self, **req):
        self.p.stdin.write((json.dumps(req) + "\n").encode())
        self.p.stdin.flush()
        return self.read()

    def stop(self):
        try:
            if self.p.poll() is None:
                self.call(op="quit")
        except (OSError, RuntimeError, TimeoutError):
            pass
        super().stop()


def wait_for(cond, what, deadline=60):
    end = time.time() + deadline
    while not cond():
        if time.time() > end:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.1)


def start_mooncake(logs, tag, procs):
    rpc, http, metrics = free_port(), free_port(), free_port()
    master = os.path.join(VENV, "bin", "mooncake_master")
    m = Proc(logs, f"mooncake-master-{tag}",
             [master, f"--rpc_port={rpc}", "--rpc_address=127.0.0.1",
              "--enable_http_metadata_server=true", "--http_metadata_server_host=127.0.0.1",
              f"--http_metadata_server_port={http}", f"--metrics_port={metrics}"])
    procs.append(m)
    wait_for(lambda: "Master admin server started" in m.text() or m.p.poll() is not None,
             "mooncake_master")
    if m.p.poll() is not None:
        raise RuntimeError(f"mooncake_master exited:\n{m.text()[-3000:]}")
    return {"master": f"127.0.0.1:{rpc}", "metadata": f"http://127.0.0.1:{http}/metadata"}


def start_dualpath(logs, dp_bin, procs):
    client, peer = free_port(), free_port()
    etcd = f"127.0.0.1:{client}"
    curl, purl = f"http://{etcd}", f"http://127.0.0.1:{peer}"
    e = Proc(logs, "etcd", [ETCD, "--name=peerbench", f"--data-dir={logs}/etcd",
                            f"--listen-client-urls={curl}", f"--advertise-client-urls={curl}",
                            f"--listen-peer-urls={purl}", f"--initial-advertise-peer-urls={purl}",
                            f"--initial-cluster=peerbench={purl}", "--log-level=warn"])
    procs.append(e)

    def healthy():
        try:
            with urllib.request.urlopen(curl + "/health", timeout=2) as r:
                return b'"health":"true"' in r.read()
        except OSError:
            return False
    wait_for(lambda: e.p.poll() is not None or healthy(), "etcd")
    cluster = f"peerbench{os.getpid()}"
    flags = ["--cluster", cluster, "--etcd", etcd, "--etcd-insecure", "--insecure"]
    m = Proc(logs, "store-master", [dp_bin, "store", "master", *flags, "--listen", "127.0.0.1:0"])
    procs.append(m)
    wait_for(lambda: "listening on" in m.text() or m.p.poll() is not None, "store master")
    n = Proc(logs, "store-node", [dp_bin, "store", "node", *flags, "--id", "1", "--host", "node1",
                                  "--dram-mib", str(SEGMENT >> 20), "--shm-dir", "/dev/shm",
                                  "--ttl", "5"])
    procs.append(n)
    wait_for(lambda: "store node 1:" in n.text() or n.p.poll() is not None, "store node")
    for p in (m, n):
        if p.p.poll() is not None:
            raise RuntimeError(f"{p.name} exited:\n{p.text()[-3000:]}")
    return {"cluster": cluster, "etcd": etcd, "fingerprint": 27}


def install():
    """Makes .venv-bench (pinned) and installs the dualpath wheel built from this tree into it."""
    subprocess.run(["bash", os.path.join(ROOT, "scripts", "setup_python.sh"), VENV, REQS],
                   check=True)
    dist = os.path.join(ROOT, "build", "python", "dist-bench")
    shutil.rmtree(dist, ignore_errors=True)
    env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL=os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL",
                                                                     "2"))
    pip = os.path.join(VENV, "bin", "pip")
    subprocess.run([pip, "wheel", "--quiet", "--no-build-isolation", "--no-deps", "--wheel-dir",
                    dist, ROOT], check=True, env=env, cwd=ROOT)
    wheel = [f for f in os.listdir(dist) if f.endswith(".whl")][0]
    subprocess.run([pip, "install", "--quiet", "--no-deps", "--force-reinstall",
                    os.path.join(dist, wheel)], check=True)


# The ratio table: (row, column of sizes or None, dualpath series, Mooncake series).
ROWS = [
    ("KVStore put vs Mooncake in-process put", "put", "dpkv-A", "mc-A"),
    ("KVStore get vs Mooncake in-process get", "get", "dpkv-A", "mc-A"),
    ("ClusterStore same-host put vs Mooncake in-process put", "put", "dpcl-A", "mc-A"),
    ("ClusterStore same-host get vs Mooncake in-process get", "get", "dpcl-A", "mc-A"),
    ("ClusterStore UCX tcp put vs Mooncake TCP put", "put", "dpcl-T", "mc-T"),
    ("ClusterStore UCX tcp get vs Mooncake TCP get", "get", "dpcl-T", "mc-T"),
    ("KVStore cross-process get vs Mooncake cross-process get", "get", "dpkv-B", "mc-B"),
    ("ClusterStore cross-process get vs Mooncake cross-process get", "get", "dpcl-B", "mc-B"),
    # --sleeping-client: the same-run baseline of the client's polling (transfer_poll=False).
    ("ClusterStore UCX tcp put, sleeping client, vs Mooncake TCP put", "put", "dpcl-S", "mc-T"),
    ("ClusterStore UCX tcp get, sleeping client, vs Mooncake TCP get", "get", "dpcl-S", "mc-T"),
]
EXISTS_ROWS = [
    ("ClusterStore.batch_is_exist str keys vs Mooncake", "dpcl-A/str", "mc-A/str"),
    ("ClusterStore.batch_is_exist 32-byte keys vs Mooncake str keys", "dpcl-A/b32", "mc-A/str"),
    ("KVStore.batch_is_exist str keys vs Mooncake", "dpkv-A/str", "mc-A/str"),
]


def run(a, logs):
    sizes = ({"256K": (16, 256 << 10), "1M": (4, 1 << 20)} if a.smoke else
             {"256K": (256, 256 << 10), "1M": (64, 1 << 20)})
    if a.sizes:
        sizes = {k: v for k, v in sizes.items() if k in a.sizes}
    dp_bin = os.environ.get("DP_BIN") or next(
        (p for p in (os.path.join(ROOT, "build", b, "bin", "dualpath") for b in ("release", "dev"))
         if os.access(p, os.X_OK)), "")
    if not os.access(dp_bin, os.X_OK):
        raise SystemExit("peer_bench: no dualpath binary (set DP_BIN or build the dualpath target)")
    procs, workers = [], {}
    pool = f"/dev/shm/peer-bench-kv-{os.getpid()}"
    writers, readers = [], {}
    loads = [os.getloadavg()]
    try:
        if not a.smoke:
            mc = start_mooncake(logs, "memcpy", procs)
            mc_tcp = start_mooncake(logs, "tcp", procs)
            base = {"kind": "mc", "host": "127.0.0.1", "sizes": sizes}
            workers["mc-A"] = Worker(logs, "mc-A", {**base, **mc, "segment": SEGMENT})
            workers["mc-B"] = Worker(logs, "mc-B", {**base, **mc, "segment": 0})
            workers["mc-T"] = Worker(logs, "mc-T", {**base, **mc_tcp, "segment": SEGMENT},
                                     env=dict(os.environ, MC_STORE_MEMCPY="0"))
            writers += ["mc-A", "mc-T"]
            readers["mc-A"] = ["mc-B"]
        kv = {"kind": "kv", "pool": pool, "sizes": sizes}
        workers["dpkv-A"] = Worker(logs, "dpkv-A", kv)
        workers["dpkv-B"] = Worker(logs, "dpkv-B", kv)
        cl = {"kind": "cluster", "sizes": sizes, **start_dualpath(logs, dp_bin, procs)}
        workers["dpcl-A"] = Worker(logs, "dpcl-A", {**cl, "host": "node1"})
        probe = dict(op="put", tag="probe", size="1M", round=0, salt=0)
        wait_for(lambda: workers["dpcl-A"].call(**probe)["ok"], "the node to join the master", 60)
        workers["dpcl-A"].call(op="remove", tag="probe", size="1M")
        workers["dpcl-B"] = Worker(logs, "dpcl-B", {**cl, "host": "node1"})
        workers["dpcl-T"] = Worker(logs, "dpcl-T", {**cl, "host": "elsewhere"})
        writers += ["dpkv-A", "dpcl-A", "dpcl-T"]
        if a.sleeping_client:
            workers["dpcl-S"] = Worker(logs, "dpcl-S",
                                       {**cl, "host": "elsewhere", "transfer_poll": False})
            writers.append("dpcl-S")
        readers["dpkv-A"] = ["dpkv-B"]
        readers["dpcl-A"] = ["dpcl-B"]
        salt = {w: i + 1 for i, w in enumerate(workers)}
        if a.writers:
            # One pair of rows alone (e.g. --writers mc-A,dpcl-A --sizes 1M): the same rounds,
            # fewer workers in them.
            unknown = set(a.writers) - set(writers)
            if unknown:
                raise SystemExit(f"peer_bench: --writers: {', '.join(sorted(unknown))} not among "
                                 f"{', '.join(writers)}")
            writers = [w for w in writers if w in a.writers]

        times = {}  # "op/worker/size" -> [seconds per timed round]
        usages = {}  # "op/worker/size" -> [(CPU seconds, minor faults) per timed round]

        def cycle(w, size, rnd, tag, record):
            put = workers[w].call(op="put", tag=tag, size=size, round=rnd, salt=salt[w])
            if not put["ok"]:
                raise RuntimeError(f"{w}: put {size} failed in round {rnd}")
            got = [(r, workers[r].call(op="get", tag=tag, size=size, round=rnd, salt=salt[w]))
                   for r in [w] + readers.get(w, [])]
            workers[w].call(op="remove", tag=tag, size=size)
            for r, g in got:
                if not g["ok"]:
                    raise RuntimeError(f"{r}: get {size} of {w}'s objects failed or read wrong "
                                       f"bytes in round {rnd}")
            if record:
                times.setdefault(f"put/{w}/{size}", []).append(put["t"])
                usages.setdefault(f"put/{w}/{size}", []).append((put["cpu"], put["minflt"]))
                for r, g in got:
                    times.setdefault(f"get/{r}/{size}", []).append(g["t"])
                    usages.setdefault(f"get/{r}/{size}", []).append((g["cpu"], g["minflt"]))

        # Untimed: touch every page of each segment, pool and tier once, as a running cache has.
        for j in range(0 if a.smoke else (SEGMENT >> 20) // 64 + 4):
            size = list(sizes)[j % len(sizes)]
            for w in writers:
                cycle(w, size, 100000 + j, f"prefill{j}-{w}", False)
        for rnd in range(a.warmup + a.reps):
            order = writers[rnd % len(writers):] + writers[:rnd % len(writers)]
            for size in sizes:
                for w in order:
                    cycle(w, size, rnd, f"r{rnd}-{size}-{w}", rnd >= a.warmup)
            loads.append(os.getloadavg())
            print(f"round {rnd} done, load {loads[-1][0]:.2f}", flush=True)

        ex_workers = [w for w in ("mc-A", "dpkv-A", "dpcl-A") if w in workers and not a.writers]
        for w in ex_workers:
            if not workers[w].call(op="exists_setup")["ok"]:
                raise RuntimeError(f"{w}: exists setup put failed")
        variants = [(w, k) for w in ex_workers for k in (("str",) if w.startswith("mc") else
                                                         ("str", "b32"))]
        ex_times = {}  # "worker/keys" -> [[seconds per call] per round]
        for rnd in range(1 + a.reps if variants else 0):
            for w, k in variants[rnd % len(variants):] + variants[:rnd % len(variants)]:
                res = workers[w].call(op="exists", keys=k)
                if not res["ok"]:
                    raise RuntimeError(f"{w}: exists with {k} keys missed a key")
                if rnd > 0:
                    ex_times.setdefault(f"{w}/{k}", []).append(statistics.median(res["ts"]))
        loads.append(os.getloadavg())
    finally:
        for w in workers.values():
            w.stop()
        for p in reversed(procs):
            p.stop()
        if os.path.exists(pool):
            os.unlink(pool)
    return sizes, times, usages, ex_times, loads


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # 15: with 7 a row's median moved below 1.0 in about two runs of five on the 2-core VM, when
    # two or three rounds of one side were slow (docs/store.md "Against Mooncake Store").
    ap.add_argument("--reps", type=int, default=15, help="timed rounds")
    ap.add_argument("--warmup", type=int, default=2, help="untimed rounds before them")
    ap.add_argument("--smoke", action="store_true",
                    help="dualpath only (no Mooncake), small batches, 2 rounds")
    ap.add_argument("--no-install", action="store_true",
                    help="use .venv-bench as it is (no venv update, no wheel build)")
    ap.add_argument("--json", help="write the raw times and the table here")
    ap.add_argument("--writers", type=lambda v: v.split(","),
                    help="only these writers' rounds (comma list of mc-A, mc-T, dpkv-A, dpcl-A, "
                         "dpcl-T, dpcl-S; their readers too) and no exists rows")
    ap.add_argument("--sizes", type=lambda v: v.split(","), help="only these sizes: 256K, 1M")
    ap.add_argument("--sleeping-client", action="store_true",
                    help="also dpcl-S: dpcl-T's client with transfer_poll=False (sleeps between "
                         "transfer events), the same-run baseline of its polling")
    a = ap.parse_args()
    if a.smoke:
        a.reps, a.warmup = 2, 0
    if not 1 <= a.reps <= 1000 or not 0 <= a.warmup <= 100:
        ap.error("--reps must be in [1, 1000] and --warmup in [0, 100]")
    if a.sizes and not set(a.sizes) <= {"256K", "1M"}:
        ap.error("--sizes takes 256K and/or 1M")
    if not a.no_install:
        install()
    logs = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"peer-bench-{os.getpid()}")
    os.makedirs(logs, exist_ok=True)
    sizes, times, usages, ex_times, loads = run(a, logs)

    def ratios(dp, mc):
        # Speed ratio per round: Mooncake's time over dualpath's.
        return [m / d for d, m in zip(dp, mc)]

    lines = [f"load average (1 min) at start / after the timed rounds / end: "
             f"{loads[0][0]:.2f} / {loads[-2][0]:.2f} / {loads[-1][0]:.2f}", "",
             "| path (median of per-round speed ratios, dualpath / Mooncake; min-max) | "
             + " | ".join(f"{c} x {s >> 10} KiB" for c, s in sizes.values()) + " |",
             "|---|" + "---|" * len(sizes)]
    table = {}
    for title, op, dp, mc in ROWS:
        if dp == "dpcl-S" and not a.sleeping_client:
            continue
        cells = []
        for name in sizes:
            d, m = times.get(f"{op}/{dp}/{name}"), times.get(f"{op}/{mc}/{name}")
            if d is None or m is None:
                cells.append("-")
                continue
            r = ratios(d, m)
            table[f"{title}/{name}"] = r
            cells.append(f"{statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f})")
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    lines += ["", "| exists, 1,000-key batches (median of per-round ratios of the median call) "
              "| ratio | dualpath M keys/s | Mooncake M keys/s |", "|---|---|---|---|"]
    for title, dp, mc in EXISTS_ROWS:
        d, m = ex_times.get(dp), ex_times.get(mc)
        if d is None:
            continue
        dk = statistics.median(EX_KEYS / t / 1e6 for t in d)
        if m is None:
            lines.append(f"| {title} | - | {dk:.2f} | - |")
            continue
        r = ratios(d, m)
        table[title] = r
        mk = statistics.median(EX_KEYS / t / 1e6 for t in m)
        lines.append(f"| {title} | {statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f}) | "
                     f"{dk:.2f} | {mk:.2f} |")
    lines += ["", "per call, median over rounds: GB/s (wall), the client process's CPU ms (all its "
              "threads) and minor page faults; per-round wall times in ms:"]
    for key, ts in sorted(times.items()):
        op, w, name = key.split("/")
        count, size = sizes[name]
        gbps = statistics.median(count * size / t / 1e9 for t in ts)
        cpu = statistics.median(u[0] for u in usages[key]) * 1e3
        flt = statistics.median(u[1] for u in usages[key])
        rounds = " ".join(f"{t * 1e3:.0f}" for t in ts)
        lines.append(f"  {op:3s} {w:7s} {name:4s} {gbps:6.2f} GB/s {cpu:7.1f} CPU-ms {flt:7.0f} "
                     f"faults | {rounds}")
    print("\n".join(lines))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"loads": loads, "times": times, "usages": usages, "exists": ex_times, "ratios": table,
                       "markdown": "\n".join(lines)}, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker(json.loads(sys.argv[2]))
    else:
        main()
