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
(default: the model name, dtype and block size), ``sync`` (``none|data|full``, default ``data``),
``write_behind`` (default false: saves are waited for in the step).

``"backend": "cluster"`` (default ``"tiers"``): the store is ``dualpath.ClusterStore``, the
distributed store's DRAM tiers, instead of this node's tiers (keys ``etcd``, ``cluster``,
``tls_cert``/``tls_key``/``tls_ca`` or ``insecure``, ``transfer_token_file``, ...;
``dualpath.integrations._backend``), so instances on different nodes share KV without a shared
file system. The verbs used below are the same over both.

Prefill/decode disaggregation (DualPath §4.1; ``kv_role`` ``kv_producer`` / ``kv_consumer``): with
``transfer_listen`` (and ``transfer_token_file`` or ``transfer_insecure``) the instance moves KV to
and from other instances over dualpath's transfer engine, for requests whose
``kv_transfer_params`` carry ``{"dualpath": {...}}`` (set by ``python -m dualpath.proxy``); the
worker side of the protocol is ``dualpath.integrations._pd``. docs/integrations/vllm.md.
"""

from __future__ import annotations

import concurrent.futures
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
from dualpath.integrations._backend import ConfigError, backend, open_store
from dualpath.integrations._pages import (
    PagedLayers,
    PendingLoad,
    PendingSave,
    request_amx_permission,
)
from dualpath.integrations._pd import PdWorker, pid_tagged

try:  # vLLM >= 0.32: receive failures by request (failed_recving)
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorTransferResults
except ImportError:  # pragma: no cover - older vLLM
    KVConnectorTransferResults = None

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
class PdRecv:
    """D: receive the prompt's KV of [local, prompt_tokens) into block_ids (DE read: the hit
    blocks [local, hit) from the store first, by load_hashes)."""

    req_id: str
    params: dict
    block_ids: list[int]
    local: int
    prompt_tokens: int
    load_hashes: list[bytes]
    fail: str = ""  # set: fail the receive at once (e.g. the service hashed other keys)


@dataclass
class PdPrefill:
    """P: a prefill request of the P/D protocol. pull: DE read's [first, end) from D into
    block_ids; load_hashes: PE read's stored hit blocks to load into block_ids; computed: the
    prompt's KV is complete after this step (push it)."""

    req_id: str
    params: dict
    prompt_tokens: int
    block_ids: list[int]
    pull: tuple[int, int] | None = None
    load_hashes: list[bytes] = field(default_factory=list)
    computed: bool = False


@dataclass
class DualPathConnectorMetadata(KVConnectorMetadata):
    loads: list[BlockTransfer] = field(default_factory=list)
    saves: list[BlockTransfer] = field(default_factory=list)
    pd_recv: list[PdRecv] = field(default_factory=list)
    pd_prefill: list[PdPrefill] = field(default_factory=list)
    idle: bool = False  # no token is scheduled in this step (the worker may wait for transfers)


@dataclass
class _ReqState:
    """Scheduler-side bookkeeping of one running request."""

    request: "Request"
    block_ids: list[int]
    saved: int  # leading full blocks already stored (loaded ones count)
    pd_prefill: dict | None = None  # P/D prefill params: saves nothing, pushes its prompt's KV
    pushed: bool = False


def _pd_params(request: "Request") -> dict | None:
    """The P/D part of a request's kv_transfer_params (set by dualpath's proxy), or None."""
    params = getattr(request, "kv_transfer_params", None)
    if not isinstance(params, dict):
        return None
    pd = params.get("dualpath")
    return pd if isinstance(pd, dict) and pd.get("role") in ("prefill", "decode") else None


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
        # Prefill/decode disaggregation (docs/integrations/vllm.md): on when the instance
        # listens for transfers. kv_role says what it is for; a kv_both instance may be either.
        self._pd_listen = extra.get("transfer_listen")
        self._backend = backend(extra)
        if self._pd_listen and self._backend == "cluster":
            # The scheduler service places P/D requests by probing the node tiers' keys; over the
            # cluster store its hit counts would be wrong. Not wired yet: refuse, don't misplace.
            raise ConfigError("transfer_listen", "P/D disaggregation runs over the node tiers "
                                                 "only; not with \"backend\": \"cluster\"")
        # The store: this node's tiers (KVStore) or the distributed store (ClusterStore), chosen
        # by "backend" (dualpath.integrations._backend); the verbs below are the same.
        self._store = open_store(extra, extra.get("namespace") or _namespace(vllm_config, rank))
        self._pd_timeout = float(extra.get("transfer_timeout_s", 30.0))
        if self._pd_listen:
            algo = getattr(vllm_config.cache_config, "prefix_caching_hash_algo", "sha256_cbor")
            if algo != "sha256_cbor":
                raise ValueError(
                    "DualPathConnector with transfer_listen (P/D): vLLM must hash blocks with "
                    f"--prefix-caching-hash-algo sha256_cbor (got {algo!r}); the scheduler "
                    "service probes the store with those keys")
            if bool(extra.get("transfer_insecure")) == bool(extra.get("transfer_token_file")):
                raise ValueError(
                    "DualPathConnector with transfer_listen (P/D): give transfer_token_file (the "
                    "cluster's transfer token, an owner-only file) or transfer_insecure: true")
            if not 0 < self._pd_timeout <= 3600:
                raise ValueError(f"transfer_timeout_s = {self._pd_timeout}: must be in (0, 3600]")
        # Scheduler side.
        self._reqs: dict[str, _ReqState] = {}
        self._pending: dict[str, "Request"] = {}  # seen by get_num_new_matched_tokens
        self._hits: dict[str, tuple[int, int]] = {}  # req -> (first block, end block) to load
        self._pd_wait: dict[str, dict] = {}  # req -> P/D state until its blocks are allocated
        self._pd_meta_recv: list[PdRecv] = []
        self._pd_meta_prefill: list[PdPrefill] = []
        self._pd_pushed: set[str] = set()  # P requests whose push the worker was told to make
        # Worker side.
        self._pinned_cap = int(extra.get("pinned_staging_bytes", 1 << 30))
        self._layers: PagedLayers | None = None
        self._load: PendingLoad | None = None
        self._load_transfers: list[tuple[list[int], int]] = []  # (block ids, first staging row)
        self._load_reqs: list[str] = []  # the request of each transfer
        self._save: PendingSave | None = None
        self._load_errors: set[int] = set()
        self._pd: PdWorker | None = None
        self._pd_extra = extra
        # write_behind: a step's save is handed to a thread of its own instead of being waited
        # for in wait_for_save (the rows are copied out of the cache first), so a slow store never
        # stalls the step; DualPath's decode instances write behind this way. Not the store's
        # async pool: queued writes must never delay a load.
        self._write_behind = bool(extra.get("write_behind", False))
        self._save_executor = (concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="dualpath-write-behind") if self._write_behind else None)
        self._saves_in_flight: list[tuple[Any, int]] = []  # (Future, blocks)
        # Worker-side counters (stats()); the model runner's thread is the only writer.
        self._counts = dict(loaded_blocks=0, load_error_blocks=0, saved_blocks=0,
                            save_failed_blocks=0)

    # ---- scheduler side --------------------------------------------------------------------------
    def get_num_new_matched_tokens(
        self, request: "Request", num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        pd = _pd_params(request) if self._pd_listen else None
        if pd is not None:
            return self._pd_matched(request, num_computed_tokens, pd)
        return self._store_matched(request, num_computed_tokens)

    def _pd_matched(self, request: "Request", num_computed_tokens: int,
                    pd: dict) -> tuple[int | None, bool]:
        """P/D requests. D: the whole prompt beyond its local hit arrives asynchronously (from P,
        and DE read: partly from its own store load first). P: PE read loads the hit from the
        store like any request; DE read receives it asynchronously from D."""
        req_id = request.request_id
        fail = ""
        first_hash = pd.get("first_hash")
        if first_hash and request.block_hashes and bytes(request.block_hashes[0]).hex() != \
                first_hash:
            # The service hashed the prompt with another seed or algorithm: its hit and every
            # block name would be wrong. Fail the request rather than load wrong KV.
            fail = ("the scheduler service's block hashes differ from this instance's (check "
                    "control serve --hash-seed against PYTHONHASHSEED and "
                    "--prefix-caching-hash-algo sha256_cbor)")
        self._pending[req_id] = request
        n = request.num_tokens
        if pd["role"] == "decode":
            if n - num_computed_tokens <= 0:
                return 0, False
            self._pd_wait[req_id] = dict(params=pd, local=num_computed_tokens, fail=fail)
            return n - num_computed_tokens, True
        side = pd.get("side", "prefill")
        if fail:  # no load, compute everything; D fails the request
            self._pd_wait[req_id] = dict(params=pd, local=num_computed_tokens, pull=None)
            return 0, False
        if side != "decode":
            # PE read: P loads the stored hit itself, asynchronously (its engine computes other
            # requests meanwhile), at most the hit the service placed and counted in P's read
            # queue, even if more blocks landed in the store since.
            hits, _ = self._store_matched(request, num_computed_tokens,
                                          limit=int(pd.get("hit_tokens", 0)))
            self._hits.pop(req_id, None)  # not the synchronous load path
            end = num_computed_tokens + (hits or 0)
            self._pd_wait[req_id] = dict(params=pd, local=num_computed_tokens, pull=None,
                                         load=(num_computed_tokens, end) if hits else None)
            return (hits, True) if hits else (0, False)
        usable = min(len(request.block_hashes), (n - 1) // self._block_size)
        hit = min(int(pd.get("hit_tokens", 0)), usable * self._block_size)
        hit -= hit % self._block_size
        if hit <= num_computed_tokens:
            self._pd_wait[req_id] = dict(params=pd, local=num_computed_tokens, pull=None)
            return 0, False
        self._pd_wait[req_id] = dict(params=pd, local=num_computed_tokens,
                                     pull=(num_computed_tokens, hit))
        return hit - num_computed_tokens, True

    def _store_matched(self, request: "Request", num_computed_tokens: int,
                       limit: int | None = None) -> tuple[int | None, bool]:
        hashes = list(request.block_hashes)
        # vLLM must compute at least one token, so a whole-prompt hit loads one block less.
        usable = min(len(hashes), (request.num_tokens - 1) // self._block_size)
        if limit is not None:
            usable = min(usable, limit // self._block_size)
        hits = self._exists(hashes[:usable]) if usable > 0 else 0
        first = num_computed_tokens // self._block_size
        self._pending[request.request_id] = request
        if hits <= first:
            self._hits.pop(request.request_id, None)
            return 0, False
        self._hits[request.request_id] = (first, hits)
        return hits * self._block_size - num_computed_tokens, False

    def _exists(self, hashes: list) -> int:
        """Leading hashes present in the store; 0 when the store cannot answer (a cluster store
        whose master is unreachable past its retry deadline): a miss, the engine computes."""
        try:
            return self._store.batch_exists(hashes)
        except dualpath.Error as e:
            logger.warning("dualpath: %s store lookup failed, treated as a miss: %s",
                           self._backend, e)
            return 0

    def update_state_after_alloc(
        self, request: "Request", blocks: "KVCacheBlocks", num_external_tokens: int
    ) -> None:
        if num_external_tokens == 0:
            self._hits.pop(request.request_id, None)
        wait = self._pd_wait.get(request.request_id)
        if wait is None:
            return
        block_ids = list(blocks.get_block_ids()[0])
        pd, local = wait["params"], wait["local"]
        n = request.num_tokens
        if pd["role"] == "decode":
            if num_external_tokens == 0:
                return
            del self._pd_wait[request.request_id]
            hashes: list[bytes] = []
            if pd.get("side") == "decode":
                # DE read: D loads the stored prefix [local, hit) itself (its storage NIC).
                usable = min(len(request.block_hashes), n // self._block_size)
                hit = min(int(pd.get("hit_tokens", 0)), usable * self._block_size)
                hashes = [bytes(h) for h in
                          request.block_hashes[local // self._block_size:hit // self._block_size]]
            self._pd_meta_recv.append(PdRecv(request.request_id, pd, block_ids, local, n, hashes,
                                             wait.get("fail", "")))
            return
        del self._pd_wait[request.request_id]
        entry = PdPrefill(request.request_id, pd, request.num_prompt_tokens, [])
        span = wait.get("pull") or wait.get("load")
        if span is not None and num_external_tokens > 0:
            first, end = span
            i0, i1 = first // self._block_size, end // self._block_size
            entry.block_ids = block_ids[i0:i1]
            if wait.get("pull") is not None:
                entry.pull = (first, end)
            else:
                entry.load_hashes = [bytes(h) for h in request.block_hashes[i0:i1]]
        self._pd_meta_prefill.append(entry)

    def build_connector_meta(self, scheduler_output: "SchedulerOutput") -> KVConnectorMetadata:
        meta = DualPathConnectorMetadata()
        meta.idle = scheduler_output.total_num_scheduled_tokens == 0
        meta.pd_recv, self._pd_meta_recv = self._pd_meta_recv, []
        meta.pd_prefill, self._pd_meta_prefill = self._pd_meta_prefill, []
        scheduled: list[tuple[str, int]] = []  # (req id, tokens computed after this step)
        for new in scheduler_output.scheduled_new_reqs:
            request = self._pending.pop(new.req_id, None)
            if request is None:
                continue
            block_ids = list(new.block_ids[0])
            state = _ReqState(request, block_ids, saved=0)
            if self._pd_listen:
                pd = _pd_params(request)
                if pd is not None and pd["role"] == "prefill":
                    state.pd_prefill = pd
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
            if state.pd_prefill is not None:
                # P saves nothing (D writes every new block behind); once its prompt's KV is
                # complete after this step, the worker pushes it to D.
                if not state.pushed and computed >= state.request.num_prompt_tokens:
                    state.pushed = True
                    self._pd_pushed.add(req_id)
                    meta.pd_prefill.append(PdPrefill(req_id, state.pd_prefill,
                                                     state.request.num_prompt_tokens,
                                                     list(state.block_ids), computed=True))
                continue
            full = min(computed // self._block_size, len(state.request.block_hashes),
                       len(state.block_ids))
            if full > state.saved:
                hashes = list(state.request.block_hashes[state.saved:full])
                ids = state.block_ids[state.saved:full]
                try:
                    present = self._store.batch_is_exist(hashes)
                except dualpath.Error as e:  # unreachable: try the puts (they report failure)
                    logger.warning("dualpath: %s store lookup failed: %s", self._backend, e)
                    present = [False] * len(hashes)
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
        # Saves complete within the step (wait_for_save), so the blocks can be freed now. A P/D
        # prefill request whose push the worker was told to make keeps its blocks until the
        # worker reports the push finished (finished_sending): the NIC reads them.
        self._reqs.pop(request.request_id, None)
        self._pending.pop(request.request_id, None)
        self._hits.pop(request.request_id, None)
        self._pd_wait.pop(request.request_id, None)
        if request.request_id in self._pd_pushed:
            self._pd_pushed.discard(request.request_id)
            return True, None
        return False, None

    def request_finished_all_groups(
        self, request: "Request", block_ids: tuple[list[int], ...]
    ) -> tuple[bool, dict[str, Any] | None]:
        return self.request_finished(request, list(block_ids[0]) if block_ids else [])

    # ---- worker side -----------------------------------------------------------------------------
    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        """Per-layer paged caches, blocks at dim 0 (vLLM's standardized [B, H, N, C] views)."""
        self._layers = PagedLayers(kv_caches, pinned_cap_bytes=self._pinned_cap)
        if self._pd_listen:
            extra = self._pd_extra
            self._pd = PdWorker(
                self._layers, self._store, block_size=self._block_size, listen=self._pd_listen,
                token_file=extra.get("transfer_token_file") or None,
                insecure=bool(extra.get("transfer_insecure")),
                ucx_tls=extra.get("transfer_ucx_tls", "tcp"), timeout_s=self._pd_timeout,
                stats_path=pid_tagged(extra.get("stats_path")))
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
        if self._pd is not None:
            for r in meta.pd_recv:
                self._pd.start_recv(r.req_id, r.params, r.block_ids, r.local, r.prompt_tokens,
                                    r.load_hashes, r.fail)
            for p in meta.pd_prefill:
                if p.pull is not None:
                    self._pd.start_pull(p.req_id, p.params, p.prompt_tokens, p.pull[0],
                                        p.pull[1], p.block_ids)
                elif p.load_hashes:
                    self._pd.start_load(p.req_id, p.params, p.prompt_tokens, p.block_ids,
                                        p.load_hashes)
                elif not p.computed:
                    self._pd.start_send(p.req_id, p.params, p.prompt_tokens)
        if not meta.loads:
            return
        layers = self._check_registered()
        hashes = [h for t in meta.loads for h in t.hashes]
        self._load = layers.start_load(self._store, hashes)
        self._load_transfers, row = [], 0
        self._load_reqs = [t.req_id for t in meta.loads]
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
        if self._pd is not None:
            # Store reads per P/D request (a PE-read prefill loads its hit here).
            loaded = {req: sum(1 for b in ids if b not in errors)
                      for req, (ids, _) in zip(self._load_reqs, self._load_transfers)}
            self._pd.add_store_reads(loaded)
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
        self._pd_push_computed()
        self._reap_saves(block=False)
        save, self._save = self._save, None
        if save is None:
            return
        try:
            if self._write_behind:
                self._saves_in_flight.append((save.finish_behind(self._store,
                                                                 self._save_executor),
                                              len(save.block_ids)))
                return
            rcs = save.finish(self._store)
        except dualpath.Error as e:  # the store failed the whole batch: those blocks stay misses
            logger.warning("dualpath: put of %d blocks failed: %s", len(save.block_ids), e)
            self._counts["save_failed_blocks"] += len(save.block_ids)
            return
        except RuntimeError as e:  # a layer never reported: never store a block missing a layer
            logger.warning("%s; %d blocks not saved", e, len(save.block_ids))
            return
        self._count_saved(rcs)

    def _reap_saves(self, block: bool) -> None:
        """Accounts the write-behind puts that finished (all of them, waiting, when `block`)."""
        pending = []
        for handle, n in self._saves_in_flight:
            if block or handle.done():
                try:
                    self._count_saved(handle.result())
                except Exception as e:  # the store failed the batch: those blocks stay misses
                    logger.warning("dualpath: write-behind of %d blocks failed: %s", n, e)
                    self._counts["save_failed_blocks"] += n
            else:
                pending.append((handle, n))
        self._saves_in_flight = pending

    def _count_saved(self, rcs: list[int]) -> None:
        failed = [dualpath.error_name(rc) for rc in rcs if rc != 0]
        self._counts["saved_blocks"] += len(rcs) - len(failed)
        self._counts["save_failed_blocks"] += len(failed)
        if failed:
            logger.warning("dualpath: %d of %d blocks not saved (%s)", len(failed), len(rcs),
                           ", ".join(sorted(set(failed))))

    def _pd_push_computed(self) -> None:
        # After the forward pass: the prompts completed in it go to their decode instances.
        if self._pd is None:
            return
        meta = self._get_connector_metadata()
        for p in getattr(meta, "pd_prefill", []):
            if p.computed:
                self._pd.computed(p.req_id, p.params, p.prompt_tokens, p.block_ids)

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        sending, recving, _ = self._pd_poll(finished_req_ids)
        return sending or None, recving or None

    def get_transfer_results(self, finished_req_ids: set[str]):
        sending, recving, failed = self._pd_poll(finished_req_ids)
        return KVConnectorTransferResults(finished_sending=sending, finished_recving=recving,
                                          failed_recving=failed)

    def _pd_poll(self, finished_req_ids: set[str]) -> tuple[set[str], set[str], set[str]]:
        if self._pd is None:
            return set(), set(), set()
        self._pd.finished(set(finished_req_ids))
        meta = self._get_connector_metadata()
        # An idle step (nothing scheduled, transfers pending) waits briefly for them instead of
        # letting the engine spin through empty steps.
        wait = 0.002 if getattr(meta, "idle", False) and self._pd.busy() else 0.0
        sending, recving, failed, invalid = self._pd.poll(wait)
        self._load_errors |= invalid
        return sending, recving, failed

    def get_block_ids_with_load_errors(self) -> set[int]:
        errors, self._load_errors = self._load_errors, set()
        return errors

    def stats(self) -> dict[str, Any]:
        """Worker side: blocks loaded into the paged cache, blocks that failed to load (reported
        to vLLM by ``get_block_ids_with_load_errors``), blocks saved and saves that failed, the
        size of one stored block (``block_bytes``: all layers' pages), and
        ``store``: the ``stats()`` of this connector's store: ``KVStore`` (pool and store hits,
        misses, ``corrupt`` = copies that failed their checksum) or ``ClusterStore``
        (``hits_local``, ``hits_remote``, ``misses``, ``rejected``, ``puts_ok``, ...)."""
        self._reap_saves(block=False)
        block_bytes = self._layers.block_bytes if self._layers is not None else 0
        out = {**self._counts, "block_bytes": block_bytes, "store": self._store.stats()}
        if self._pd is not None:
            out["pd"] = dict(self._pd.counts, address=self._pd.address)
        return out

    def shutdown(self) -> None:
        if self._pd is not None:
            self._pd.close()
        self._reap_saves(block=True)
        if self._save_executor is not None:
            self._save_executor.shutdown(wait=True)
        self._store.close()

    def _check_registered(self) -> PagedLayers:
        if self._layers is None:
            raise RuntimeError("DualPathConnector: register_kv_caches was not called")
        return self._layers
