"""dualpath.TransferEngine from Python, and the vLLM connector's P/D protocol worker side
(dualpath.integrations._pd) between two in-process "instances" with CPU paged caches: no vLLM.

Each instance is a PdWorker over PagedLayers of two layers (blocks at dim 0, as vLLM lays them
out) and its own KVStore; they talk over loopback TCP through the transfer engine, exactly as two
vLLM workers do (tests/python/test_vllm_pd.py runs the same inside real engines).
"""

import os
import time

import pytest
import torch

import dualpath
from dualpath import _core
from dualpath.integrations._pages import PagedLayers
from dualpath.integrations._pd import PdWorker

BS = 4  # tokens per block
BLOCKS = 16  # blocks per instance
LAYERS = ("model.layers.0.attn", "model.layers.1.attn")
GUARD_S = 30  # a hang guard, not a timing assertion


def _engine(**kw):
    return _core.TransferEngine(insecure=True, ucx_tls="tcp", **kw)


def _drain(engine, want, guard=GUARD_S):
    """Events until `want(events)` holds (or the guard fails the test)."""
    got = []
    end = time.monotonic() + guard
    while not want(got):
        assert time.monotonic() < end, f"events so far: {got}"
        got += engine.events(0.05)
    return got


def test_put_get_and_notice_payloads_between_two_engines():
    a, b = _engine(), _engine()
    src = torch.arange(4096, dtype=torch.uint8)
    dst = torch.zeros(4096, dtype=torch.uint8)
    back = torch.zeros(4096, dtype=torch.uint8)
    a.register(src.data_ptr(), src.nbytes)
    a.register(back.data_ptr(), back.nbytes)
    b.register(dst.data_ptr(), dst.nbytes)
    addr = b.listen("127.0.0.1:0")
    peer = a.connect(addr)
    _drain(a, lambda _: len(a.remote_regions(peer)) == 1)  # B's region advertised
    # Two descriptors, swapped halves: a put, then a notice with a payload after the data.
    bid = a.submit(peer, "put", [src.data_ptr(), src.data_ptr() + 2048],
                   [dst.data_ptr() + 2048, dst.data_ptr()], [2048, 2048],
                   notice_tag=7, payload=b"two halves")
    done = _drain(a, lambda ev: any(e[0] == "done" for e in ev))
    assert ("done", bid, 0, "") in done
    notices = _drain(b, lambda ev: any(e[0] == "notice" for e in ev))
    (kind, from_peer, tag, payload), = [e for e in notices if e[0] == "notice"]
    assert (tag, payload) == (7, b"two halves")
    assert torch.equal(dst[:2048], src[2048:]) and torch.equal(dst[2048:], src[:2048])
    # B answers A through the peer id the notice came from: a message alone.
    b.submit(from_peer, "put", [], [], [], notice_tag=8, payload=b"ack")
    got = _drain(a, lambda ev: any(e[0] == "notice" for e in ev))
    assert [e[2:] for e in got if e[0] == "notice"] == [(8, b"ack")]
    # A get reads B's bytes back.
    bid = a.submit(peer, "get", [back.data_ptr()], [dst.data_ptr()], [4096])
    assert ("done", bid, 0, "") in _drain(a, lambda ev: any(e[0] == "done" for e in ev))
    assert torch.equal(back, dst)
    # Bad input is refused before anything is sent.
    with pytest.raises(ValueError, match="op 'copy'"):
        a.submit(peer, "copy", [], [], [])
    with pytest.raises(ValueError, match="differ in length"):
        a.submit(peer, "put", [src.data_ptr()], [], [1])
    with pytest.raises(dualpath.Error, match="outside every registered"):
        a.submit(peer, "put", [src.data_ptr() + 4096], [dst.data_ptr()], [16])
    a.close()
    b.close()
    with pytest.raises(ValueError, match="closed"):
        a.peers()


def test_transfer_token_rules(tmp_path):
    """The C++ engines' peer authentication: a token file (owner-only) or explicitly none; a peer
    with another token is refused."""
    with pytest.raises(ValueError, match="token_file .* or insecure"):
        _core.TransferEngine()
    good, other = tmp_path / "token", tmp_path / "other"
    for path, text in ((good, "a" * 64), (other, "b" * 64)):
        path.write_text(text)
        os.chmod(path, 0o600)
    loose = tmp_path / "loose"
    loose.write_text("c" * 64)
    os.chmod(loose, 0o644)
    with pytest.raises(ValueError, match="token_file"):
        _core.TransferEngine(token_file=str(loose))
    server = _core.TransferEngine(token_file=str(good))
    addr = server.listen("127.0.0.1:0")
    with pytest.raises(PermissionError):
        _core.TransferEngine(token_file=str(other)).connect(addr)
    with pytest.raises(PermissionError):
        _engine().connect(addr)
    assert isinstance(_core.TransferEngine(token_file=str(good)).connect(addr), int)


class Instance:
    """A worker with CPU paged caches ([blocks, heads, block_size, 2*head] bf16 per layer, all
    layers views of one allocation as in vLLM's CPU backend), its store and its PdWorker."""

    def __init__(self, store_path, timeout_s=10.0, stats_path=None):
        self.alloc = torch.zeros(len(LAYERS), BLOCKS, 2, BS, 8, dtype=torch.bfloat16)
        self.caches = {name: self.alloc[i] for i, name in enumerate(LAYERS)}
        self.layers = PagedLayers(self.caches)
        self.store = dualpath.KVStore(None, str(store_path), namespace="pd-test")
        self.pd = PdWorker(self.layers, self.store, block_size=BS, listen="127.0.0.1:0",
                           token_file=None, insecure=True, ucx_tls="tcp", timeout_s=timeout_s,
                           stats_path=stats_path)

    def fill(self, blocks, seed):
        g = torch.Generator().manual_seed(seed)
        for b in blocks:
            for kv in self.caches.values():
                kv[b] = torch.randn(kv[b].shape, generator=g).to(torch.bfloat16)

    def full_block(self, b):
        return torch.cat([kv[b].reshape(-1).view(torch.uint8) for kv in self.caches.values()])

    def close(self):
        self.pd.close()
        self.store.close()


def _run(instances, until, guard=GUARD_S):
    """Polls every instance until `until()`; returns what each poll reported, merged."""
    out = [[set(), set(), set(), set()] for _ in instances]
    end = time.monotonic() + guard
    while not until(out):
        assert time.monotonic() < end, f"not done: {out}"
        for i, inst in enumerate(instances):
            for k, s in enumerate(inst.pd.poll(0.01)):
                out[i][k] |= s
    return out


def _hashes(n):
    return [bytes([i]) * 32 for i in range(1, n + 1)]


@pytest.mark.parametrize("side", ["prefill", "decode"])
def test_prefill_pushes_the_prompt_and_decode_receives_only_what_it_lacks(tmp_path, side):
    """PE read: P loads the 4 hit blocks from its store itself (asynchronously) and pushes all 10
    prompt blocks. DE read: D loads the 4 hit blocks from its store, P pulls them from D, and P
    pushes only the 6 miss blocks. Every block in D ends up byte-identical to P's."""
    P = Instance(tmp_path / "p", stats_path=str(tmp_path / "stats.jsonl"))
    D = Instance(tmp_path / "d", stats_path=str(tmp_path / "stats.jsonl"))
    prompt, hit = 10 * BS - 1, 4 * BS  # 10 blocks, the last partial
    p_blocks, d_blocks = list(range(3, 13)), list(range(15, 5, -1))  # other ids on each side
    P.fill(p_blocks, seed=1)
    hashes = _hashes(4)
    if side == "decode":
        # The store D reads holds P's first 4 blocks (as a previous turn wrote them behind).
        D.store.batch_put(hashes, [P.full_block(b) for b in p_blocks[:4]])
    params = dict(id="r1", side=side, hit_tokens=hit, prefill_addr=P.pd.address)
    D.pd.start_recv("d-req", params, d_blocks, 0, prompt, hashes if side == "decode" else [])
    fresh = [0, 1, 2, 14]  # P's own blocks for the hit, not holding it yet
    if side == "decode":
        P.pd.start_pull("p-req", params, prompt, 0, hit, fresh)
        out = _run([P, D], lambda o: "p-req" in o[0][1])
        assert not out[0][3], "no pulled block may be reported invalid"
        for b_p, b_d in zip(fresh, d_blocks[:4]):
            assert torch.equal(P.full_block(b_p), D.full_block(b_d))
    else:
        P.store.batch_put(hashes, [P.full_block(b) for b in p_blocks[:4]])
        P.pd.start_load("p-req", params, prompt, fresh, hashes)
        out = _run([P, D], lambda o: "p-req" in o[0][1])
        assert not out[0][3], "no loaded block may be reported invalid"
        for b_p, b_s in zip(fresh, p_blocks[:4]):
            assert torch.equal(P.full_block(b_p), P.full_block(b_s))
    p_blocks = fresh + p_blocks[4:]
    P.pd.computed("p-req", params, prompt, p_blocks)
    P.pd.finished({"p-req"})
    out = _run([P, D], lambda o: "d-req" in o[1][1] and "p-req" in o[0][0])
    assert "d-req" not in out[1][2]  # not a failed receive
    for b_p, b_d in zip(p_blocks, d_blocks):
        assert torch.equal(P.full_block(b_p), D.full_block(b_d))
    pushed = 10 if side == "prefill" else 6
    assert P.pd.counts["pushed_blocks"] == pushed
    assert D.pd.counts["received_blocks"] == pushed
    assert D.pd.counts["store_read_blocks"] == (4 if side == "decode" else 0)
    assert P.pd.counts["store_read_blocks"] == (4 if side == "prefill" else 0)
    assert P.pd.counts["pulled_blocks"] == (4 if side == "decode" else 0)
    import json

    lines = [json.loads(x) for x in open(tmp_path / "stats.jsonl")]
    d_line = next(x for x in lines if x["role"] == "decode")
    assert d_line["ok"] and d_line["received_blocks"] == pushed
    assert d_line["receive_from_tokens"] == (hit if side == "decode" else 0)
    P.close()
    D.close()


def test_a_corrupt_stored_block_shortens_what_decode_holds(tmp_path):
    """DE read with block 2 of 4 missing from D's store: D holds blocks 0-1, P pulls those,
    recomputes the rest (reported invalid) and pushes from block 2 on."""
    P, D = Instance(tmp_path / "p"), Instance(tmp_path / "d")
    prompt, hit = 8 * BS, 4 * BS
    p_blocks, d_blocks = list(range(8)), list(range(8, 16))
    P.fill(p_blocks, seed=2)
    hashes = _hashes(4)
    D.store.batch_put([hashes[i] for i in (0, 1, 3)], [P.full_block(p_blocks[i]) for i in (0, 1, 3)])
    params = dict(id="r2", side="decode", hit_tokens=hit, prefill_addr=P.pd.address)
    D.pd.start_recv("d", params, d_blocks, 0, prompt, hashes)
    P.pd.start_pull("p", params, prompt, 0, hit, p_blocks[:4])
    out = _run([P, D], lambda o: "p" in o[0][1])
    assert out[0][3] == set(p_blocks[2:4])  # to recompute
    P.pd.computed("p", params, prompt, p_blocks)
    P.pd.finished({"p"})
    _run([P, D], lambda o: "d" in o[1][1])
    assert P.pd.counts["pushed_blocks"] == 6 and D.pd.counts["store_read_blocks"] == 2
    for b_p, b_d in zip(p_blocks, d_blocks):
        assert torch.equal(P.full_block(b_p), D.full_block(b_d))
    P.close()
    D.close()


def test_a_dead_prefill_instance_fails_the_receive_within_its_deadline(tmp_path):
    """D waits for a P that goes away before pushing: the receive fails (failed_recving), it does
    not hang; D's blocks are reported finished only then."""
    P, D = Instance(tmp_path / "p"), Instance(tmp_path / "d", timeout_s=1.0)
    params = dict(id="r3", side="prefill", hit_tokens=0, prefill_addr=P.pd.address)
    D.pd.start_recv("d", params, list(range(4)), 0, 4 * BS, [])
    _run([P], lambda o: bool(P.pd._early_ready))  # P got READY, never computes
    P.close()
    t0 = time.monotonic()
    out = _run([D], lambda o: "d" in o[0][1])
    assert "d" in out[0][2], "the receive must be reported failed"
    print(f"receive failed {time.monotonic() - t0:.2f} s after the prefill instance closed")
    # Nobody listens at the address any more: a new receive fails at once, naming it.
    D.pd.start_recv("d2", dict(params, id="r4"), list(range(4)), 0, 4 * BS, [])
    out = _run([D], lambda o: "d2" in o[0][1])
    assert "d2" in out[0][2]
    D.close()
