"""Moving paged-cache pages between an engine's KV caches (GPU or CPU) and ``dualpath.KVStore``.

No engine import here: the vLLM connector drives these classes, and the GPU tests drive them
directly with CUDA caches (tests/python/test_pages.py), since vLLM itself cannot be installed on
the GPU test machine.

One stored value per block is the Full Block: every layer's page of that block, in layer order
(DualPath's Full Block, docs/kv.md), each page as the engine lays it out.

GPU caches: host staging is pinned and reused across steps, so the copies between it and the GPU
are asynchronous on the current CUDA stream (ordered with the model's kernels on that stream);
a buffer is reused only after the copies that used it have finished (a CUDA event).
  - load: the store fills pinned rows [block, Full Block]; then, in chunks of at most
    ``gpu_chunk_bytes``, one host-to-device copy per chunk and one scatter per layer on the GPU;
  - save: per layer, the GPU gathers the pages of the blocks to save and copies them to a pinned
    layer-major buffer [layer, block, page] without waiting; ``finish`` waits once, lays the pages
    out block-major and puts them.
CPU caches (tests, CPU engines): the same steps with plain host tensors.
"""

from __future__ import annotations

from typing import Sequence

import torch

from dualpath import _core

__all__ = ["PagedLayers", "PendingLoad", "PendingSave", "amx_permitted", "request_amx_permission"]

_DEFAULT_PINNED_CAP = 1 << 30  # bytes of pinned staging kept for reuse, per direction
_DEFAULT_GPU_CHUNK = 256 << 20  # bytes of one load chunk on the GPU


# Linux x86-64 arch_prctl(2): AMX tile data is a dynamically enabled XSAVE feature; a process must
# request it once (ARCH_REQ_XCOMP_PERM) before its first AMX instruction, or that instruction
# raises SIGILL. <asm/prctl.h>, <asm/unistd_64.h>.
_SYS_ARCH_PRCTL = 158
_ARCH_GET_XCOMP_PERM = 0x1022
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18


def _arch_prctl(code: int, arg) -> int:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if isinstance(arg, int):
        arg = ctypes.c_long(arg)  # a full register: syscall(2) is variadic
    return libc.syscall(ctypes.c_long(_SYS_ARCH_PRCTL), ctypes.c_long(code), arg)


def amx_permitted() -> bool:
    """Whether this process may execute AMX tile instructions (Linux x86-64; False elsewhere)."""
    import ctypes
    import platform

    if platform.system() != "Linux" or platform.machine() != "x86_64":
        return False
    mask = ctypes.c_uint64(0)
    if _arch_prctl(_ARCH_GET_XCOMP_PERM, ctypes.byref(mask)) != 0:
        return False  # a kernel without dynamic XSAVE features (before 5.16): no AMX either
    return bool(mask.value >> _XFEATURE_XTILEDATA & 1)


def request_amx_permission() -> bool:
    """Asks Linux for this process's AMX permission if the CPU has AMX; returns whether AMX may
    now be used.

    Why: vLLM's CPU attention kernel uses AMX tiles on CPUs that have them (bf16, blocks of a
    multiple of 32) but never requests the permission; it works only because oneDNN requests it
    the first time a large bf16 GEMM runs. When a fresh engine's first forward pass loads its
    whole prefix from a KV connector, only a few tokens are computed, no large GEMM runs first,
    and the attention kernel dies with SIGILL. Asking here, before any forward pass, makes that
    first request work. Idempotent and cheap; a no-op on CPUs without AMX."""
    import platform

    if platform.system() != "Linux" or platform.machine() != "x86_64":
        return False
    cpu = getattr(torch, "cpu", None)
    supported = getattr(cpu, "_is_amx_tile_supported", None)
    if supported is not None and not supported():
        return False
    init = getattr(getattr(torch._C, "_cpu", None), "_init_amx", None)
    if init is not None and init():  # torch's own request (what oneDNN would do)
        return True
    _arch_prctl(_ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA)  # older torch: ask the kernel directly
    return amx_permitted()


class _Staging:
    """One reusable host buffer; pinned when the caches are on a GPU."""

    def __init__(self, pinned: bool, cap_bytes: int) -> None:
        self._pinned = pinned
        self._cap = cap_bytes
        self._buf: torch.Tensor | None = None
        self._event = None  # torch.cuda.Event of the last GPU copy that used the buffer

    def acquire(self, nbytes: int) -> torch.Tensor:
        """A flat uint8 host tensor of ``nbytes``, free of earlier GPU copies."""
        self.wait()
        if nbytes > self._cap:  # too large to keep: a one-off buffer, pinned if possible
            return torch.empty(nbytes, dtype=torch.uint8, pin_memory=self._pinned)
        if self._buf is None or self._buf.numel() < nbytes:
            size = min(self._cap, max(nbytes, 2 * (0 if self._buf is None else self._buf.numel())))
            self._buf = None
            self._buf = torch.empty(size, dtype=torch.uint8, pin_memory=self._pinned)
        return self._buf[:nbytes]

    def wait(self) -> None:
        """Waits for the GPU copies recorded by ``fence``."""
        if self._event is not None:
            self._event.synchronize()
            self._event = None

    def fence(self, device: torch.device) -> None:
        """Records that GPU copies queued so far on the current stream use the buffer."""
        if device.type == "cuda":
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(device))
            self._event = event


class PagedLayers:
    """The per-layer paged caches of one worker: blocks at dim 0, one device for all layers."""

    def __init__(
        self,
        kv_caches: dict[str, torch.Tensor],
        pinned_cap_bytes: int = _DEFAULT_PINNED_CAP,
        gpu_chunk_bytes: int = _DEFAULT_GPU_CHUNK,
    ) -> None:
        if not kv_caches:
            raise ValueError("PagedLayers: no KV cache layers")
        devices = {kv.device for kv in kv_caches.values()}
        if len(devices) != 1:
            raise ValueError(f"PagedLayers: layers on several devices {sorted(map(str, devices))}")
        self.device = devices.pop()
        self.caches = dict(kv_caches)
        self.names = list(self.caches)
        self.offsets: dict[str, tuple[int, int]] = {}  # layer -> (offset, bytes) in a Full Block
        offset = 0
        for name, kv in self.caches.items():
            page = kv[0].numel() * kv.element_size()
            self.offsets[name] = (offset, page)
            offset += page
        self.block_bytes = offset
        pinned = self.device.type == "cuda"
        self._load_staging = _Staging(pinned, pinned_cap_bytes)
        self._save_staging = _Staging(pinned, pinned_cap_bytes)
        self._gpu_chunk_rows = max(1, gpu_chunk_bytes // max(1, self.block_bytes))

    # ---- load --------------------------------------------------------------------------------
    def start_load(self, store, hashes: Sequence[bytes], private: bool = False) -> "PendingLoad":
        """Starts one asynchronous batch get of the Full Blocks into host staging rows. `private`:
        into a buffer of its own rather than the reused staging (a load that stays in flight
        across steps, e.g. a P/D decode instance's store load, must not share it with the next
        step's load)."""
        nbytes = len(hashes) * self.block_bytes
        if private:
            flat = torch.empty(nbytes, dtype=torch.uint8, pin_memory=self.device.type == "cuda")
        else:
            flat = self._load_staging.acquire(nbytes)
        rows = flat.view(len(hashes), self.block_bytes)
        return PendingLoad(self, rows, store.batch_get_async(list(hashes), list(rows)))

    def _scatter(self, host_rows: torch.Tensor, rows: list[int], block_ids: list[int]) -> None:
        """Copies loaded staging rows into the caches' blocks, every layer. On a GPU, staging rows
        go up in chunks of whole contiguous rows (asynchronous from pinned memory), and the
        loaded ones are picked and scattered there."""
        rows_t = torch.tensor(rows, dtype=torch.long)
        ids_t = torch.tensor(block_ids, dtype=torch.long)
        step = self._gpu_chunk_rows if self.device.type == "cuda" else host_rows.shape[0]
        for a in range(0, host_rows.shape[0], step):
            b = min(host_rows.shape[0], a + step)
            sel = (rows_t >= a) & (rows_t < b)
            if not bool(sel.any()):
                continue
            chunk = host_rows[a:b].to(self.device, non_blocking=True)
            r = (rows_t[sel] - a).to(self.device)
            ids = ids_t[sel].to(self.device)
            for name in self.names:
                kv = self.caches[name]
                off, size = self.offsets[name]
                pages = chunk[r, off:off + size].view(kv.dtype)  # advanced index: a copy
                kv.index_copy_(0, ids, pages.view(-1, *kv.shape[1:]))
        self._load_staging.fence(self.device)

    # ---- save --------------------------------------------------------------------------------
    def start_save(self, block_ids: Sequence[int], hashes: Sequence[bytes]) -> "PendingSave":
        n = len(block_ids)
        flat = self._save_staging.acquire(n * self.block_bytes)
        return PendingSave(self, list(block_ids), list(hashes), flat)


class PendingLoad:
    """One step's batch get; ``resolve`` waits for it once and scatters every loaded block."""

    def __init__(self, layers: PagedLayers, host_rows: torch.Tensor, handle) -> None:
        self._layers = layers
        self._rows = host_rows
        self._handle = handle
        self.done = False

    def wait(self) -> list[int]:
        """The batch get's per-key results (bytes read, or a negative code)."""
        return self._handle.wait()

    def done_now(self) -> bool:
        """Whether the batch get has finished (resolve will not block on it)."""
        return self._handle.done()

    def resolve(self, transfers: Sequence[tuple[Sequence[int], int]]) -> set[int]:
        """``transfers``: per request (its block ids, in order; its first staging row).

        A block that missed (absent, or its checksum failed) and every later block of the same
        request are never copied and are returned as load errors: the engine recomputes from the
        first of them. The rest is copied into the caches. Returns the error block ids."""
        try:
            rcs = self.wait()
        except _core.Error:
            # The store could not answer at all (a cluster store past its retry deadline): every
            # block is a miss and is recomputed, never a crash of the engine's step.
            rcs = [-1] * self._rows.shape[0]
        rows, ids, errors = [], [], set()
        for block_ids, first_row in transfers:
            ok = True
            for j, block_id in enumerate(block_ids):
                ok = ok and rcs[first_row + j] > 0
                if ok:
                    rows.append(first_row + j)
                    ids.append(block_id)
                else:
                    errors.add(block_id)
        if rows:
            self._layers._scatter(self._rows, rows, ids)
        self.done = True
        return errors


class PendingSave:
    """One step's save: pages gathered per layer as the forward pass produces them."""

    def __init__(self, layers: PagedLayers, block_ids: list[int], hashes: list[bytes],
                 flat: torch.Tensor) -> None:
        self._layers = layers
        self.block_ids = block_ids
        self.hashes = hashes
        n = len(block_ids)
        # Layer-major: layer i's pages of all n blocks are one contiguous [n, page] slice, so the
        # device-to-host copy of a layer is one contiguous, asynchronous copy.
        self._slices: dict[str, torch.Tensor] = {}
        for name in layers.names:
            off, size = layers.offsets[name]
            self._slices[name] = flat[n * off:n * (off + size)].view(n, size)
        self._flat = flat
        self._idx = torch.tensor(block_ids, dtype=torch.long, device=layers.device)
        self._saved: set[str] = set()

    def add_layer(self, name: str, kv_layer: torch.Tensor) -> None:
        pages = kv_layer.index_select(0, self._idx).contiguous().view(torch.uint8)
        self._slices[name].copy_(pages.reshape(len(self.block_ids), -1),
                                 non_blocking=kv_layer.device.type == "cuda")
        self._saved.add(name)

    def finish(self, store) -> list[int]:
        """Waits for the layers' copies, lays the blocks out block-major and puts them.
        Returns the store's per-key codes. Raises if a layer's pages were never added."""
        rows = self._rows(copy=False)
        return store.batch_put(self.hashes, list(rows)) if len(self.block_ids) else []

    def finish_behind(self, store, executor):
        """As finish, but the put runs on `executor` (a concurrent.futures executor): returns
        its Future (the per-key codes). The rows are a copy of their own, so neither the staging
        buffer nor the paged cache is needed once this returns (write-behind)."""
        rows = self._rows(copy=True)
        return executor.submit(store.batch_put, self.hashes, list(rows))

    def _rows(self, copy: bool) -> torch.Tensor:
        missing = [n for n in self._layers.names if n not in self._saved]
        if missing:
            raise RuntimeError(f"dualpath: save of {len(missing)} layer(s) never started "
                               f"(first: {missing[0]})")
        layers = self._layers
        layers._save_staging.fence(layers.device)
        layers._save_staging.wait()  # the layers' device-to-host copies are done
        parts = [self._slices[name] for name in layers.names]
        if len(parts) > 1:
            return torch.cat(parts, dim=1)  # [n, Full Block], a new tensor
        return parts[0].clone() if copy else parts[0]  # a view of the reused staging
