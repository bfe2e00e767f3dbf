#!/usr/bin/env bash
# Issue 29 acceptance 2 (storage half) and 3 on the emulated cluster (root): the rack pool as the
# prefill->decode KV substrate and the rack-wide prefix cache, against UCX transfer + storage hits,
# in one script, same binary, same cluster. Every run checks outputs (mismatches must be 0).
#
#   agentic  the synthetic (Table-2 shaped) agentic workload, DualPath: --kv-substrate ucx,
#            rack-pool with the prefix cache off, rack-pool with it on. Turn 1 of every agent has no
#            hit (fresh store), so every storage read is after the warm-up turn. Prints per run the
#            storage links' rx bytes per node and the engines' storage read bytes, their fall
#            against the ucx run (acceptance 2: >= 90% when the working set fits the rack pool),
#            the rack's hits, the working set (blocks published x block file bytes) against the
#            rack pool's size, JCT, TTFT.
#   static   TraCT's static workload (`--workload static`: first prompts of 1,500 / 3,000 /
#            4,500 / 6,000 tokens by agent, 3 output tokens; STATIC_TURNS 2: the second turn
#            appends 64 tokens and reloads the whole first context, a prefix hit), agents arriving
#            online (STATIC_APS per second, so requests rarely queue behind each other): the same
#            three runs; TTFT mean and p99 per input length and turn, prefill and queue time, JCT,
#            bytes per link (storage links rx, compute links, rack pool written/read, rack hits).
#
# usage: scripts/replay/rack_pool.sh [DUALPATH_BINARY]   (default build/release/bin/dualpath)
# env:   PART (both | agentic | static), PD (1P1D), AGENTS (8), TURNS (4), APPEND (24), GEN (8),
#        MAX_CONTEXT (2048), STATIC_AGENTS (4: one per input length), STATIC_TURNS (2), STATIC_APS (0.1),
#        STATIC_TIMEOUT_S (900: the engines' --request-timeout-s; the reference model prefills
#        6,000 tokens on one CPU core in tens of seconds on a loaded machine), RACK_MODEL
#        (coherent), RACK_SIZE (1G), STOR_RATE (400mbit), COMP_RATE (2gbit), NAME (rkpool: the
#        testbed cluster's name), OUT_DIR (build/rack-pool), EXTRA (more `cluster run` arguments)
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(realpath "${1:-$here/build/release/bin/dualpath}")
PART=${PART:-both}
PD=${PD:-1P1D}
AGENTS=${AGENTS:-8}
TURNS=${TURNS:-4}
APPEND=${APPEND:-24}
GEN=${GEN:-8}
MAX_CONTEXT=${MAX_CONTEXT:-2048}
STATIC_AGENTS=${STATIC_AGENTS:-4}
STATIC_TURNS=${STATIC_TURNS:-2}
STATIC_TIMEOUT_S=${STATIC_TIMEOUT_S:-900}
STATIC_APS=${STATIC_APS:-0.1}
RACK_MODEL=${RACK_MODEL:-coherent}
RACK_SIZE=${RACK_SIZE:-1G}
STOR_RATE=${STOR_RATE:-400mbit}
COMP_RATE=${COMP_RATE:-2gbit}
NAME=${NAME:-rkpool}
OUT_DIR=${OUT_DIR:-$here/build/rack-pool}
EXTRA=${EXTRA:-}
mkdir -p "$OUT_DIR"
trap '"$bin" cluster down --name "$NAME" >/dev/null 2>&1' EXIT

run() { # tag workload-args...
  local tag=$1
  shift
  local substrate=()
  case $tag in
    *-ucx) substrate=(--kv-substrate ucx) ;;
    *-nocache) substrate=(--kv-substrate rack-pool --rack-pool "$RACK_MODEL" --rack-pool-size "$RACK_SIZE" --rack-prefix-cache off) ;;
    *-cache) substrate=(--kv-substrate rack-pool --rack-pool "$RACK_MODEL" --rack-pool-size "$RACK_SIZE" --rack-prefix-cache on) ;;
  esac
  local load0
  load0=$(cut -d' ' -f1-3 /proc/loadavg)
  echo "=== $tag: ${substrate[*]} $* (load $load0)"
  # shellcheck disable=SC2086
  "$bin" cluster run --name "$NAME" --pd "$PD" --stor-rate "$STOR_RATE" --comp-rate "$COMP_RATE" \
    --system dualpath "$@" "${substrate[@]}" --json "$OUT_DIR/$tag.json" $EXTRA \
    >"$OUT_DIR/$tag.table" 2>"$OUT_DIR/$tag.progress"
  local rc=$?
  echo "=== $tag: exit $rc (load before $load0, after $(cut -d' ' -f1-3 /proc/loadavg))"
  grep -E "mismatches|rack prefix cache|KV substrate" "$OUT_DIR/$tag.progress"
  ((rc == 0)) || tail -5 "$OUT_DIR/$tag.progress"
}

if [[ $PART == both || $PART == agentic ]]; then
  for s in ucx nocache cache; do
    run "agentic-$s" --workload synthetic --agents "$AGENTS" --turns "$TURNS" --append "$APPEND" \
      --gen "$GEN" --max-context "$MAX_CONTEXT"
  done
  python3 - "$OUT_DIR" "$RACK_SIZE" <<'PY'
import json, os, sys
out, rack_size = sys.argv[1], sys.argv[2]
rows = []
base = None
for s in ("ucx", "nocache", "cache"):
    p = os.path.join(out, f"agentic-{s}.json")
    if not os.path.exists(p):
        print(f"agentic-{s}: no JSON"); continue
    (r,) = json.load(open(p))["results"]
    k = r["kv_substrate"]
    links = {l["node"]: l["bytes"] for l in r["storage_links"]}
    link_sum = sum(links.values())
    if s == "ucx":
        base = (link_sum, k["storage_read_bytes"])
    hit_blocks = sum(x["loaded_tokens"] for x in r["records"]) // 64
    file_bytes = k["rack_prefix_bytes"] // k["rack_prefix_hits"] if k.get("rack_prefix_hits") else 0
    ws = k.get("rack_prefix_published", 0) * file_bytes
    fall = lambda c, u: f"{100 * (1 - c / u):.2f}%" if u else "n/a"
    print(f"agentic {s}: mismatches {r['mismatches']} of {len(r['records'])}, JCT {r['jct_s']:.2f} s, "
          f"TTFT mean {r['ttft_mean_s']:.3f} s p99 {r['ttft_p99_s']:.3f} s")
    print(f"  storage links rx bytes {link_sum} {links}; engines' storage read bytes "
          f"{k['storage_read_bytes']}; loaded hit blocks {hit_blocks}")
    print(f"  rack prefix cache: {k['rack_prefix_hits']} hits ({k['rack_prefix_bytes']} bytes), "
          f"{k['rack_prefix_misses']} misses, {k['rack_prefix_corrupt']} corrupt, "
          f"{k['rack_prefix_published']} published; compute link KV bytes {k['compute_link_kv_bytes']}")
    if ws:
        print(f"  working set: {k['rack_prefix_published']} blocks x {file_bytes} B = {ws / 2**20:.1f} MiB "
              f"in a rack pool of {rack_size} (with the in-flight PE<->DE objects)")
    if base and s != "ucx":
        print(f"  fall against ucx: storage links rx {fall(link_sum, base[0])}, engines' storage "
              f"reads {fall(k['storage_read_bytes'], base[1])}")
PY
fi

if [[ $PART == both || $PART == static ]]; then
  for s in ucx nocache cache; do
    run "static-$s" --workload static --agents "$STATIC_AGENTS" --turns "$STATIC_TURNS" \
      --append 64 --online --aps "$STATIC_APS" --timeout "$STATIC_TIMEOUT_S" \
      --engine-arg=--request-timeout-s --engine-arg="$STATIC_TIMEOUT_S"
  done
  python3 - "$OUT_DIR" <<'PY'
import json, os, sys
out = sys.argv[1]
def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]
res = {}
for s in ("ucx", "nocache", "cache"):
    p = os.path.join(out, f"static-{s}.json")
    if not os.path.exists(p):
        print(f"static-{s}: no JSON"); continue
    (r,) = json.load(open(p))["results"]
    res[s] = r
    k = r["kv_substrate"]
    links = {l["node"]: l["bytes"] for l in r["storage_links"]}
    print(f"static {s}: mismatches {r['mismatches']} of {len(r['records'])}, JCT {r['jct_s']:.2f} s, "
          f"TTFT mean {r['ttft_mean_s']:.3f} s p99 {r['ttft_p99_s']:.3f} s; bytes: storage links rx "
          f"{sum(links.values())} {links}, compute links {k['compute_link_bytes']} (KV payload "
          f"{k['compute_link_kv_bytes']}), rack pool written {k['rack_pool_written_bytes']} read "
          f"{k['rack_pool_read_bytes']}, rack prefix hits {k['rack_prefix_bytes']}, engines' storage "
          f"reads {k['storage_read_bytes']}")
print()
print("| input tokens | turn | n | " + " | ".join(
    f"{s} TTFT mean / p99 (s) | {s} prefill / queue (s)" for s in res) + " | cache/ucx TTFT mean |")
print("|---|---|---|" + "---|---|" * len(res) + "---|")
# An agent's input length is its first turn's prompt (agent k: kStaticInputTokens[k % 4]).
lengths = {}
for s, r in res.items():
    for x in r["records"]:
        if x["ok"] and x["turn"] == 0:
            lengths[x["agent"]] = x["prompt_tokens"]
for L in sorted(set(lengths.values())):
    for turn in sorted({x["turn"] for r in res.values() for x in r["records"]}):
        cells, means = [], {}
        n = 0
        for s, r in res.items():
            xs = [x for x in r["records"] if x["ok"] and x["turn"] == turn and lengths.get(x["agent"]) == L]
            n = len(xs)
            if not xs:
                cells.append("- | -"); continue
            t = [x["ttft_s"] for x in xs]
            means[s] = sum(t) / len(t)
            cells.append(f"{means[s]:.3f} / {pct(t, 0.99):.3f} | "
                         f"{sum(x['prefill_s'] for x in xs) / len(xs):.3f} / "
                         f"{sum(x['queue_s'] for x in xs) / len(xs):.3f}")
        ratio = f"{means['cache'] / means['ucx']:.2f}" if "cache" in means and "ucx" in means and means["ucx"] else "-"
        print(f"| {L} | {turn + 1} | {n} | " + " | ".join(cells) + f" | {ratio} |")
PY
fi
