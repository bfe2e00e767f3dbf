"""``dualpath.ClusterStore``: the distributed KV store's client (issue 16, docs/store.md).

A thin wrapper over the C++ client library ``dualpath::store::StoreClient``
(include/dualpath/store/client.h): it finds the leader ``dualpath store master`` through etcd,
asks it where to write or read, and moves the bytes itself, to and from the ``dualpath store
node`` processes (through a same-host node's shared-memory tier file, else over the transfer
engine). Every object read back is checked against its committed size and checksum: a hit never
leaves wrong bytes in the caller's buffer.

The verbs have ``dualpath.KVStore``'s shape, so a connector written for one works with the other:
  register_buffer(ptr, size) / unregister_buffer(ptr)
  batch_put_from(keys, ptrs, sizes) -> list[int]     0, or -code per key
  batch_get_into(keys, ptrs, sizes) -> list[int]     bytes read, or -code (-200: miss)
  batch_put(keys, values) / batch_get(keys, buffers) the same with buffer objects
  batch_exists(keys) -> int                          count of leading keys present
  batch_is_exist(keys) -> list[bool]
  remove(keys) -> int                                how many were removed (absent: no error)
  *_async variants -> Handle (done(), wait(timeout))
  stats() -> dict; close(); context manager

Keys: ``bytes`` of 32 bytes (vLLM block hashes) are used as they are; other ``bytes`` or ``str``
keys are hashed with SHA-256 (KVStore's rule). The store's object key is (model fingerprint, that
hash); the fingerprint is chosen once, at construction (``model_fingerprint``; e.g.
``dualpath.kv.model("qwen3-32b")["fingerprint"]``), so two models never share an object.

Raw pointers must lie inside a registered buffer (a registration also lets remote gets land in it
without a staging copy); buffer objects (numpy arrays, torch CPU tensors, bytearray, ...) need no
registration. Bad input raises (ValueError, TypeError, KeyError) naming what was wrong, before
anything is sent. The calls run with the GIL released; they retry leader changes and unreachable
masters until ``retry_deadline`` seconds have passed, then raise ``dualpath.Error`` (gets, exists,
remove) or return the code per key (puts: ``-9`` kUnavailable, ``-8`` kTimeout, ...).

After ``os.fork()``: gRPC and the transfer engine cannot be used again in a child of a process
that used them (the child would poll the parent's inherited sockets and consume its events), so
in a process forked from one that had opened a ClusterStore, the inherited client and a new one
both raise ``dualpath.Error`` naming fork and saying what to do: open the ClusterStore only after
forking, in each worker (a process that never had one opens its own as usual), or use the
'spawn' start method. The parent's client is left alone; nothing hangs.
"""

from __future__ import annotations

from typing import Any

from dualpath import _core
from dualpath.store import _BatchVerbs


class ClusterStore(_BatchVerbs):
    _name = "cluster"

    def __init__(
        self,
        cluster: str,
        etcd: str,
        *,
        model_fingerprint: int = 0,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        tls_ca: str | None = None,
        etcd_insecure: bool = False,
        etcd_tls_cert: str | None = None,
        etcd_tls_key: str | None = None,
        etcd_tls_ca: str | None = None,
        master_insecure: bool = False,
        master_tls_cert: str | None = None,
        master_tls_key: str | None = None,
        master_tls_ca: str | None = None,
        host: str | None = None,
        local_node: int = 0,
        local_shm: bool = True,
        shm_dir: str = "/dev/shm",
        ucx_tls: str = "tcp",
        transfer_token_file: str | None = None,
        replicas: int = 1,
        retry_deadline: float = 15.0,
        rpc_timeout: float = 5.0,
        etcd_timeout: float = 5.0,
        staging_bytes: int = 4 << 20,
        async_threads: int = 2,
        transfer_poll: bool = True,
        exists_poll: float = 0.001,
    ) -> None:
        """Checks the options and starts the client; etcd and the master are reached on the first
        call (a wrong endpoint shows there, within ``retry_deadline``).

        cluster            the store's cluster name (etcd keys /dualpath/<cluster>/)
        etcd               etcd endpoints, "HOST:PORT[,HOST:PORT...]" or "unix:PATH"
        model_fingerprint  the first half of every object key, 0 .. 2^64-1
        tls_cert, tls_key, tls_ca
                           the client certificate, its key and the CA, towards etcd and the
                           masters (the CLI's --tls-*; `cluster up --store` prints where its store
                           keeps them), unless the etcd_* / master_* options below are given
        etcd_insecure / etcd_tls_cert, etcd_tls_key, etcd_tls_ca
                           plaintext towards etcd, or the TLS files (the CLI's --etcd-* flags)
        master_insecure / master_tls_cert, master_tls_key, master_tls_ca
                           the same towards the masters (--master-*)
        host               this client's host name; a node with the same host is read and written
                           through its shm tier file (default: gethostname(); local_shm=False:
                           never)
        local_node         the store node beside this client (the master prefers it for puts);
                           0: none
        shm_dir            where this host's store nodes keep their tier files (their --shm-dir):
                           a same-host node's file is mapped only at <shm_dir>/dualpath-store-
                           <cluster>-<id>, owned by this user, with a header naming this cluster,
                           the node and its incarnation (else the network is used)
        ucx_tls            UCX_TLS of the transfer engine ("tcp"; "" keeps UCX's default)
        transfer_token_file  the cluster's transfer token, when the nodes require one
        replicas           copies per put, on distinct nodes (1 .. 3)
        retry_deadline     seconds a call keeps retrying leader changes and unreachable masters
        rpc_timeout        deadline of each master call, seconds
        etcd_timeout       deadline of each etcd call, seconds
        staging_bytes      initial staging buffer for unregistered memory (it grows as needed)
        async_threads      batches the *_async verbs run at once
        transfer_poll      the transfer thread polls while this client's gets are in flight
                           (True) or sleeps between their segments (False: where the process
                           shares a few cores with the store nodes it reads)
        exists_poll        seconds an exists call polls for its answer before it sleeps (0 .. 1;
                           0: sleep at once)
        """
        if not isinstance(cluster, str) or not isinstance(etcd, str):
            raise TypeError("ClusterStore: cluster and etcd must be str")
        if not isinstance(model_fingerprint, int) or not 0 <= model_fingerprint < 1 << 64:
            raise ValueError(
                f"ClusterStore: model_fingerprint = {model_fingerprint!r}: must be an int in "
                "[0, 2^64)"
            )
        if not isinstance(local_node, int) or not 0 <= local_node < 1 << 32:
            raise ValueError(f"ClusterStore: local_node = {local_node!r}: must be 0 .. 2^32-1")
        if not isinstance(replicas, int) or not 1 <= replicas <= 3:
            raise ValueError(f"ClusterStore: replicas = {replicas!r}: must be 1 .. 3")
        if not isinstance(exists_poll, (int, float)) or not 0 <= exists_poll <= 1:
            raise ValueError(f"ClusterStore: exists_poll = {exists_poll!r}: must be 0 .. 1 seconds")
        if async_threads < 1:
            raise ValueError(f"ClusterStore: async_threads = {async_threads}: must be at least 1")
        o = _core._ClusterOptions()
        o.cluster = cluster
        o.etcd = etcd
        o.model_fingerprint = model_fingerprint
        # Towards etcd and the masters: their own options when any is given, else tls_* (as the
        # CLI's --etcd-* / --master-* default to --tls-*).
        shared = (tls_cert, tls_key, tls_ca)
        etcd = (etcd_tls_cert, etcd_tls_key, etcd_tls_ca)
        if not etcd_insecure and etcd == (None, None, None):
            etcd = shared
        master = (master_tls_cert, master_tls_key, master_tls_ca)
        if not master_insecure and master == (None, None, None):
            master = shared
        o.etcd_insecure = bool(etcd_insecure)
        o.etcd_tls_cert, o.etcd_tls_key, o.etcd_tls_ca = etcd
        o.master_insecure = bool(master_insecure)
        o.master_tls_cert, o.master_tls_key, o.master_tls_ca = master
        o.host = host
        o.local_node = local_node
        o.local_shm = bool(local_shm)
        o.shm_dir = str(shm_dir)
        o.ucx_tls = ucx_tls
        o.transfer_token_file = transfer_token_file
        o.replicas = replicas
        o.retry_deadline = float(retry_deadline)
        o.rpc_timeout = float(rpc_timeout)
        o.etcd_timeout = float(etcd_timeout)
        o.staging_bytes = staging_bytes
        o.transfer_poll = bool(transfer_poll)
        o.exists_poll = float(exists_poll)
        self._init_verbs(lambda: _core.ClusterStore(o), async_threads)
        self.cluster = cluster
        self.etcd = etcd

    @property
    def model_fingerprint(self) -> int:
        return self._s.model_fingerprint

    def remove(self, keys: Any) -> int:
        """Removes the keys (one key, bytes or str, or a sequence of them); returns how many were
        removed. Absent keys are not an error (another client may have removed them)."""
        if isinstance(keys, (bytes, str)):
            keys = [keys]
        return self._native().remove(keys)
