"""Prefill/decode disaggregation for the vLLM connector, worker side (no vLLM import here, so the
protocol is tested without an engine; docs/integrations/vllm.md "Prefill/decode disaggregation").

DualPath §4.1 between two vLLM instances, over dualpath's transfer engine (UCX one-sided puts and
gets into the instances' paged KV caches, ``dualpath.TransferEngine``). Per request the scheduler
service chose the prefill instance P, the decode instance D and the read side; the proxy passed
them to both in ``kv_transfer_params``. Push mode, the same on both sides:

  D  allocates blocks for the whole prompt and waits (vLLM's asynchronous load). DE read: it first
     loads the hit prefix [L, H) from the store into its own blocks (its storage NIC). Then it
     sends P a READY message: its block table, its layers' addresses, and ``push_from``, the
     prefix it already holds (L, its local prefix-cache hit, or H after its store load; less if a
     stored block failed its checksum: corrupt KV is a miss).
  P  PE read: loads [Lp, H) from the store itself (the connector's synchronous load). DE read: its
     load of [Lp, H) is asynchronous and is a one-sided get from D's blocks once READY arrived (P
     reads nothing from the store). Then vLLM computes the rest, and after the forward pass that
     completed the prompt P pushes blocks [push_from, N) into D's blocks, followed by a DONE
     notice (ordered after the data on the same endpoint). P's blocks stay allocated until the
     push completed (request_finished returned True; finished_sending reports it).
  D  on DONE reports the receive finished; vLLM recomputes the last prompt token and decodes. D's
     connector writes every newly full block behind to the store (the store connector's save),
     so an agent's next turn hits.

Every wait has a deadline (``timeout_s``): D without DONE sends ABORT, waits one more deadline for
P's answer (a push that is already in flight must land before D's blocks are freed), then fails
the receive; P without READY gives up. A peer that dies fails its batches (the transfer engine's
peer-death detection) and turns into a failed receive (``failed_recving``: vLLM fails or
recomputes the request by ``kv_load_failure_policy``).

Messages are transfer-engine notices with a JSON payload (tags below). Threads: the model runner's
thread calls every method; the transfer engine's completions and notices are queued in C++ and
handled in ``poll``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from dualpath import _core

logger = logging.getLogger(__name__)

__all__ = ["Geometry", "PdWorker", "TAG_ABORT", "TAG_DONE", "TAG_READY"]

# Notice tags of the P/D protocol ("DP" and a number).
TAG_READY = 0x44500001  # D -> P: {"id", "blocks", "layers", "push_from", "prompt_tokens"}
TAG_DONE = 0x44500002  # P -> D, after the push's data: {"id", "ok", "blocks", "bytes", "error"}
TAG_ABORT = 0x44500003  # D -> P: {"id", "why"}: D's request ended; do not push (answer DONE)


def _encode(msg: dict) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode()


class Geometry:
    """Where each layer's page of a block lives in this process: one (base address, stride between
    blocks, page bytes) per layer, in layer order (the Full Block's order, PagedLayers.names), and
    the memory ranges to register with the transfer engine (each layer tensor's whole storage).

    A page must be contiguous (one descriptor per layer and block); vLLM's layouts are (blocks at
    dim 0, the rest of a block contiguous)."""

    def __init__(self, caches: dict[str, torch.Tensor], names: Sequence[str]) -> None:
        self.layers: list[tuple[int, int, int]] = []
        regions: dict[int, int] = {}
        for name in names:
            kv = caches[name]
            if not kv[0].is_contiguous():
                raise ValueError(f"dualpath P/D: layer {name}: a block's page is not contiguous "
                                 f"(shape {tuple(kv.shape)}, strides {kv.stride()})")
            page = kv[0].numel() * kv.element_size()
            self.layers.append((kv.data_ptr(), kv.stride(0) * kv.element_size(), page))
            storage = kv.untyped_storage()
            regions[storage.data_ptr()] = max(regions.get(storage.data_ptr(), 0), storage.nbytes())
        self.regions = sorted(regions.items())
        self.block_bytes = sum(page for _, _, page in self.layers)

    def describe(self) -> list[list[int]]:
        return [list(layer) for layer in self.layers]

    def mismatch(self, remote: Sequence[Sequence[int]]) -> str | None:
        """Why a peer's layers cannot exchange pages with ours (None: they can)."""
        if len(remote) != len(self.layers):
            return f"peer has {len(remote)} KV layers, this instance {len(self.layers)}"
        for i, ((_, _, page), r) in enumerate(zip(self.layers, remote)):
            if int(r[2]) != page:
                return f"layer {i}: peer page {r[2]} bytes, this instance {page}"
        return None

    def descriptors(self, local_blocks: Sequence[int], remote: Sequence[Sequence[int]],
                    remote_blocks: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
        """(local addresses, remote addresses, lengths) moving every layer's page of local block
        local_blocks[i] to/from remote block remote_blocks[i]. Runs contiguous on both sides are
        merged into one descriptor."""
        la: list[int] = []
        ra: list[int] = []
        n: list[int] = []
        for (base, stride, page), (rbase, rstride, _) in zip(self.layers, remote):
            for lb, rb in zip(local_blocks, remote_blocks):
                lo = base + lb * stride
                ro = int(rbase) + rb * int(rstride)
                if n and la[-1] + n[-1] == lo and ra[-1] + n[-1] == ro:
                    n[-1] += page
                else:
                    la.append(lo)
                    ra.append(ro)
                    n.append(page)
        return la, ra, n


def _blocks(tokens: int, block_size: int) -> int:
    """Blocks covering `tokens` tokens (the last one may be partial)."""
    return -(-tokens // block_size)


@dataclass
class _Send:
    """P side: one prefill request."""

    vreq: str
    rid: str
    side: str
    hit: int
    prompt_tokens: int
    deadline: float
    block_ids: list[int] = field(default_factory=list)
    pull: tuple[int, int, list[int]] | None = None  # (from, to tokens, P's blocks) DE read
    pull_batch: int | None = None
    load: Any = None  # PE read: the PendingLoad of P's own store load (asynchronous)
    load_blocks: list[int] = field(default_factory=list)
    computed: bool = False
    peer: int | None = None
    ready: dict | None = None
    push_batch: int | None = None
    resolved: bool = False  # the push finished, failed or was given up: blocks may be freed
    aborted: str = ""
    stats: dict = field(default_factory=dict)


@dataclass
class _Recv:
    """D side: one decode request."""

    vreq: str
    rid: str
    side: str
    hit: int
    local: int
    prompt_tokens: int
    block_ids: list[int]
    prefill_addr: str
    deadline: float
    peer: int | None = None
    load: Any = None  # PendingLoad of the DE read's store load
    load_blocks: list[int] = field(default_factory=list)
    push_from: int | None = None
    aborted: str = ""
    done: bool = False
    stats: dict = field(default_factory=dict)


class PdWorker:
    """The worker-side P/D state of one vLLM worker: its transfer engine (listening on
    ``listen``), the requests it sends (as a prefill instance) and receives (as a decode
    instance), and the sets vLLM collects each step (``poll``)."""

    def __init__(self, layers, store, *, block_size: int, listen: str, token_file: str | None,
                 insecure: bool, ucx_tls: str, timeout_s: float, stats_path: str | None) -> None:
        self._layers = layers
        self._store = store
        self._bs = block_size
        self._timeout = timeout_s
        self._stats_path = stats_path
        self.geo = Geometry(layers.caches, layers.names)
        if self.geo.block_bytes != layers.block_bytes:
            raise ValueError("dualpath P/D: the layers' pages do not add up to a Full Block")
        self._engine = _core.TransferEngine(token_file=token_file, insecure=insecure,
                                            ucx_tls=ucx_tls, peer_timeout=timeout_s)
        for ptr, size in self.geo.regions:
            self._engine.register(ptr, size)
        self.address = self._engine.listen(listen)
        self._peers: dict[str, int] = {}  # prefill address -> peer id (D connects to P)
        self._batches: dict[int, Callable[[int, str], None]] = {}
        self._sends: dict[str, _Send] = {}  # rid ->
        self._recvs: dict[str, _Recv] = {}  # rid ->
        self._early_ready: dict[str, tuple[int, dict, float]] = {}  # READY before P's meta
        self._expired: dict[str, float] = {}  # P: rids given up (a late READY is answered)
        self._finished_seen: set[str] = set()  # vreqs vLLM reported finished
        self._finished_sending: set[str] = set()
        self._finished_recving: set[str] = set()
        self._failed_recving: set[str] = set()
        self._invalid: set[int] = set()
        self.counts = dict(pushed_blocks=0, pushed_bytes=0, pulled_blocks=0, pulled_bytes=0,
                           received_blocks=0, received_bytes=0, store_read_blocks=0,
                           store_read_bytes=0, failed=0)
        logger.info("dualpath P/D: transfer engine listening on %s (%d KV layers, %d B per block)",
                    self.address, len(self.geo.layers), self.geo.block_bytes)

    # ---- D side --------------------------------------------------------------------------------
    def start_recv(self, vreq: str, params: dict, block_ids: list[int], local: int,
                   prompt_tokens: int, load_hashes: list[bytes], fail: str = "") -> None:
        """D: vLLM allocated `block_ids` for the prompt and waits for the KV of [local, prompt).
        DE read: first load the hit blocks [local, hit) (`load_hashes`) from the store."""
        rid = str(params["id"])
        st = _Recv(vreq, rid, params.get("side", "prefill"), int(params.get("hit_tokens", 0)),
                   local, prompt_tokens, list(block_ids), str(params.get("prefill_addr", "")),
                   time.monotonic() + self._timeout)
        st.stats = dict(rid=rid, role="decode", side=st.side, hit_tokens=st.hit,
                        prompt_tokens=prompt_tokens, local_tokens=local, store_read_blocks=0,
                        received_blocks=0, received_bytes=0, block_bytes=self.geo.block_bytes)
        self._recvs[rid] = st
        if fail:
            self._fail_recv(st, fail)
            return
        try:
            st.peer = self._connect(st.prefill_addr)
        except Exception as e:  # an unreachable or refusing prefill instance fails this request
            self._fail_recv(st, f"cannot reach prefill instance {st.prefill_addr}: {e}")
            return
        if st.side == "decode" and load_hashes:
            first = local // self._bs
            st.load_blocks = block_ids[first:first + len(load_hashes)]
            st.load = self._layers.start_load(self._store, load_hashes, private=True)
        else:
            self._send_ready(st, local)

    def _send_ready(self, st: _Recv, ready: int) -> None:
        st.push_from = ready - ready % self._bs
        msg = dict(id=st.rid, blocks=st.block_ids, layers=self.geo.describe(),
                   push_from=st.push_from, prompt_tokens=st.prompt_tokens)
        self._message(st.peer, TAG_READY, msg, lambda code, err: code == 0 or self._fail_recv(
            st, f"READY to prefill instance {st.prefill_addr} failed: {err}"))

    def _on_done(self, peer: int, msg: dict) -> None:
        st = self._recvs.get(str(msg.get("id")))
        if st is None or st.done:
            return
        if not msg.get("ok"):
            self._fail_recv(st, f"prefill instance {st.prefill_addr}: {msg.get('error', '?')}")
            return
        expect = _blocks(st.prompt_tokens, self._bs) - st.push_from // self._bs
        if int(msg.get("blocks", -1)) != expect:
            self._fail_recv(st, f"prefill instance {st.prefill_addr} pushed {msg.get('blocks')} "
                                f"blocks, expected {expect}")
            return
        st.stats.update(received_blocks=expect, received_bytes=expect * self.geo.block_bytes,
                        receive_from_tokens=st.push_from, ok=True)
        self.counts["received_blocks"] += expect
        self.counts["received_bytes"] += expect * self.geo.block_bytes
        self._end_recv(st, ok=True)

    def _fail_recv(self, st: _Recv, why: str) -> None:
        if st.done:
            return
        logger.warning("dualpath P/D: request %s (%s): receive failed: %s", st.rid, st.vreq, why)
        self.counts["failed"] += 1
        st.stats.update(ok=False, error=why)
        self._failed_recving.add(st.vreq)
        self._end_recv(st, ok=False)

    def _end_recv(self, st: _Recv, ok: bool) -> None:
        st.done = True
        self._finished_recving.add(st.vreq)
        del self._recvs[st.rid]
        self._record(st.stats)

    # ---- P side --------------------------------------------------------------------------------
    def start_send(self, vreq: str, params: dict, prompt_tokens: int) -> _Send:
        rid = str(params["id"])
        st = self._sends.get(rid)
        if st is None:
            st = _Send(vreq, rid, params.get("side", "prefill"), int(params.get("hit_tokens", 0)),
                       prompt_tokens, time.monotonic() + self._timeout)
            st.stats = dict(rid=rid, role="prefill", side=st.side, hit_tokens=st.hit,
                            prompt_tokens=prompt_tokens, store_read_blocks=0, pulled_blocks=0,
                            pushed_blocks=0, pushed_bytes=0, block_bytes=self.geo.block_bytes)
            self._sends[rid] = st
            early = self._early_ready.pop(rid, None)
            if early is not None:
                st.peer, st.ready = early[0], early[1]
        return st

    def start_pull(self, vreq: str, params: dict, prompt_tokens: int, first: int, end: int,
                   block_ids: list[int]) -> None:
        """P, DE read: vLLM waits for the KV of [first, end) in `block_ids` (its blocks for those
        tokens); they come from D's blocks once D's READY says D holds them."""
        st = self.start_send(vreq, params, prompt_tokens)
        st.pull = (first, end, list(block_ids))
        self._advance(st)

    def start_load(self, vreq: str, params: dict, prompt_tokens: int, block_ids: list[int],
                   hashes: list[bytes]) -> None:
        """P, PE read: vLLM waits for the stored hit blocks `hashes` in `block_ids`; P loads them
        from the store itself, asynchronously, so its engine computes other requests meanwhile
        (DualPath overlaps loading with computation)."""
        st = self.start_send(vreq, params, prompt_tokens)
        st.load_blocks = list(block_ids)
        st.load = self._layers.start_load(self._store, hashes, private=True)

    def computed(self, vreq: str, params: dict, prompt_tokens: int,
                 block_ids: list[int]) -> None:
        """P: the forward pass that completed the prompt's KV ran (called after it)."""
        st = self.start_send(vreq, params, prompt_tokens)
        st.block_ids = list(block_ids)
        st.computed = True
        self._advance(st)

    def add_store_reads(self, vreq_blocks: dict[str, int]) -> None:
        """Blocks the connector's synchronous store load copied in for P/D requests (PE read)."""
        for st in list(self._sends.values()) + list(self._recvs.values()):
            n = vreq_blocks.get(st.vreq, 0)
            if n:
                st.stats["store_read_blocks"] += n

    def _on_ready(self, peer: int, msg: dict) -> None:
        rid = str(msg.get("id"))
        st = self._sends.get(rid)
        if st is None:
            if rid in self._expired:
                self._message(peer, TAG_DONE, dict(id=rid, ok=False,
                                                   error="prefill request gave up waiting"))
            else:  # D was faster than P's scheduler: keep it for start_send
                self._early_ready[rid] = (peer, msg, time.monotonic())
            return
        st.peer, st.ready = peer, msg
        self._advance(st)

    def _on_abort(self, peer: int, msg: dict) -> None:
        rid = str(msg.get("id"))
        st = self._sends.get(rid)
        if st is None:
            self._early_ready.pop(rid, None)
            return
        st.aborted = str(msg.get("why", "decode request ended"))
        st.peer = peer
        self._advance(st)

    def _advance(self, st: _Send) -> None:
        """Moves a send along as far as what has arrived allows."""
        if st.ready is not None and not st.aborted and st.ready.get("layers") is not None:
            why = self.geo.mismatch(st.ready["layers"])
            if why is not None:
                st.aborted = why
        remote_blocks = st.ready.get("blocks", []) if st.ready else []
        if st.pull is not None and st.pull_batch is None and (st.ready is not None or st.aborted):
            first, end, blocks = st.pull
            st.pull = None
            held = int(st.ready.get("push_from", 0)) if st.ready else 0
            valid_end = min(end, held) if not st.aborted else first
            nblk = max(0, (valid_end - first) // self._bs)
            if valid_end < end:  # D could not load all of it (a corrupt block): compute the rest
                self._invalid.update(blocks[nblk:])
            if nblk == 0:
                self._finished_recving.add(st.vreq)
            else:
                i0 = first // self._bs
                la, ra, n = self.geo.descriptors(blocks[:nblk], st.ready["layers"],
                                                 remote_blocks[i0:i0 + nblk])

                def pulled(code: int, err: str, st=st, blocks=blocks, nblk=nblk) -> None:
                    st.pull_batch = None
                    if code != 0:
                        logger.warning("dualpath P/D: request %s: pull from decode failed: %s",
                                       st.rid, err)
                        self._invalid.update(blocks)
                    else:
                        st.stats["pulled_blocks"] += nblk
                        self.counts["pulled_blocks"] += nblk
                        self.counts["pulled_bytes"] += nblk * self.geo.block_bytes
                    self._finished_recving.add(st.vreq)
                    if st.vreq in self._finished_seen and not st.computed:
                        self._resolve(st)  # ended while pulling: nothing will be pushed
                    else:
                        self._maybe_release(st)

                st.pull_batch = self._submit(st.peer, "get", la, ra, n, pulled)
                if st.pull_batch == -1:  # refused at once (pulled already ran)
                    st.pull_batch = None
        if st.resolved or st.push_batch is not None:
            return
        if st.aborted and st.peer is not None:
            self._message(st.peer, TAG_DONE, dict(id=st.rid, ok=False, error=st.aborted))
            self._resolve(st)
            return
        if not (st.computed and st.ready is not None):
            return
        push_from = int(st.ready.get("push_from", 0))
        first = push_from // self._bs
        end = _blocks(st.prompt_tokens, self._bs)
        nblk = max(0, end - first)
        if len(st.block_ids) < end or len(remote_blocks) < end:
            self._message(st.peer, TAG_DONE, dict(
                id=st.rid, ok=False, error=f"block tables too short for {st.prompt_tokens} tokens "
                                           f"(prefill {len(st.block_ids)}, decode "
                                           f"{len(remote_blocks)})"))
            self._resolve(st)
            return
        done = dict(id=st.rid, ok=True, blocks=nblk, bytes=nblk * self.geo.block_bytes)
        if nblk == 0:
            self._message(st.peer, TAG_DONE, done, lambda code, err: self._resolve(st))
            return
        if self._layers.device.type == "cuda":
            # The forward pass's kernels wrote these pages on the current stream; the NIC reads
            # GPU memory directly, so they must have finished.
            torch.cuda.current_stream(self._layers.device).synchronize()
        la, ra, n = self.geo.descriptors(st.block_ids[first:end], st.ready["layers"],
                                         remote_blocks[first:end])

        def pushed(code: int, err: str, st=st, nblk=nblk) -> None:
            if code != 0:
                logger.warning("dualpath P/D: request %s: push to decode failed: %s", st.rid, err)
            else:
                st.stats.update(pushed_blocks=nblk, pushed_bytes=nblk * self.geo.block_bytes,
                                push_from_tokens=push_from)
                self.counts["pushed_blocks"] += nblk
                self.counts["pushed_bytes"] += nblk * self.geo.block_bytes
            self._resolve(st)

        st.push_batch = self._submit(st.peer, "put", la, ra, n, pushed, TAG_DONE, _encode(done))

    def _resolve(self, st: _Send) -> None:
        if st.resolved:
            return
        st.resolved = True
        self._maybe_release(st)

    def _maybe_release(self, st: _Send) -> None:
        # finished_sending only for requests vLLM has finished (base.get_finished's contract),
        # and only once the push can no longer write from P's blocks.
        # A load or pull still in flight writes into P's blocks and owes vLLM its
        # finished_recving: the send stays until it completed.
        if st.resolved and st.vreq in self._finished_seen and st.rid in self._sends \
                and st.load is None and st.pull_batch is None:
            if st.computed:
                self._finished_sending.add(st.vreq)
            del self._sends[st.rid]
            self._finished_seen.discard(st.vreq)
            self._record(st.stats)

    def expire(self, st: _Send) -> None:
        self._expired[st.rid] = time.monotonic()
        if st.pull is not None:  # never started: D never said READY; compute it all instead
            self._invalid.update(st.pull[2])
            self._finished_recving.add(st.vreq)
            st.pull = None
        self._resolve(st)

    # ---- both ----------------------------------------------------------------------------------
    def finished(self, finished_req_ids: set[str]) -> None:
        """vLLM's requests that ended this step (get_finished's argument)."""
        for st in list(self._sends.values()):
            if st.vreq in finished_req_ids:
                self._finished_seen.add(st.vreq)
                if not st.computed and st.pull is None and st.pull_batch is None \
                        and st.load is None:
                    # Ended before its prompt was computed: nothing to push; tell D if it asked.
                    if st.peer is not None and not st.resolved:
                        self._message(st.peer, TAG_DONE, dict(id=st.rid, ok=False,
                                                             error="prefill request ended"))
                    st.resolved = True
                self._maybe_release(st)
        for st in list(self._recvs.values()):
            if st.vreq in finished_req_ids and not st.aborted:
                # Aborted while waiting (the client went away): stop P; vLLM frees the blocks
                # only after finished_recving, which waits for P's answer (or P's death).
                st.aborted = "decode request ended"
                if st.peer is not None and st.push_from is not None:
                    self._message(st.peer, TAG_ABORT, dict(id=st.rid, why=st.aborted))
                st.deadline = min(st.deadline, time.monotonic() + self._timeout)

    def poll(self, wait_s: float = 0.0) -> tuple[set[str], set[str], set[str], set[int]]:
        """Handles completions, notices, finished store loads and deadlines; returns and clears
        (finished_sending, finished_recving, failed_recving, invalid block ids)."""
        pending = bool(self._sends or self._recvs)
        for ev in self._engine.events(wait_s if pending else 0.0):
            if ev[0] == "done":
                cb = self._batches.pop(ev[1], None)
                if cb is not None:
                    cb(ev[2], ev[3])
            else:
                _, peer, tag, payload = ev
                try:
                    msg = json.loads(payload)
                except ValueError:
                    logger.warning("dualpath P/D: undecodable notice %#x from peer %d", tag, peer)
                    continue
                if tag == TAG_READY:
                    self._on_ready(peer, msg)
                elif tag == TAG_DONE:
                    self._on_done(peer, msg)
                elif tag == TAG_ABORT:
                    self._on_abort(peer, msg)
        now = time.monotonic()
        # A peer the transfer engine declared dead (its connection closed, an operation failed)
        # is gone from peers(): its requests fail now rather than at their deadlines.
        live = set(self._engine.peers()) if self._sends or self._recvs else set()
        for st in list(self._recvs.values()):
            if st.peer is not None and st.peer not in live and st.push_from is not None:
                self._fail_recv(st, f"prefill instance {st.prefill_addr} went away")
                continue
            if st.load is not None and st.load.done_now() and st.aborted:
                st.load = None  # ended while loading: nothing was asked of P yet
                self._fail_recv(st, st.aborted)
            elif st.load is not None and st.load.done_now():
                load, st.load = st.load, None
                errors = load.resolve([(st.load_blocks, 0)])
                ok = next((i for i, b in enumerate(st.load_blocks) if b in errors),
                          len(st.load_blocks))
                st.stats["store_read_blocks"] += ok
                self.counts["store_read_blocks"] += ok
                self.counts["store_read_bytes"] += ok * self.geo.block_bytes
                self._send_ready(st, st.local + ok * self._bs)
            elif now > st.deadline:
                if st.aborted.startswith("timed out") or st.push_from is None:
                    self._fail_recv(st, f"no KV from prefill instance {st.prefill_addr} "
                                        f"within {2 * self._timeout:g} s")
                else:
                    st.aborted = f"timed out after {self._timeout:g} s"
                    self._message(st.peer, TAG_ABORT, dict(id=st.rid, why=st.aborted))
                    st.deadline = now + self._timeout
        for st in list(self._sends.values()):
            if st.load is not None and st.load.done_now():
                # P's PE-read load: the verified prefix is in its blocks; a block that failed its
                # checksum and everything after it are recomputed (reported invalid).
                load, st.load = st.load, None
                errors = load.resolve([(st.load_blocks, 0)])
                ok = len(st.load_blocks) - len(errors)
                st.stats["store_read_blocks"] += ok
                self.counts["store_read_blocks"] += ok
                self.counts["store_read_bytes"] += ok * self.geo.block_bytes
                self._invalid.update(errors)
                self._finished_recving.add(st.vreq)
                if st.vreq in self._finished_seen and not st.computed:
                    self._resolve(st)  # ended while loading: nothing will be pushed
                else:
                    self._maybe_release(st)
            if st.peer is not None and st.peer not in live and not st.resolved \
                    and st.push_batch is None and st.pull_batch is None:
                logger.warning("dualpath P/D: request %s: the decode instance went away", st.rid)
                self.counts["failed"] += 1
                st.stats.update(ok=False, error="decode instance went away")
                self.expire(st)
                continue
            if now > st.deadline and not st.resolved and st.push_batch is None \
                    and st.pull_batch is None:
                logger.warning("dualpath P/D: request %s: no READY from the decode instance within "
                               "%g s; giving up", st.rid, self._timeout)
                self.counts["failed"] += 1
                st.stats.update(ok=False, error="no READY from decode")
                self.expire(st)
        for rid, (_, _, t) in list(self._early_ready.items()):
            if now - t > 2 * self._timeout:
                del self._early_ready[rid]
        for rid, t in list(self._expired.items()):
            if now - t > 2 * self._timeout:
                del self._expired[rid]
        out = (self._finished_sending, self._finished_recving, self._failed_recving, self._invalid)
        self._finished_sending, self._finished_recving = set(), set()
        self._failed_recving, self._invalid = set(), set()
        return out

    def busy(self) -> bool:
        return bool(self._sends or self._recvs)

    def close(self) -> None:
        self._engine.close()

    # ---- transfer engine -------------------------------------------------------------------------
    def _connect(self, addr: str) -> int:
        peer = self._peers.get(addr)
        if peer is not None and peer in self._engine.peers():
            return peer
        peer = self._engine.connect(addr)
        self._peers[addr] = peer
        return peer

    def _submit(self, peer: int, op: str, la, ra, n, cb, tag: int | None = None,
                payload: bytes = b"") -> int:
        try:
            bid = self._engine.submit(peer, op, la, ra, n, notice_tag=tag, payload=payload)
        except Exception as e:  # a dead peer, a bad descriptor: this batch fails, nothing else
            cb(-1, str(e))
            return -1
        self._batches[bid] = cb
        return bid

    def _message(self, peer: int | None, tag: int, msg: dict,
                 cb: Callable[[int, str], Any] | None = None) -> None:
        def done(code: int, err: str) -> None:
            if code != 0:
                logger.warning("dualpath P/D: message %#x for %s failed: %s", tag, msg.get("id"),
                               err)
            if cb is not None:
                cb(code, err)

        if peer is None:
            done(-1, "no peer")
            return
        self._submit(peer, "put", [], [], [], done, tag, _encode(msg))

    def _record(self, stats: dict) -> None:
        if not self._stats_path:
            return
        try:
            with open(self._stats_path, "a") as f:
                f.write(json.dumps(stats) + "\n")
        except OSError as e:
            logger.warning("dualpath P/D: cannot append to stats_path %s: %s", self._stats_path, e)


def pid_tagged(path: str | None) -> str | None:
    """`path` with {pid} replaced (one stats file per worker process)."""
    return path.replace("{pid}", str(os.getpid())) if path else path
