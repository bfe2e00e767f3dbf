"""dualpath's OpenAI-compatible front door for prefill/decode-disaggregated vLLM instances.

    python -m dualpath.proxy --listen 0.0.0.0:8000 --scheduler HOST:PORT --scheduler-insecure \\
        --prefill p0=http://10.0.0.1:8100@10.0.0.1:17000 \\
        --decode d0=http://10.0.0.2:8100@10.0.0.2:17000

Each instance is NAME=URL@TRANSFER: its OpenAI server and its DualPathConnector's
``transfer_listen`` address. For every request (``/v1/completions``, ``/v1/chat/completions``,
streaming included) the proxy asks dualpath's scheduler service (``control serve --placement``)
for the prefill instance, the decode instance and the read side (DualPath §6.1), then drives both
the way vLLM's own disaggregated-serving proxies do: the prefill instance gets the request with
``max_tokens: 1`` and the decode instance the request itself, each with ``kv_transfer_params``
``{"dualpath": {...}}`` naming the request, the side, the hit and (for the decode instance) where
to reach the prefill instance. The decode instance's answer is the client's.

Failures (docs/integrations/vllm.md "Failures"): every request has a deadline (``--timeout-s``);
an instance that refuses, resets, answers with a server error or misses the deadline yields an
HTTP error naming it (502, or 504 for the deadline), the request's other instance is cancelled,
and an instance that did not answer at the connection level is reported dead to the service so
that new requests go to a live pair; a health check (``/health``) brings it back. No pair:
503 after ``--place-wait-s``.

The proxy also reports each instance's load to the service (unfinished requests and tokens, and
the hit tokens queued for its storage NIC: §6.1's read queue), which is what the read-side choice
compares. GET /dualpath/stats returns the proxy's counters (requests per read side, failures).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import dualpath
from dualpath import _core

logger = logging.getLogger("dualpath.proxy")

_UNLIMITED_TOKENS = 1 << 40  # hbm_free of a decode instance whose capacity is not configured


@dataclass
class Instance:
    """One vLLM instance behind the proxy, and the load the proxy has put on it."""

    name: str
    role: str  # "prefill" | "decode"
    url: str
    transfer_addr: str
    engine_id: int = -1
    alive: bool = False
    unfinished_requests: int = 0
    unfinished_tokens: int = 0
    read_queue_tokens: int = 0
    capacity_tokens: int = 0
    dead_until: float = 0.0  # monotonic time before which a passing /health does not re-admit

    def report(self) -> dict:
        free = _UNLIMITED_TOKENS
        if self.capacity_tokens > 0:
            free = max(0, self.capacity_tokens - self.unfinished_tokens)
        return dict(engine_id=self.engine_id, unfinished_requests=self.unfinished_requests,
                    unfinished_tokens=self.unfinished_tokens,
                    read_queue_tokens=self.read_queue_tokens, hbm_free_tokens=free,
                    capacity_tokens=self.capacity_tokens)


def parse_instance(text: str, role: str) -> Instance:
    """NAME=URL@TRANSFER_ADDR; ValueError naming the flag's text when malformed."""
    try:
        name, rest = text.split("=", 1)
        url, transfer = rest.rsplit("@", 1)
    except ValueError:
        raise ValueError(f"--{role} {text!r}: expected NAME=URL@TRANSFER_HOST:PORT") from None
    if not name or not url.startswith(("http://", "https://")) or ":" not in transfer:
        raise ValueError(f"--{role} {text!r}: expected NAME=URL@TRANSFER_HOST:PORT "
                         "(URL http[s]://...)")
    return Instance(name, role, url.rstrip("/"), transfer)


class InstanceError(Exception):
    """A request to one instance failed; `dead`: at the connection level (refused, reset, no
    answer in time), so new requests should avoid it."""

    def __init__(self, inst: Instance, why: str, status: int = 502, dead: bool = False) -> None:
        super().__init__(f"{inst.role} instance {inst.name} ({inst.url}): {why}")
        self.inst = inst
        self.status = status
        self.dead = dead


@dataclass
class Stats:
    requests: int = 0
    ok: int = 0
    failed: int = 0
    unavailable: int = 0
    sides: dict = field(default_factory=lambda: {"prefill": 0, "decode": 0, "split": 0,
                                                 "none": 0})
    hit_tokens: int = 0
    prompt_tokens: int = 0
    errors: list = field(default_factory=list)  # the last 100 error messages


class Proxy:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.instances: list[Instance] = (
            [parse_instance(t, "prefill") for t in args.prefill]
            + [parse_instance(t, "decode") for t in args.decode])
        names = [i.name for i in self.instances]
        if len(set(names)) != len(names):
            raise ValueError(f"instance names must be unique: {names}")
        for inst, cap in zip([i for i in self.instances if i.role == "decode"],
                             args.decode_capacity_tokens or []):
            inst.capacity_tokens = cap
        self.by_id: dict[int, Instance] = {}
        self.client = _core.SchedulerClient(
            args.scheduler, insecure=args.scheduler_insecure, tls_cert=args.scheduler_tls_cert,
            tls_key=args.scheduler_tls_key, tls_ca=args.scheduler_tls_ca,
            rpc_timeout=args.rpc_timeout_s)
        self.stats = Stats()
        self.heartbeat_s = 1.0
        self._session = None
        self._place_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task] = []

    # ---- instances ---------------------------------------------------------------------------
    async def register(self, inst: Instance) -> None:
        reply = await asyncio.to_thread(self.client.register, inst.name, inst.role, inst.name,
                                        inst.url, inst.transfer_addr, inst.capacity_tokens)
        inst.engine_id = reply["engine_id"]
        inst.alive = True
        self.by_id[inst.engine_id] = inst
        self.heartbeat_s = float(reply["heartbeat_s"])
        logger.info("registered %s instance %s (%s) as engine %d", inst.role, inst.name, inst.url,
                    inst.engine_id)

    async def mark_dead(self, inst: Instance, why: str) -> None:
        if not inst.alive:
            return
        inst.alive = False
        # An instance that hangs on requests may still answer /health: keep it out a while.
        inst.dead_until = time.monotonic() + self.args.dead_retry_s
        logger.error("%s instance %s marked dead: %s", inst.role, inst.name, why)
        try:
            await asyncio.to_thread(self.client.report_engines, [], [inst.engine_id], why)
        except Exception as e:  # the service is unreachable: its liveness check will catch up
            logger.warning("report of dead instance %s failed: %s", inst.name, e)

    def reports(self) -> list[dict]:
        return [i.report() for i in self.instances if i.alive and i.engine_id >= 0]

    async def _heartbeats(self) -> None:
        """Reports load (and liveness) of the live instances; health-checks all of them."""
        import aiohttp

        while True:
            await asyncio.sleep(self.heartbeat_s / 2)
            for inst in self.instances:
                healthy = False
                try:
                    async with self._session.get(
                            inst.url + "/health",
                            timeout=aiohttp.ClientTimeout(total=self.args.health_timeout_s)) as r:
                        healthy = r.status == 200
                except Exception:
                    healthy = False
                if healthy and not inst.alive and time.monotonic() >= inst.dead_until:
                    try:
                        await self.register(inst)  # back (restarted): register again
                    except Exception as e:
                        logger.warning("re-registering %s failed: %s", inst.name, e)
                elif not healthy and inst.alive:
                    await self.mark_dead(inst, "health check failed")
            try:
                dead = await asyncio.to_thread(self.client.report_engines, self.reports(), [], "")
                for engine_id in dead:
                    inst = self.by_id.get(engine_id)
                    if inst is not None and inst.alive:
                        inst.alive = False  # the service declared it dead; health brings it back
            except Exception as e:
                logger.warning("load report to the scheduler service failed: %s", e)

    # ---- requests ----------------------------------------------------------------------------
    async def _tokens(self, body: dict, chat: bool) -> list[int]:
        """The prompt's token ids: given (a completion's list of ids), or from a live instance's
        /tokenize (the same tokenizer and chat template the instances apply)."""
        if not chat:
            prompt = body.get("prompt")
            if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
                return prompt
            if not isinstance(prompt, str):
                raise ValueError("prompt: expected a string or a list of token ids (one prompt "
                                 "per request)")
            req = {"model": body.get("model"), "prompt": prompt}
        else:
            if not isinstance(body.get("messages"), list):
                raise ValueError("messages: expected a list")
            req = {"model": body.get("model"), "messages": body["messages"],
                   "add_generation_prompt": body.get("add_generation_prompt", True)}
        for inst in self.instances:
            if not inst.alive:
                continue
            async with self._session.post(inst.url + "/tokenize", json=req) as r:
                data = await r.json(content_type=None)
                if r.status != 200:
                    raise ValueError(f"tokenize on {inst.name}: {data}")
                return list(data["tokens"])
        raise InstanceError(self.instances[0], "no live instance to tokenize with", 503)

    async def handle(self, request, chat: bool):
        from aiohttp import web

        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
            tokens = await self._tokens(body, chat)
        except (ValueError, json.JSONDecodeError) as e:
            return _error(web, 400, f"bad request: {e}", "invalid_request_error")
        except InstanceError as e:
            return _error(web, e.status, str(e), "unavailable")
        gen = body.get("max_completion_tokens") or body.get("max_tokens") or (
            self.args.default_max_tokens)
        if not isinstance(gen, int) or gen < 1:
            return _error(web, 400, f"bad request: max_tokens {gen!r} must be an integer >= 1",
                          "invalid_request_error")
        rid = random.getrandbits(63)
        self.stats.requests += 1
        # One placement at a time: each Place carries reports that include every earlier
        # placement (accounted below before the lock is released); concurrent Places would all
        # see the same idle instances and land on the same pair.
        async with self._place_lock:
            try:
                placed = await asyncio.to_thread(self.client.place, rid, tokens, gen,
                                                 self.reports(),
                                                 int(self.args.place_wait_s * 1000))
            except dualpath.Error as e:
                self.stats.unavailable += 1
                self._note(str(e))
                return _error(web, 503, f"no prefill/decode pair: {e}", "unavailable")
            pe = self.by_id.get(placed["prefill_engine"])
            de = self.by_id.get(placed["decode_engine"])
            if pe is None or de is None:
                return _error(web, 503, "the service placed the request on an unknown instance",
                              "unavailable")
            side = placed["side"]
            hit = int(placed["hit_tokens"])
            # Load accounting: P holds the prompt until it answers; the hit sits in the reading
            # side's storage queue until the prefill is done; D holds prompt + gen until it ends.
            reader = pe if side == "prefill" else de if side == "decode" else None
            pe.unfinished_requests += 1
            pe.unfinished_tokens += len(tokens)
            de.unfinished_requests += 1
            de.unfinished_tokens += len(tokens) + gen
            if reader is not None:
                reader.read_queue_tokens += hit
        self.stats.sides[side] = self.stats.sides.get(side, 0) + 1
        self.stats.hit_tokens += hit
        self.stats.prompt_tokens += len(tokens)
        hashes = placed["prompt_block_hashes"]
        common = dict(id=str(rid), side=side, hit_tokens=hit,
                      first_hash=hashes[:32].hex() if hashes else "")
        p_body = dict(body)
        p_body.update(max_tokens=1, stream=False)
        if "max_completion_tokens" in p_body:
            p_body["max_completion_tokens"] = 1
        p_body.pop("stream_options", None)
        p_body["kv_transfer_params"] = {"dualpath": dict(common, role="prefill")}
        d_body = dict(body)
        d_body["kv_transfer_params"] = {"dualpath": dict(common, role="decode",
                                                         prefill_addr=pe.transfer_addr)}
        if not chat and isinstance(body.get("prompt"), str):
            # One tokenization for all: the instances get the ids the service hashed.
            p_body["prompt"] = d_body["prompt"] = tokens
        path = "/v1/chat/completions" if chat else "/v1/completions"

        prefill_open = True

        def prefill_over() -> None:
            nonlocal prefill_open
            if prefill_open:
                prefill_open = False
                pe.unfinished_requests -= 1
                pe.unfinished_tokens -= len(tokens)
                if reader is not None:
                    reader.read_queue_tokens -= hit

        # Where the request went, for clients and tests (the decode instance's body is as is).
        where = {"x-dualpath-request": str(rid), "x-dualpath-side": side,
                 "x-dualpath-hit-tokens": str(hit), "x-dualpath-prefill": pe.name,
                 "x-dualpath-decode": de.name}
        deadline = time.monotonic() + self.args.timeout_s
        p_task = asyncio.create_task(self._call(pe, path, p_body, deadline))
        p_task.add_done_callback(lambda _: prefill_over())
        ok = False
        error = ""
        try:
            stream = bool(body.get("stream"))
            d_resp = await self._open(de, path, d_body, deadline, p_task)
            if not stream:
                data = await self._read_json(de, d_resp, deadline, p_task)
                await self._await_prefill(pe, p_task, deadline)
                ok = True
                return web.json_response(data, headers=where)
            out = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream",
                                                          "Cache-Control": "no-cache", **where})
            await out.prepare(request)
            try:
                async for chunk in self._iter(de, d_resp, deadline):
                    await out.write(chunk)
                await self._await_prefill(pe, p_task, deadline)
                ok = True
            except InstanceError as e:
                # Headers are gone: the error goes into the stream, as an OpenAI error event.
                error = str(e)
                if e.dead:
                    await self.mark_dead(e.inst, str(e))
                await out.write(b"data: " + json.dumps(_error_body(str(e), "upstream_error"))
                                .encode() + b"\n\n")
            await out.write_eof()
            return out
        except InstanceError as e:
            error = str(e)
            if e.dead:
                await self.mark_dead(e.inst, str(e))
            return _error(web, e.status, str(e), "upstream_error", where)
        finally:
            if not p_task.done():
                p_task.cancel()
            prefill_over()
            de.unfinished_requests -= 1
            de.unfinished_tokens -= len(tokens) + gen
            if ok:
                self.stats.ok += 1
            else:
                self.stats.failed += 1
                self._note(error or "request cancelled")
            try:
                await asyncio.to_thread(self.client.finish, rid, ok, error)
            except Exception:
                pass  # a request of an instance reported dead is already failed and forgotten

    async def _call(self, inst: Instance, path: str, body: dict, deadline: float) -> dict:
        resp = await self._open(inst, path, body, deadline, None)
        return await self._read_json(inst, resp, deadline, None)

    async def _open(self, inst: Instance, path: str, body: dict, deadline: float, other):
        """POSTs and returns the response once its headers arrived; InstanceError otherwise. While
        waiting, a failure of `other` (the prefill call) fails this request too."""
        import aiohttp

        async def post():
            try:
                r = await self._session.post(inst.url + path, json=body, timeout=aiohttp.ClientTimeout(
                    total=None, sock_connect=self.args.connect_timeout_s))
            except (aiohttp.ClientConnectionError, OSError) as e:
                raise InstanceError(inst, f"unreachable: {e}", 502, dead=True) from None
            if r.status >= 400:
                # The instance answered: this request failed there (e.g. its KV never arrived),
                # the instance lives. Only silence marks an instance dead (and /health).
                text = (await r.text())[:500]
                r.release()
                raise InstanceError(inst, f"HTTP {r.status}: {text}", 502)
            return r

        return await self._race(inst, post(), deadline, other)

    async def _read_json(self, inst: Instance, resp, deadline: float, other) -> dict:
        import aiohttp

        async def read():
            try:
                return await resp.json(content_type=None)
            except (aiohttp.ClientError, OSError, ValueError) as e:
                raise InstanceError(inst, f"broken response: {e}", 502, dead=True) from None

        return await self._race(inst, read(), deadline, other)

    async def _iter(self, inst: Instance, resp, deadline: float):
        import aiohttp

        while True:
            try:
                chunk = await asyncio.wait_for(resp.content.readany(),
                                               max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                resp.close()
                raise InstanceError(inst, f"no answer within {self.args.timeout_s:g} s", 504,
                                    dead=True) from None
            except (aiohttp.ClientError, OSError) as e:
                raise InstanceError(inst, f"stream broken: {e}", 502, dead=True) from None
            if not chunk:
                return
            yield chunk

    async def _race(self, inst: Instance, coro, deadline: float, other):
        """Awaits `coro` until the deadline; if `other` (the prefill call) fails first, its error
        is this request's."""
        task = asyncio.ensure_future(coro)
        waits = {task} if other is None else {task, other}
        try:
            while True:
                timeout = deadline - time.monotonic()
                if timeout <= 0:
                    raise InstanceError(inst, f"no answer within {self.args.timeout_s:g} s", 504,
                                        dead=True)
                done, _ = await asyncio.wait(waits, timeout=timeout,
                                             return_when=asyncio.FIRST_COMPLETED)
                if task in done:
                    return task.result()
                if other is not None and other in done:
                    waits.discard(other)
                    exc = other.exception() if not other.cancelled() else None
                    if exc is not None:
                        raise exc
                    other = None
        finally:
            if not task.done():
                task.cancel()

    async def _await_prefill(self, pe: Instance, p_task: asyncio.Task, deadline: float) -> None:
        # The decode instance answered, so the KV arrived; the prefill call ends at the same time
        # (its request finished with its one token). Its error still counts.
        await self._race(pe, asyncio.shield(p_task), deadline, None)

    def _note(self, message: str) -> None:
        self.stats.errors.append(message)
        del self.stats.errors[:-100]
        logger.warning("%s", message)

    # ---- server ------------------------------------------------------------------------------
    async def start(self) -> None:
        import aiohttp
        from aiohttp import web

        # force_close: a fresh connection per call, never a kept-alive one. vLLM's server (uvicorn)
        # closes an idle connection after 5 s while aiohttp keeps it 15 s; a request sent on one
        # the server is closing at that moment ends in "Server disconnected", which would mark a
        # live instance dead (seen once in ~700 requests on the testbed). A POST cannot be resent
        # safely (the instance may have started it), and a connect costs well under a millisecond
        # against requests of milliseconds to minutes.
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, force_close=True),
            timeout=aiohttp.ClientTimeout(total=None))
        for inst in self.instances:
            await self.register(inst)
        self._tasks.append(asyncio.create_task(self._heartbeats()))
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/completions", lambda r: self.handle(r, chat=False))
        app.router.add_post("/v1/chat/completions", lambda r: self.handle(r, chat=True))
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/dualpath/stats", self._stats)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        host, port = self.args.listen.rsplit(":", 1)
        site = web.TCPSite(self._runner, host, int(port))
        await site.start()
        bound = site._server.sockets[0].getsockname()  # port 0: the one the OS chose
        print(f"listening on http://{bound[0]}:{bound[1]}", flush=True)

    async def _health(self, request):
        from aiohttp import web

        live = {r: any(i.alive for i in self.instances if i.role == r)
                for r in ("prefill", "decode")}
        return web.json_response({"ok": all(live.values()), **live},
                                 status=200 if all(live.values()) else 503)

    async def _models(self, request):
        from aiohttp import web

        for inst in self.instances:
            if inst.alive:
                async with self._session.get(inst.url + "/v1/models") as r:
                    return web.json_response(await r.json(content_type=None), status=r.status)
        return _error(web, 503, "no live instance", "unavailable")

    async def _stats(self, request):
        from aiohttp import web

        s = self.stats
        return web.json_response(dict(
            requests=s.requests, ok=s.ok, failed=s.failed, unavailable=s.unavailable,
            sides=s.sides, hit_tokens=s.hit_tokens, prompt_tokens=s.prompt_tokens,
            errors=s.errors,
            instances=[dict(name=i.name, role=i.role, url=i.url, engine_id=i.engine_id,
                            alive=i.alive, **{k: v for k, v in i.report().items()
                                              if k != "engine_id"})
                       for i in self.instances]))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await self._runner.cleanup()
        await self._session.close()


def _error_body(message: str, kind: str) -> dict:
    return {"error": {"message": message, "type": kind}}


def _error(web, status: int, message: str, kind: str, headers: dict | None = None):
    return web.json_response(_error_body(message, kind), status=status, headers=headers)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m dualpath.proxy",
        description="OpenAI-compatible proxy for DualPath prefill/decode disaggregation")
    p.add_argument("--listen", default="127.0.0.1:8000", help="HOST:PORT (port 0: any)")
    p.add_argument("--scheduler", required=True,
                   help="the scheduler service (control serve --placement): unix:PATH or "
                        "HOST:PORT")
    p.add_argument("--scheduler-insecure", action="store_true",
                   help="plaintext gRPC to a TCP scheduler address")
    p.add_argument("--scheduler-tls-cert")
    p.add_argument("--scheduler-tls-key")
    p.add_argument("--scheduler-tls-ca")
    p.add_argument("--prefill", action="append", default=[], metavar="NAME=URL@TRANSFER",
                   help="a prefill instance (repeat)")
    p.add_argument("--decode", action="append", default=[], metavar="NAME=URL@TRANSFER",
                   help="a decode instance (repeat)")
    p.add_argument("--decode-capacity-tokens", type=int, action="append",
                   help="KV capacity of each decode instance, in --decode order (default: "
                        "unlimited; vLLM preempts when full)")
    p.add_argument("--timeout-s", type=float, default=120.0,
                   help="deadline of one request, placement to last byte (default 120)")
    p.add_argument("--place-wait-s", type=float, default=10.0,
                   help="how long a request may wait for a prefill/decode pair (default 10)")
    p.add_argument("--connect-timeout-s", type=float, default=5.0)
    p.add_argument("--health-timeout-s", type=float, default=2.0)
    p.add_argument("--dead-retry-s", type=float, default=10.0,
                   help="an instance marked dead is re-admitted by a passing /health only after "
                        "this long (default 10)")
    p.add_argument("--rpc-timeout-s", type=float, default=10.0)
    p.add_argument("--default-max-tokens", type=int, default=16,
                   help="generation length the service reserves when a request names none")
    args = p.parse_args(argv)
    # Bad input: one line naming the flag, exit 2 (argparse's convention too).
    checks = [("--timeout-s", args.timeout_s, 0.001, 86400),
              ("--place-wait-s", args.place_wait_s, 0, 3600),
              ("--connect-timeout-s", args.connect_timeout_s, 0.001, 3600),
              ("--health-timeout-s", args.health_timeout_s, 0.001, 3600),
              ("--dead-retry-s", args.dead_retry_s, 0, 86400),
              ("--rpc-timeout-s", args.rpc_timeout_s, 0.001, 3600)]
    for flag, value, lo, hi in checks:
        if not lo <= value <= hi:
            p.error(f"{flag} = {value:g} is outside [{lo:g}, {hi:g}]")
    if not 1 <= args.default_max_tokens <= 1 << 20:
        p.error(f"--default-max-tokens = {args.default_max_tokens} is outside [1, 1048576]")
    if not args.prefill or not args.decode:
        p.error("give at least one --prefill and one --decode instance")
    for flag, texts in (("prefill", args.prefill), ("decode", args.decode)):
        for t in texts:
            try:
                parse_instance(t, flag)
            except ValueError as e:
                p.error(str(e))
    host_port = args.listen.rsplit(":", 1)
    if len(host_port) != 2 or not host_port[1].isdigit() or int(host_port[1]) > 65535:
        p.error(f"--listen {args.listen!r}: expected HOST:PORT")
    caps = args.decode_capacity_tokens or []
    if len(caps) > len(args.decode) or any(c < 0 for c in caps):
        p.error("--decode-capacity-tokens: at most one value >= 0 per --decode")
    return args


async def _main(args: argparse.Namespace) -> None:
    proxy = Proxy(args)
    await proxy.start()
    try:
        await asyncio.Event().wait()
    finally:
        await proxy.stop()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=os.environ.get("DUALPATH_PROXY_LOG", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(_main(args))
    except KeyboardInterrupt:
        return 130
    except (dualpath.Error, ValueError) as e:
        print(f"dualpath.proxy: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
