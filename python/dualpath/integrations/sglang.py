"""SGLang HiCache storage backend backed by dualpath's node tiers (``dualpath.KVStore``).

Plug it in without patching SGLang (docs/integrations/sglang.md)::

    --enable-hierarchical-cache --hicache-storage-backend dynamic
    --hicache-storage-backend-extra-config '{"backend_name": "dualpath",
        "module_path": "dualpath.integrations.sglang",
        "class_name": "DualPathHiCacheStorage",
        "pool_path": "/dev/shm/dualpath-sglang", "store_path": "/mnt/kv"}'

SGLang's factory constructs ``DualPathHiCacheStorage(storage_config, kwargs)`` and then calls
``register_mem_pool_host(host_pool)``; the host pool's buffers are registered with the store, so
the zero-copy ``batch_get_v1`` / ``batch_set_v1`` move pages straight between the host pool's own
memory and the tiers (one value per buffer of a page: K and V for MHA, one for MLA).

Keys are SGLang's page hash strings (``dualpath.KVStore`` hashes string keys with SHA-256), under
a namespace of the model name and, for MHA models, the TP rank (each rank holds other heads).
Extra config keys (all optional): ``pool_path`` (default ``/dev/shm/dualpath-sglang``; ``""`` for
no pool), ``pool_size`` (bytes, default 4 GiB), ``store_path`` (default: none), ``namespace``,
``sync`` (``none|data|full``, default ``data``).
"""

from __future__ import annotations

import logging
from typing import Any, List, Optional

import torch
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig

import dualpath

logger = logging.getLogger(__name__)

__all__ = ["DualPathHiCacheStorage"]


def _namespace(config: HiCacheStorageConfig) -> str:
    model = config.model_name or "model"
    if config.is_mla_model:  # every rank holds the same latent cache
        return f"sglang/{model}/mla"
    return f"sglang/{model}/tp{config.tp_rank}of{config.tp_size}"


class DualPathHiCacheStorage(HiCacheStorage):
    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: Optional[dict] = None):
        self.storage_config = storage_config
        extra = dict(storage_config.extra_config or {})
        pool_path = extra.get("pool_path", "/dev/shm/dualpath-sglang") or None
        self.store = dualpath.KVStore(
            pool_path,
            extra.get("store_path") or None,
            pool_size=int(extra.get("pool_size", 4 << 30)),
            namespace=extra.get("namespace") or _namespace(storage_config),
            sync=extra.get("sync", "data"),
        )
        self.is_writer = getattr(storage_config, "is_storage_writer", True)
        self.mem_pool_host = None
        self._registered: list[torch.Tensor] = []

    # ---- host pool (zero copy) -------------------------------------------------------------------
    def register_mem_pool_host(self, mem_pool_host) -> None:
        super().register_mem_pool_host(mem_pool_host)
        get_buffers = getattr(mem_pool_host, "get_hybrid_pool_buffer",
                              lambda: [getattr(mem_pool_host, "kv_buffer", None)])
        for buf in get_buffers():
            if isinstance(buf, torch.Tensor):
                self.store.register_buffer(buf)
                self._registered.append(buf)

    def _page_io(self, keys: List[str], host_indices: torch.Tensor):
        """Per page of ``host_indices``: its buffers' (key, ptr, size), from the host pool."""
        if self.mem_pool_host is None:
            raise RuntimeError("DualPathHiCacheStorage: register_mem_pool_host was not called")
        ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
        if not keys or len(ptrs) % len(keys) != 0:
            raise ValueError(f"{len(keys)} keys for {len(ptrs)} host pool buffers")
        parts = len(ptrs) // len(keys)
        return _part_keys(keys, parts), ptrs, sizes, parts

    def batch_get_v1(self, keys: List[str], host_indices: torch.Tensor,
                     extra_info: Any = None) -> List[bool]:
        part_keys, ptrs, sizes, parts = self._page_io(keys, host_indices)
        rcs = self.store.batch_get_into(part_keys, ptrs, sizes)
        return [all(rc > 0 for rc in rcs[i * parts:(i + 1) * parts]) for i in range(len(keys))]

    def batch_set_v1(self, keys: List[str], host_indices: torch.Tensor,
                     extra_info: Any = None) -> List[bool]:
        if not self.is_writer:
            return [True] * len(keys)
        part_keys, ptrs, sizes, parts = self._page_io(keys, host_indices)
        rcs = self.store.batch_put_from(part_keys, ptrs, sizes)
        return [all(rc == 0 for rc in rcs[i * parts:(i + 1) * parts]) for i in range(len(keys))]

    # ---- values (the copying interface) ----------------------------------------------------------
    def get(self, key: str, target_location: Any = None, target_sizes: Any = None):
        if target_location is None:
            return None
        (rc,) = self.store.batch_get([key], [target_location])
        return target_location if rc > 0 else None

    def batch_get(self, keys: List[str], target_locations: Any = None,
                  target_sizes: Any = None):
        if target_locations is None:
            return [None] * len(keys)
        rcs = self.store.batch_get(keys, target_locations)
        return [t if rc > 0 else None for t, rc in zip(target_locations, rcs)]

    def set(self, key: str, value: Any = None, target_location: Any = None,
            target_sizes: Any = None) -> bool:
        return self.batch_set([key], [value if value is not None else target_location])

    def batch_set(self, keys: List[str], values: Any = None, target_locations: Any = None,
                  target_sizes: Any = None) -> bool:
        if not self.is_writer:
            return True
        vals = values if values is not None else target_locations
        if vals is None:
            raise ValueError("batch_set: neither values nor target_locations given")
        vals = [v.contiguous() if isinstance(v, torch.Tensor) else v for v in vals]
        return all(rc == 0 for rc in self.store.batch_put(keys, vals))

    # ---- lookups -----------------------------------------------------------------------------------
    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
        """Leading pages present, stored either whole (batch_set) or per host buffer (v1)."""
        hits = self.store.batch_exists(keys)
        parts = self._parts()
        if parts > 1 and hits < len(keys):
            hits = max(hits, self.store.batch_exists(_part_keys(keys, parts)) // parts)
        return hits

    def _parts(self) -> int:
        pool = self.mem_pool_host
        if pool is None:
            return 1
        meta = pool.get_page_buffer_meta(torch.arange(pool.page_size))
        return len(meta[0]) if meta else 1

    def clear(self) -> None:
        # The tiers are shared with other processes and engines: clearing is an operator's
        # decision (dualpath pool destroy / removing the store directory), not one engine's.
        logger.info("DualPathHiCacheStorage.clear: the shared tiers are left as they are")

    def get_stats(self):
        return self.store.stats()

    def close(self) -> None:
        for buf in self._registered:
            self.store.unregister_buffer(buf)
        self._registered.clear()
        self.store.close()


def _part_keys(keys: List[str], parts: int) -> List[str]:
    if parts == 1:
        return list(keys)
    return [f"{k}#{j}" for k in keys for j in range(parts)]
