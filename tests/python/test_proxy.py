"""dualpath.SchedulerClient against a real scheduler service in placement mode, and
`python -m dualpath.proxy`'s failure handling against stand-in instances (small aiohttp servers
that answer, hang, fail or are gone: test doubles of vLLM servers, so each failure is exact and
fast; tests/python/test_vllm_pd.py runs the proxy in front of real vLLM instances).

Needs the `dualpath` binary ($DUALPATH_BIN, else the newest build/{debug,dev,release}/bin/dualpath)
for the service; skips without it.
"""

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from dualpath_bin import dualpath_binary

import dualpath

GUARD_S = 60  # hang guard of one HTTP call, not a timing assertion
TIMEOUT_S = 3  # the proxy's per-request bound in these tests


@pytest.fixture
def service(tmp_path):
    binary = dualpath_binary()
    if binary is None:
        pytest.skip("needs the dualpath binary (the scheduler service)")
    sock = str(tmp_path / "sched.sock")
    proc = subprocess.Popen(
        [binary, "control", "serve", "--listen", "unix:" + sock, "--placement",
         "--model-spec", "vocab=1024", "--block-tokens", "32", "--hash-seed", "vllm-none-hash",
         "--expect-prefill", "2", "--expect-decode", "2", "--heartbeat-s", "1"],
        stdout=subprocess.PIPE, stderr=open(tmp_path / "service.log", "w"), text=True)
    assert proc.stdout.readline().startswith("listening on")
    yield sock
    proc.terminate()
    proc.wait(timeout=30)


def test_scheduler_client_places_reports_and_finishes(service):
    c = dualpath.SchedulerClient("unix:" + service)
    p = c.register("p0", "prefill", "n0", "http://p0", "127.0.0.1:1")
    d = c.register("d0", "decode", "n1", "http://d0", "127.0.0.1:2")
    assert (p["engine_id"], d["engine_id"]) == (0, 1)
    assert d["hash_seed"] == "vllm-none-hash" and d["block_tokens"] == 32
    idle = [dict(engine_id=0), dict(engine_id=1, hbm_free_tokens=100000)]  # absent counts: 0
    placed = c.place(7, list(range(3, 103)), 8, idle, 5000)
    assert placed["prefill"]["name"] == "p0" and placed["decode"]["transfer_addr"] == "127.0.0.1:2"
    assert placed["side"] in ("prefill", "decode") and placed["hit_tokens"] == 0
    assert len(placed["prompt_block_hashes"]) == 3 * 32  # 100 tokens: 3 full blocks
    assert dualpath.kv.BlockHasher(seed="vllm-none-hash", block_size=32).hash_blocks(
        list(range(3, 103)))[0] == placed["prompt_block_hashes"][:32]
    c.finish(7, True)
    assert c.report_engines([dict(engine_id=0, unfinished_tokens=5)], [1], "gone") == [1]
    with pytest.raises(dualpath.Error, match="no prefill/decode instance pair"):
        c.place(8, [5, 6], 1, [], 50)
    listed = {e["name"]: e["alive"] for e in c.list_engines()}
    assert listed == {"p0": True, "d0": False}
    with pytest.raises(ValueError, match="role 'both'"):
        c.register("x", "both", "n", "", "")
    with pytest.raises(TypeError):
        c.report_engines([7])


def _serve_on_thread(loop, start):
    """Runs `loop` on a daemon thread: awaits `start()` (which starts a server and returns its
    port), then runs the loop until it is stopped. Returns (thread, port) once the port is known."""
    started = {}
    ready = threading.Event()

    def run():
        asyncio.set_event_loop(loop)
        started["port"] = loop.run_until_complete(start())
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(GUARD_S)
    return thread, started.get("port")


class Fake:
    """A stand-in instance: /health, /tokenize and /v1/completions per `mode` ("ok", "hang",
    "error"); records the kv_transfer_params it got."""

    def __init__(self, mode="ok"):
        from aiohttp import web

        self.mode = mode
        self.params = []
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_post("/v1/completions", self._complete)
        self._loop = asyncio.new_event_loop()
        self._release = asyncio.Event()
        self._runner = web.AppRunner(app)

        async def start():
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            return site._server.sockets[0].getsockname()[1]

        self._thread, self.port = _serve_on_thread(self._loop, start)
        self.url = f"http://127.0.0.1:{self.port}"

    async def _health(self, request):
        from aiohttp import web

        return web.Response(status=200 if self.mode != "gone" else 500)

    async def _complete(self, request):
        from aiohttp import web

        body = await request.json()
        self.params.append(body.get("kv_transfer_params"))
        if self.mode == "hang":
            await self._release.wait()  # set by stop()
        if self.mode == "error":
            return web.json_response({"error": "KV load failed"}, status=500)
        n = body.get("max_tokens", 1)
        return web.json_response({"choices": [{"token_ids": list(range(n)), "text": ""}]})

    def stop(self):
        if not self._loop.is_running():
            return
        self._loop.call_soon_threadsafe(self._release.set)
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(GUARD_S)
        self._loop.call_soon_threadsafe(self._loop.stop)


class DropsReused:
    """A stand-in instance that answers the first request on each connection and keeps the
    connection open (HTTP/1.1 keep-alive), then closes it without an answer when a second
    request arrives on it: what a vLLM server (uvicorn, 5 s keep-alive) does when its idle timer
    fires as a client reuses the connection. Raw asyncio (aiohttp's server would answer)."""

    def __init__(self):
        self.answered = 0
        self.dropped = 0
        self._loop = asyncio.new_event_loop()

        async def serve(reader, writer):
            first = True
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    length = 0
                    for line in head.decode().split("\r\n"):
                        if line.lower().startswith("content-length:"):
                            length = int(line.split(":", 1)[1])
                    body = json.loads(await reader.readexactly(length)) if length else {}
                    if not first:
                        self.dropped += 1
                        return  # closes the connection: the client sees no answer
                    first = False
                    out = json.dumps({"choices": [{"token_ids": list(range(
                        body.get("max_tokens", 1))), "text": ""}]}).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: %d\r\n\r\n%s" % (len(out), out))
                    await writer.drain()
                    self.answered += 1
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                writer.close()

        async def start():
            self._server = await asyncio.start_server(serve, "127.0.0.1", 0)
            return self._server.sockets[0].getsockname()[1]

        self._thread, self.port = _serve_on_thread(self._loop, start)
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self):
        self._loop.call_soon_threadsafe(self._server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)


class ProxyProc:
    def __init__(self, sock, prefill, decodes, tmp):
        args = [sys.executable, "-m", "dualpath.proxy", "--listen", "127.0.0.1:0",
                "--scheduler", "unix:" + sock, "--timeout-s", str(TIMEOUT_S),
                "--place-wait-s", "2", "--health-timeout-s", "1",
                "--prefill", f"p0={prefill.url}@127.0.0.1:1"]
        for name, d in decodes:
            args += ["--decode", f"{name}={d}@127.0.0.1:2"]
        self.log = open(tmp / "proxy.log", "w")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.url = self.proc.stdout.readline().split()[-1]

    def complete(self):
        req = urllib.request.Request(self.url + "/v1/completions", data=json.dumps(
            {"model": "m", "prompt": list(range(3, 80)), "max_tokens": 4}).encode(),
            headers={"Content-Type": "application/json"})
        t0 = time.monotonic()
        try:
            with urllib.request.urlopen(req, timeout=GUARD_S) as r:
                return r.status, dict(r.headers), json.loads(r.read()), time.monotonic() - t0
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), json.loads(e.read()), time.monotonic() - t0

    def stats(self):
        with urllib.request.urlopen(self.url + "/dualpath/stats", timeout=GUARD_S) as r:
            return json.loads(r.read())

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()


def test_proxy_drives_both_instances_with_kv_transfer_params(service, tmp_path):
    p, d = Fake(), Fake()
    proxy = ProxyProc(service, p, [("d0", d.url)], tmp_path)
    status, headers, body, _ = proxy.complete()
    assert status == 200 and body["choices"][0]["token_ids"] == [0, 1, 2, 3]  # D's answer
    (pp,), (dp,) = p.params, d.params
    assert pp["dualpath"]["role"] == "prefill" and dp["dualpath"]["role"] == "decode"
    assert pp["dualpath"]["id"] == dp["dualpath"]["id"] == headers["x-dualpath-request"]
    assert dp["dualpath"]["prefill_addr"] == "127.0.0.1:1"
    assert len(pp["dualpath"]["first_hash"]) == 64
    assert headers["x-dualpath-side"] == pp["dualpath"]["side"] == dp["dualpath"]["side"]
    assert proxy.stats()["ok"] == 1
    proxy.stop()
    p.stop()
    d.stop()


def test_proxy_never_sends_on_a_connection_the_instance_may_be_closing(service, tmp_path):
    """Regression: the proxy reused kept-alive connections; one that the vLLM server closed as a
    request was sent failed that request ("Server disconnected", 502) and marked a live instance
    dead (seen on the testbed). Instances that drop every reused connection must still serve
    every request, and stay alive."""
    p, d = DropsReused(), DropsReused()
    proxy = ProxyProc(service, p, [("d0", d.url)], tmp_path)
    for _ in range(3):
        status, headers, body, _ = proxy.complete()
        assert status == 200, body
        assert body["choices"][0]["token_ids"] == [0, 1, 2, 3]
    assert p.dropped == d.dropped == 0
    assert all(i["alive"] for i in proxy.stats()["instances"])
    proxy.stop()
    p.stop()
    d.stop()


@pytest.mark.parametrize("mode,status", [("hang", 504), ("error", 502), ("gone", 502)])
def test_a_failing_decode_instance_is_an_http_error_naming_it(service, tmp_path, mode, status,
                                                             record_property):
    """A decode instance that never answers (504 after the proxy's --timeout-s), answers with a
    server error (502; it stays in service) or is gone (connection refused: 502, and it is
    reported dead, so the next request goes to the other decode instance)."""
    p, bad, good = Fake(), Fake("hang" if mode == "hang" else "error"), Fake()
    bad_url = bad.url
    if mode == "gone":
        bad.stop()
        bad_url = "http://127.0.0.1:9"  # discard port: nothing listens
    proxy = ProxyProc(service, p, [("bad", bad_url), ("good", good.url)], tmp_path)
    got = proxy.complete()  # the first request goes to `bad` (the lower id; loads are equal)
    assert got[1]["x-dualpath-decode"] == "bad"
    assert got[0] == status, got
    assert "decode instance bad" in got[2]["error"]["message"], got[2]
    record_property("error_after_s", round(got[3], 3))
    if mode == "hang":
        assert got[3] >= TIMEOUT_S  # it waited for the bound, no longer than the guard
    alive = {i["name"]: i["alive"] for i in proxy.stats()["instances"]}
    assert alive["bad"] is (mode == "error")  # an instance that answered is not dead
    if mode != "error":
        # Out of service (for --dead-retry-s even though a hung one still answers /health).
        after = proxy.complete()
        assert after[0] == 200 and after[1]["x-dualpath-decode"] == "good", after
    proxy.stop()
    for f in (p, bad, good):
        f.stop()


@pytest.mark.parametrize("args,flag", [
    (["--timeout-s", "0"], "--timeout-s"),
    (["--prefill", "p0=localhost:1@x:1"], "--prefill"),
    (["--listen", "nohost"], "--listen"),
    (["--decode-capacity-tokens", "-5"], "--decode-capacity-tokens"),
])
def test_proxy_bad_flags_exit_2_naming_the_flag(args, flag):
    base = ["--scheduler", "unix:/nonexistent", "--prefill", "p0=http://h:1@h:2",
            "--decode", "d0=http://h:1@h:3"]
    r = subprocess.run([sys.executable, "-m", "dualpath.proxy"] + base + args,
                       capture_output=True, text=True, timeout=GUARD_S)
    assert r.returncode == 2, r
    assert flag in r.stderr.strip().splitlines()[-1], r.stderr
