"""vLLM KV connector backed by dualpath's node tiers (``dualpath.KVStore``).

Load it without patching vLLM (docs/integrations/vllm.md)::

    --kv-transfer-config '{"kv_connector": "DualPathConnector",
                           "kv_connector_module_path": "dualpath.integrations.vllm",
                           "kv_role": "kv_both",
                           "kv_connector_extra_config": {"pool_path": "/dev/shm/dualpath-vllm",
                                                         "store_path": "/mnt/kv"}}'

Keys are vLLM's own block hashes (``request.block_hashes``, sha256_cbor or whatever
``--prefix-caching-hash-algo`` chose), so the store shares keys with vLLM's prefix cache and with
``dualpath.kv``. One value per block holds every layer of this worker: the Full Block
``[layers, page bytes]`` of DualPath (docs/kv.md), each layer's page copied as vLLM lays it out.

Scheduler side: ``get_num_new_matched_tokens`` counts the leading blocks present in the store
(``batch_exists``, lock-free in the pool); ``build_connector_meta`` tells the workers which blocks
to load (hits) and which newly full blocks to save.

Worker side: ``start_load_kv`` starts one asynchronous batch get of the hit blocks into a staging
buffer; ``wait_for_layer_load(layer)`` waits for it once and then copies that layer's pages into
the paged cache, so the layers are scattered as the model reaches them. ``save_kv_layer`` gathers
each layer's pages of the blocks to save as the forward pass produces them; ``wait_for_save`` puts
the Full Blocks (synchronously: the blocks are not freed before the step ends, so
``request_finished`` never holds them). A block that fails to load (absent, or its checksum fails)
is never copied into the cache: it and the request's later loaded blocks are reported by
``get_block_ids_with_load_errors`` and vLLM recomputes them.

Extra config keys (all optional): ``pool_path`` (default ``/dev/shm/dualpath-vllm``; ``""`` for
no pool), ``pool_size`` (bytes, default 4 GiB), ``store_path`` (default: none), ``namespace``
(default: the model name, dtype and block size), ``sync`` (``none|data|full``, default ``data``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    SupportsHMA,
)

import dualpath
from dualpath.integrations._pages import (
    PagedLayers,
    PendingLoad,
    PendingSave,
    request_amx_permission,
)

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request

logger = logging.getLogger(__name__)

__all__ = ["DualPathConnector", "DualPathConnectorMetadata"]


@dataclass
class BlockTransfer:
    """Blocks of one request to move this step: vLLM block ids and their block hashes."""

    req_id: str
    block_ids: list[int]
    hashes: list[bytes]


@dataclass
class DualPathConnectorMetadata(KVConnectorMetadata):
    loads: list[BlockTransfer] = field(default_factory=list)
    saves: list[BlockTransfer] = field(default_factory=list)


@dataclass
class _ReqState:
    """Scheduler-side bookkeeping of one running request."""

    request: "Request"
    block_ids: list[int]
    saved: int  # leading full blocks already stored (loaded ones count)


def _namespace(vllm_config: "VllmConfig", rank: int) -> str:
    mc = vllm_config.model_config
    tp = vllm_config.parallel_config.tensor_parallel_size
    return (
        f"vllm/{mc.model}/{mc.dtype}/{vllm_config.cache_config.cache_dtype}"
        f"/bs{vllm_config.cache_config.block_size}/tp{rank}of{tp}"
    )


class DualPathConnector(KVConnectorBase_V1, SupportsHMA):
    def __init__(
        self,
        vllm_config: "VllmConfig",
        role: KVConnectorRole,
        kv_cache_config: "KVCacheConfig | None" = None,
    ) -> None:
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        extra = dict(self._kv_transfer_config.kv_connector_extra_config or {})
        self._block_size = vllm_config.cache_config.block_size
        rank = 0
        if role == KVConnectorRole.WORKER:
            try:
                from vllm.distributed.parallel_state import get_tensor_model_parallel_rank

                rank = get_tensor_model_parallel_rank()
            except Exception:  # no distributed state (single process, tests)
                rank = 0
        pool_path = extra.get("pool_path", "/dev/shm/dualpath-vllm") or None
        self._store = dualpath.KVStore(
            pool_path,
            extra.get("store_path") or None,
            pool_size=int(extra.get("pool_size", 4 << 30)),
            namespace=extra.get("namespace") or _namespace(vllm_config, rank),
            sync=extra.get("sync", "data"),
        )
        # Scheduler side.
        self._reqs: dict[str, _ReqState] = {}
        self._pending: dict[str, "Request"] = {}  # seen by get_num_new_matched_tokens
        self._hits: dict[str, tuple[int, int]] = {}  # req -> (first block, end block) to load
        # Worker side.
        self._pinned_cap = int(extra.get("pinned_staging_bytes", 1 << 30))
        self._layers: PagedLayers | None = None
        self._load: PendingLoad | None = None
        self._load_transfers: list[tuple[list[int], int]] = []  # (block ids, first staging row)
        self._save: PendingSave | None = None
        self._load_errors: set[int] = set()
        # Worker-side counters (stats()); the model runner's thread is the only writer.
        self._counts = dict(loaded_blocks=0, load_error_blocks=0, saved_blocks=0,
                            save_failed_blocks=0)

    # ---- scheduler side --------------------------------------------------------------------------
    def get_num_new_matched_tokens(
        self, request: "Request", num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        hashes = list(request.block_hashes)
        # vLLM must compute at least one token, so a whole-prompt hit loads one block less.
        usable = min(len(hashes), (request.num_tokens - 1) // self._block_size)
        hits = self._store.batch_exists(hashes[:usable]) if usable > 0 else 0
        first = num_computed_tokens // self._block_size
        self._pending[request.request_id] = request
        if hits <= first:
            self._hits.pop(request.request_id, None)
            return 0, False
        self._hits[request.request_id] = (first, hits)
        return hits * self._block_size - num_computed_tokens, False

    def update_state_after_alloc(
        self, request: "Request", blocks: "KVCacheBlocks", num_external_tokens: int
    ) -> None:
        if num_external_tokens == 0:
            self._hits.pop(request.request_id, None)

    def build_connector_meta(self, scheduler_output: "SchedulerOutput") -> KVConnectorMetadata:
        meta = DualPathConnectorMetadata()
        scheduled: list[tuple[str, int]] = []  # (req id, tokens computed after this step)
        for new in scheduler_output.scheduled_new_reqs:
            request = self._pending.pop(new.req_id, None)
            if request is None:
                continue
            block_ids = list(new.block_ids[0])
            state = _ReqState(request, block_ids, saved=0)
            span = self._hits.pop(new.req_id, None)
            if span is not None:
                first, end = span
                meta.loads.append(BlockTransfer(
                    new.req_id, block_ids[first:end], list(request.block_hashes[first:end])))
                state.saved = end
            self._reqs[new.req_id] = state
            scheduled.append((new.req_id, new.num_computed_tokens
                              + scheduler_output.num_scheduled_tokens[new.req_id]))
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            state = self._reqs.get(req_id)
            if state is None:
                continue
            new_ids = cached.new_block_ids[i]
            if req_id in cached.resumed_req_ids:  # preempted and resumed: a new block table
                state.block_ids = list(new_ids[0]) if new_ids is not None else []
                state.saved = 0
            elif new_ids is not None:
                state.block_ids.extend(new_ids[0])
            scheduled.append((req_id, cached.num_computed_tokens[i]
                              + scheduler_output.num_scheduled_tokens[req_id]))
        for req_id, computed in scheduled:
            state = self._reqs[req_id]
            full = min(computed // self._block_size, len(state.request.block_hashes),
                       len(state.block_ids))
            if full > state.saved:
                hashes = list(state.request.block_hashes[state.saved:full])
                ids = state.block_ids[state.saved:full]
                present = self._store.batch_is_exist(hashes)
                keep = [j for j, p in enumerate(present) if not p]
                if keep:
                    meta.saves.append(BlockTransfer(
                        req_id, [ids[j] for j in keep], [hashes[j] for j in keep]))
                state.saved = full
        return meta

    def update_connector_output(self, connector_output: "KVConnectorOutput") -> None:
        # Blocks that failed to load are recomputed by vLLM (policy "recompute"). The tiers dropped
        # the copies that failed their checksum (the pool deletes them, the persistent tier
        # quarantines them), so mark the request's blocks from the first failed one unsaved again:
        # the step that recomputes them stores the dropped ones afresh (batch_is_exist skips the
        # ones still present). Without this a corrupt block stays missing for good.
        invalid = connector_output.invalid_block_ids
        if not invalid:
            return
        for state in self._reqs.values():
            for i, block_id in enumerate(state.block_ids[:state.saved]):
                if block_id in invalid:
                    state.saved = i
                    break

    def request_finished(
        self, request: "Request", block_ids: list[int]
    ) -> tuple[bool, dict[str, Any] | None]:
        # Saves complete within the step (wait_for_save), so the blocks can be freed now.
        self._reqs.pop(request.request_id, None)
        self._pending.pop(request.request_id, None)
        self._hits.pop(request.request_id, None)
        return False, None

    def request_finished_all_groups(
        self, request: "Request", block_ids: tuple[list[int], ...]
    ) -> tuple[bool, dict[str, Any] | None]:
        return self.request_finished(request, list(block_ids[0]) if block_ids else [])

    # ---- worker side -----------------------------------------------------------------------------
    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        """Per-layer paged caches, blocks at dim 0 (vLLM's standardized [B, H, N, C] views)."""
        self._layers = PagedLayers(kv_caches, pinned_cap_bytes=self._pinned_cap)
        if self._layers.device.type == "cpu":
            # vLLM's CPU attention uses AMX without asking for it; with this connector a fresh
            # engine's first forward can be a whole-prefix hit that runs no large GEMM first (which
            # is what would have asked), and would die with SIGILL (request_amx_permission).
            if request_amx_permission():
                logger.info("dualpath: AMX permission requested for vLLM's CPU attention")

    def start_load_kv(self, forward_context: "ForwardContext", **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        assert isinstance(meta, DualPathConnectorMetadata)
        if self._load is not None:  # an earlier step's load that no layer waited for
            self._resolve_load()
        if not meta.loads:
            return
        layers = self._check_registered()
        hashes = [h for t in meta.loads for h in t.hashes]
        self._load = layers.start_load(self._store, hashes)
        self._load_transfers, row = [], 0
        for t in meta.loads:
            self._load_transfers.append((t.block_ids, row))
            row += len(t.block_ids)

    def wait_for_layer_load(self, layer_name: str) -> None:
        # The first layer's wait waits for the batch get and copies every layer's pages (on a GPU:
        # asynchronously on the current stream, so later layers' kernels are ordered after it).
        if self._load is not None:
            self._resolve_load()

    def _resolve_load(self) -> None:
        load, self._load = self._load, None
        errors = load.resolve(self._load_transfers)
        self._load_errors |= errors
        planned = sum(len(ids) for ids, _ in self._load_transfers)
        self._counts["loaded_blocks"] += planned - len(errors)
        self._counts["load_error_blocks"] += len(errors)

    def save_kv_layer(
        self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any, **kwargs: Any
    ) -> None:
        meta = self._get_connector_metadata()
        assert isinstance(meta, DualPathConnectorMetadata)
        if not meta.saves:
            return
        layers = self._check_registered()
        if self._save is None:
            ids = [b for t in meta.saves for b in t.block_ids]
            hashes = [h for t in meta.saves for h in t.hashes]
            self._save = layers.start_save(ids, hashes)
        self._save.add_layer(layer_name, kv_layer)

    def wait_for_save(self) -> None:
        save, self._save = self._save, None
        if save is None:
            return
        try:
            rcs = save.finish(self._store)
        except RuntimeError as e:  # a layer never reported: never store a block missing a layer
            logger.warning("%s; %d blocks not saved", e, len(save.block_ids))
            return
        failed = [dualpath.error_name(rc) for rc in rcs if rc != 0]
        self._counts["saved_blocks"] += len(rcs) - len(failed)
        self._counts["save_failed_blocks"] += len(failed)
        if failed:
            logger.warning("dualpath: %d of %d blocks not saved (%s)", len(failed), len(rcs),
                           ", ".join(sorted(set(failed))))

    def get_block_ids_with_load_errors(self) -> set[int]:
        errors, self._load_errors = self._load_errors, set()
        return errors

    def stats(self) -> dict[str, Any]:
        """Worker side: blocks loaded into the paged cache, blocks that failed to load (reported
        to vLLM by ``get_block_ids_with_load_errors``), blocks saved and saves that failed, the
        size of one stored block (``block_bytes``: all layers' pages), and
        ``store``: the ``KVStore.stats()`` of this connector's store attachment (its pool and
        store hits, misses, ``corrupt`` = copies that failed their checksum)."""
        block_bytes = self._layers.block_bytes if self._layers is not None else 0
        return {**self._counts, "block_bytes": block_bytes, "store": self._store.stats()}

    def shutdown(self) -> None:
        self._store.close()

    def _check_registered(self) -> PagedLayers:
        if self._layers is None:
            raise RuntimeError("DualPathConnector: register_kv_caches was not called")
        return self._layers
