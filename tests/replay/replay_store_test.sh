#!/usr/bin/env bash
# System test of `dualpath cluster run --store --local-tiers` (issue 16, docs/store.md "In the
# system"): a small 2P2D codex run, round-robin routing (each agent's turns alternate prefill
# engines), node-local persistent tiers, the distributed KV store (etcd, two masters, a store node
# per node, all children of the run). Checks
#  - exit 0 within the deadline, every request ok, 0 output mismatches (the run's checker);
#  - the store served the cross-instance hits: hit tokens loaded >= 90% of the ideal (the tokens
#    carried over between turns), store blocks read > 0, none rejected;
#  - the leader's Stats listed every node with DRAM used > 0 (puts spread over the cluster);
#  - the store ran authenticated (issue 25 item 1, docs/store.md "Security"): the run says so,
#    and the engines and the service reached it with the run's certificates (the hit and put
#    checks above fail otherwise: a store they cannot reach is all misses). That the store's
#    processes refuse plaintext and foreign certificates is the cluster_store_auth test's (the
#    same RunStore start, through `cluster up --store`);
#  - afterwards nothing is left: no namespace, no etcd or store process of the run, no store tier
#    file, no pool file, no state dir.
#
# usage: replay_store_test.sh DUALPATH_BINARY
# Exit 77 (CTest: skipped) without root, GlusterFS or etcd.
set -uo pipefail
bin=$(realpath "$1")
NAME=rpstore
DEADLINE=${DEADLINE:-150}
root=${DUALPATH_TESTBED_ROOT:-/var/tmp/dualpath-testbed}

source "$(dirname "$0")/../lib/testbed_run.sh"
testbed_require etcd

testbed_begin

start=$(date +%s)
timeout -k 10 "$DEADLINE" "$bin" cluster run --name "$NAME" --pd 2P2D --system dualpath \
  --routing round-robin --workload codex --agents 2 --turns 4 --append 128 --max-context 4096 \
  --goodput nominal --timeout 90 --store --store-dram-mib 64 --local-tiers \
  --engine-arg=--result-after-write --engine-arg=on \
  --json "$tmp/out.json" >"$tmp/table.txt" 2>"$tmp/progress.txt"
rc=$?
echo "--- cluster run --store --local-tiers exit $rc in $(($(date +%s) - start)) s; progress:"
cat "$tmp/progress.txt"
testbed_check_exit "$rc" "$DEADLINE"

if [[ -s $tmp/out.json ]]; then
  python3 - "$tmp/out.json" <<'PY' || fail "JSON checks (above)"
import json, sys
doc = json.load(open(sys.argv[1]))
bad = []
def check(cond, what):
    if not cond:
        bad.append(what)
w = doc["config"]["workload"]
(r,) = doc["results"]
check(r["requests"] == w["requests"] and len(r["records"]) == w["requests"],
      f"{len(r['records'])} records, {w['requests']} requests")
check(r["failed"] == 0, f"{r['failed']} failed requests")
check(r["mismatches"] == 0, f"{r['mismatches']} mismatches")
loaded = sum(x["loaded_tokens"] for x in r["records"])
ideal = w["context_tokens"]
print(f"hit tokens loaded {loaded} of {ideal} ideal = {100.0 * loaded / ideal:.1f}%")
check(loaded >= 0.9 * ideal, f"loaded {loaded} < 90% of the ideal {ideal}")
s = r.get("kv_store")
check(s is not None, "no kv_store report")
if s is not None:
    print("store:", {k: s[k] for k in ("hits_local", "hits_remote", "misses", "rejected",
                                       "puts_ok", "puts_failed")})
    check(s["hits_local"] + s["hits_remote"] > 0, "no block read from the store")
    check(s["rejected"] == 0, f"{s['rejected']} store objects failed verification")
    check(s["puts_ok"] > 0 and s["puts_failed"] == 0, "puts not all ok")
    m = s.get("master") or {}
    usage = m.get("usage", [])
    print("DRAM used per node:", [(u["node"], u["dram_used"]) for u in usage])
    check(len(usage) == 4, f"{len(usage)} nodes in the leader's stats, expected 4")
    check(all(u["dram_used"] > 0 for u in usage), "a node's DRAM tier was not used")
for b in bad:
    print("  -", b)
sys.exit(1 if bad else 0)
PY
else
  fail "no JSON written"
fi

grep -q "auth: engines and the store (etcd, masters, nodes) use mutual TLS and a transfer token" \
  "$tmp/progress.txt" || fail "the run did not say the store is authenticated"

# Nothing left behind (the store's processes name the cluster in --cluster).
testbed_check_nothing_left "--cluster $NAME\.|dualpath-testbed/$NAME/"

if ((failures > 0)); then
  echo "FAILED ($failures)"
  exit 1
fi
echo "PASS"
