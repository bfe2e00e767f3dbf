"""``dualpath.KVStore``: the node's KV tiers with the verbs engine connectors use.

Tiers (at least one): the shared-memory pool at ``pool_path`` (``/dev/shm/...``; every process on
the node that opens the same path shares it; the first creates it with ``pool_size`` bytes) and
the persistent tier under ``store_path`` (any POSIX or distributed file system; one directory per
``namespace``). A put writes through to both; a get tries the pool, then the persistent tier, and
promotes a persistent hit into the pool. Every block handed back was verified against its checksum:
a corrupted block is a miss, never data.

Keys: ``bytes`` of 32 bytes (vLLM block hashes) are used as they are; other ``bytes`` or ``str``
keys (SGLang) are hashed with SHA-256.

Verbs (Mooncake's store is the reference shape):
  register_buffer(ptr, size) / unregister_buffer(ptr)
  batch_put_from(keys, ptrs, sizes) -> list[int]     0, or -code per key
  batch_get_into(keys, ptrs, sizes) -> list[int]     bytes read, or -code (-200: miss)
  batch_put(keys, values) / batch_get(keys, buffers) the same with buffer objects
  batch_exists(keys) -> int                          count of leading keys present
  batch_is_exist(keys) -> list[bool]
  remove(key)                                        KeyError if absent
  *_async variants -> Handle (done(), wait(timeout))
  stats() -> dict; close(); context manager

Raw pointers must lie inside a registered buffer (as with an RDMA engine's registration); buffer
objects (numpy arrays, torch CPU tensors, bytearray, ...) need no registration. Bad input raises
(ValueError, TypeError, PermissionError, KeyError) naming what was wrong, before anything is
written. The I/O runs with the GIL released.

After ``os.fork()`` (vLLM and SGLang fork their workers) a store opened in the parent keeps
working in the child: its native part (threads, io_uring rings, the pool attachment) is the
parent's, so the child's first call opens the store again with the same arguments and buffer
registrations, and the parent's native state is left alone. A batch still in flight at the fork
runs in the parent only: waiting for its Handle in the child raises.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
import weakref
from typing import Any, Callable, Sequence

from dualpath import _core


def _error(message: str, rc: int) -> Exception:
    e = _core.Error(message)
    e.code = -rc
    return e


# -- fork ----------------------------------------------------------------------------------------
# Bumped in the child of every os.fork() (and multiprocessing's fork start method): a store or a
# Handle made in an earlier generation belongs to an ancestor process.
_fork_generation = 0
_live_stores: "weakref.WeakSet[_BatchVerbs]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    global _fork_generation
    _fork_generation += 1
    for store in list(_live_stores):
        # Only the forking thread exists here: a lock some other parent thread held at the fork
        # would never be released, and the async pool's threads are gone (work submitted to it
        # would never run). Both are made again on demand.
        store._lock = threading.Lock()
        store._executor = None


os.register_at_fork(after_in_child=_after_fork_in_child)


class Handle:
    """An asynchronous batch in flight. Keeps the buffers it uses alive until it completes."""

    __slots__ = ("_future", "_keepalive", "_generation")

    def __init__(self, future: concurrent.futures.Future, keepalive: tuple) -> None:
        self._future = future
        self._keepalive = keepalive
        self._generation = _fork_generation

    def done(self) -> bool:
        return self._future.done()

    def wait(self, timeout: float | None = None) -> Any:
        """The batch's result (as the synchronous verb returns it); re-raises its exception.
        Raises TimeoutError if it has not finished within ``timeout`` seconds, and dualpath.Error
        in a forked child for a batch that was still in flight at the fork (it runs in the parent;
        in the child it would never finish)."""
        if self._generation != _fork_generation and not self._future.done():
            e = _core.Error("dualpath batch was in flight at os.fork(): it runs in the parent "
                            "process, not in this one; submit it again here")
            e.code = _core.FORKED_CODE
            raise e
        try:
            return self._future.result(timeout)
        except concurrent.futures.TimeoutError:
            raise TimeoutError("dualpath batch still in flight") from None

    result = wait


def _int_address(obj: Any) -> tuple[int, int]:
    """(address, size) of a contiguous CPU buffer object (numpy array or torch tensor)."""
    if hasattr(obj, "data_ptr") and hasattr(obj, "nbytes"):
        return int(obj.data_ptr()), int(obj.nbytes)
    iface = getattr(obj, "__array_interface__", None)
    if iface is not None:
        return int(iface["data"][0]), int(obj.nbytes)
    raise TypeError(
        f"register_buffer: expected (ptr, size), a numpy array or a tensor; got {type(obj).__name__}"
    )


class _BatchVerbs:
    """The verbs KVStore and ClusterStore share over their native object: buffer registration,
    the batch verbs, their *_async variants on a lazily started thread pool, the lifetime (close
    waits for asynchronous batches first; context manager), and fork (the native object of a
    parent process is replaced by a new one on the child's first call, ``_native``)."""

    _name = "store"  # in the closed-store error and the pool's thread names

    def _init_verbs(self, open_native: Callable[[], Any], async_threads: int) -> None:
        self._open_native = open_native  # called again in a forked child
        self._s = open_native()
        self._generation = _fork_generation
        self._registered: dict[int, int] = {}  # ptr -> size, registered again after a fork
        self._async_threads = async_threads
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        _live_stores.add(self)

    def _native(self) -> Any:
        """This process's native object. In a child forked after the store was opened, the first
        call opens it again (same arguments, same buffer registrations) and abandons the parent's
        (its close in a child touches nothing); a store closed before the fork stays closed."""
        if self._generation != _fork_generation:
            self._reopen_after_fork()
        return self._s

    def _reopen_after_fork(self) -> None:
        with self._lock:
            if self._generation == _fork_generation:
                return  # another thread of this child did it
            old = self._s
            if not old.closed:
                try:
                    new = self._open_native()
                    for ptr, size in self._registered.items():
                        new.register_buffer(ptr, size)
                except Exception as e:
                    if getattr(e, "code", None) == _core.FORKED_CODE:
                        raise  # cannot be re-created in a child (ClusterStore): the native reason
                    err = _core.Error(
                        f"{type(self).__name__} was opened before os.fork() and could not be "
                        f"opened again in this process: {e}. Open it in this process instead"
                    )
                    err.code = getattr(e, "code", _core.FORKED_CODE)
                    raise err from e
                self._s = new
                old.close()  # in a child: abandons the parent's threads, rings and locks
            self._generation = _fork_generation

    # -- registration ----------------------------------------------------------------------------
    def register_buffer(self, ptr_or_obj: Any, size: int | None = None) -> tuple[int, int]:
        """Registers [ptr, ptr + size) for the raw-pointer verbs; also accepts an array/tensor.
        Returns (ptr, size)."""
        if size is None:
            ptr, size = _int_address(ptr_or_obj)
        else:
            ptr = int(ptr_or_obj)
        self._native().register_buffer(ptr, size)
        self._registered[ptr] = size
        return ptr, size

    def unregister_buffer(self, ptr_or_obj: Any) -> None:
        ptr = ptr_or_obj if isinstance(ptr_or_obj, int) else _int_address(ptr_or_obj)[0]
        self._native().unregister_buffer(ptr)
        self._registered.pop(ptr, None)

    # -- synchronous verbs -----------------------------------------------------------------------
    def batch_put_from(self, keys: Sequence, ptrs: Sequence[int], sizes: Sequence[int]) -> list[int]:
        return self._native().batch_put_from(keys, ptrs, sizes)

    def batch_get_into(self, keys: Sequence, ptrs: Sequence[int], sizes: Sequence[int]) -> list[int]:
        return self._native().batch_get_into(keys, ptrs, sizes)

    def batch_put(self, keys: Sequence, values: Sequence) -> list[int]:
        return self._native().batch_put(keys, values)

    def batch_get(self, keys: Sequence, buffers: Sequence) -> list[int]:
        return self._native().batch_get(keys, buffers)

    def batch_exists(self, keys: Sequence) -> int:
        return self._native().batch_exists(keys)

    def batch_is_exist(self, keys: Sequence) -> list[bool]:
        return self._native().batch_is_exist(keys)

    def exists(self, key: Any) -> bool:
        return self._native().batch_is_exist([key])[0]

    def stats(self) -> dict:
        return self._native().stats()

    # -- asynchronous verbs ----------------------------------------------------------------------
    def _submit(self, verb: str, *args) -> Handle:
        fn = getattr(self._native(), verb)  # this process's native object
        if self._s.closed:
            raise ValueError(f"{type(self).__name__} is closed")
        with self._lock:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    self._async_threads, thread_name_prefix=f"dualpath-{self._name}"
                )
            return Handle(self._executor.submit(fn, *args), args)

    def batch_put_from_async(self, keys, ptrs, sizes) -> Handle:
        return self._submit("batch_put_from", list(keys), list(ptrs), list(sizes))

    def batch_get_into_async(self, keys, ptrs, sizes) -> Handle:
        return self._submit("batch_get_into", list(keys), list(ptrs), list(sizes))

    def batch_put_async(self, keys, values) -> Handle:
        return self._submit("batch_put", list(keys), list(values))

    def batch_get_async(self, keys, buffers) -> Handle:
        return self._submit("batch_get", list(keys), list(buffers))

    # -- lifetime --------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._s.closed

    def close(self) -> None:
        """Waits for asynchronous batches (and, for ClusterStore, calls in flight), then closes
        the native store. Later calls raise ValueError. In a forked child that has not used the
        store, the parent's native store is abandoned, not closed (the parent keeps it)."""
        with self._lock:
            ex, self._executor = self._executor, None
        if ex is not None:
            ex.shutdown(wait=True)
        self._s.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class KVStore(_BatchVerbs):
    _name = "kvstore"

    def __init__(
        self,
        pool_path: str | None = None,
        store_path: str | None = None,
        *,
        pool_size: int = 1 << 30,
        namespace: str = "default",
        sync: str = "data",
        capacity: int = 0,
        async_threads: int = 2,
        copy_threads: int = 0,
    ) -> None:
        if async_threads < 1:
            raise ValueError(f"async_threads = {async_threads}: must be at least 1")
        if not 0 <= copy_threads <= 256:
            raise ValueError(f"copy_threads = {copy_threads}: must be 0 (automatic) to 256")
        self._init_verbs(
            lambda: _core.KVStore(
                pool_path, store_path, pool_size=pool_size, namespace=namespace, sync=sync,
                capacity=capacity, copy_threads=copy_threads,
            ),
            async_threads,
        )
        self.pool_path = pool_path
        self.store_path = store_path
        self.namespace = namespace

    def put(self, key: Any, value: Any) -> None:
        """Stores one block; raises dualpath.Error if no tier could store it."""
        (rc,) = self._native().batch_put([key], [value])
        if rc < 0:
            raise _error(f"put: {_core.error_name(rc)}", rc)

    def get_into(self, key: Any, buffer: Any) -> int:
        """Copies one block into ``buffer``; returns its size. KeyError if absent or corrupt."""
        (rc,) = self._native().batch_get([key], [buffer])
        if rc < 0:
            if rc == -200:
                raise KeyError(f"get_into: no block for key {key!r}")
            raise _error(f"get_into: {_core.error_name(rc)}", rc)
        return rc

    def remove(self, key: Any) -> None:
        self._native().remove(key)

