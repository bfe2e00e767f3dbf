#!/usr/bin/env bash
# System test of the rack pool as the prefill->decode KV substrate (issue 29, docs/e2e.md "KV
# substrate"): `cluster run --kv-substrate rack-pool` on the testbed, a few agents and turns of the
# synthetic workload under DualPath (so KV moves both ways: the PE's miss-token KV to the DE, the
# DE-path hit KV to the PE).
#
#   MODE=1p1d  one 1P1D cluster, three runs of the same workload on it: --kv-substrate ucx (the
#              baseline), rack-pool coherent, rack-pool noncoherent (each a rack pool of the run's
#              own). Checks acceptance 1 (every request ok, 0 mismatches in both memory models) and
#              the first half of acceptance 2: the KV payload bytes the engines put over the
#              compute links with the rack pool are < 1% of the UCX run's (both printed), and the
#              rack pool carried the KV instead (bytes written = read > 0, no errors).
#   MODE=2p2d  2P2D: `cluster up --rack-pool noncoherent` (status shows it), a rack-pool run on
#              that pool; then a run that brings up its own 2P2D cluster with a coherent rack pool.
#              0 mismatches in both; `cluster down` removes the region.
#   MODE=prefix  1P1D, the rack-wide prefix cache (on by default with rack-pool; docs/pool.md "Rack
#              prefix cache"): the same workload with --kv-substrate ucx and with rack-pool coherent
#              (256 MiB: the workload's blocks, ~25 MB, fit). Turn 1 of every agent has no hit, so
#              every storage read of a run is after the warm-up turn; with the rack pool the hits
#              come from the region: the engines' storage read bytes and the storage links' rx
#              bytes fall by >= 90% against the ucx run (acceptance 2, storage half), the rack's hit
#              counter covers every loaded hit block, nothing is corrupt, 0 mismatches.
#   MODE=failover  1P1D, noncoherent rack pool, `--fault rack-manager@2req`, 6 turns: the `pool
#              serve` holding the lock-manager role is SIGKILLed once 2 results are in (the
#              other requests' KV still to move through the pool); its standby on the other
#              node takes the role (lease 1 s, waits bounded by OpenOptions::lock_timeout), the run
#              completes within its deadline (no hang), every request ok, 0 mismatches
#              (acceptance 4).
# Afterwards nothing is left: no namespace, no rack region, no state dir.
#
# usage: replay_rack_test.sh DUALPATH_BINARY MODE
# Exit 77 (CTest: skipped) without root or GlusterFS.
set -uo pipefail
bin=$(realpath "$1")
MODE=${2:-1p1d}
NAME=rkp${MODE}
DEADLINE=${DEADLINE:-150}
root=${DUALPATH_TESTBED_ROOT:-/var/tmp/dualpath-testbed}

source "$(dirname "$0")/../lib/testbed_run.sh"
testbed_require

testbed_begin
trap 'testbed_cleanup; "$bin" cluster down --name "${NAME}c" >/dev/null 2>&1' EXIT
"$bin" cluster down --name "${NAME}c" >/dev/null 2>&1

# A small DualPath run on cluster $1 (pd $2); the rest of the arguments go to `cluster run`.
# Writes $tmp/$3.json.
run() {
  local cluster=$1 pd=$2 tag=$3
  shift 3
  local start=$(date +%s)
  timeout -k 10 "$DEADLINE" "$bin" cluster run --name "$cluster" --pd "$pd" --system dualpath \
    --workload synthetic --agents 3 --turns "${TURNS:-3}" --max-context 1024 --gen 4 --goodput nominal \
    --timeout 90 --json "$tmp/$tag.json" "$@" >"$tmp/$tag.table" 2>"$tmp/$tag.progress"
  local rc=$?
  echo "--- $tag: cluster run $* exit $rc in $(($(date +%s) - start)) s; progress:"
  cat "$tmp/$tag.progress"
  testbed_check_exit "$rc" "$DEADLINE"
}

# JSON checks of the runs named in the arguments: requests all ok, 0 mismatches, the substrate's
# counters; with a ucx run first, the rack-pool runs' compute link KV bytes < 1% of it.
check() {
  python3 - "$tmp" "$@" <<'PY' || fail "JSON checks (above)"
import json, os, sys
tmp, tags = sys.argv[1], sys.argv[2:]
bad = []
def check(cond, what):
    if not cond:
        bad.append(what)
base = None
for tag in tags:
    path = os.path.join(tmp, tag + ".json")
    if not os.path.exists(path):
        bad.append(f"{tag}: no JSON")
        continue
    doc = json.load(open(path))
    (r,) = doc["results"]
    w = doc["config"]["workload"]
    check(len(r["records"]) == w["requests"], f"{tag}: {len(r['records'])} of {w['requests']} records")
    check(r["failed"] == 0, f"{tag}: {r['failed']} failed requests")
    check(r["mismatches"] == 0, f"{tag}: {r['mismatches']} mismatches")
    k = r.get("kv_substrate")
    check(k is not None, f"{tag}: no kv_substrate counters")
    if k is None:
        continue
    print(f"{tag}: substrate {k['kv_substrate']}, compute link KV bytes {k['compute_link_kv_bytes']} "
          f"(all bytes sent on the compute links {k['compute_link_bytes']}), "
          f"rack pool written {k['rack_pool_written_bytes']} read {k['rack_pool_read_bytes']} "
          f"errors {k['rack_pool_errors']}, lock manager killed: {k.get('rack_manager_killed')}")
    if k["kv_substrate"] == "ucx":
        base = k["compute_link_kv_bytes"]
        check(base > 0, f"{tag}: the UCX run put no KV over the compute links")
        check(k["rack_pool_written_bytes"] == 0, f"{tag}: a UCX run wrote to a rack pool")
        continue
    check(k["rack_pool_written_bytes"] > 0, f"{tag}: nothing went through the rack pool")
    check(k["rack_pool_written_bytes"] == k["rack_pool_read_bytes"],
          f"{tag}: rack pool bytes written {k['rack_pool_written_bytes']} != read "
          f"{k['rack_pool_read_bytes']}")
    check(k["rack_pool_errors"] == 0, f"{tag}: {k['rack_pool_errors']} rack pool errors")
    if base is not None:
        ratio = k["compute_link_kv_bytes"] / base
        print(f"{tag}: compute link KV bytes {k['compute_link_kv_bytes']} / UCX run's {base} = "
              f"{100 * ratio:.4f}%")
        check(ratio < 0.01, f"{tag}: compute link KV bytes {100 * ratio:.3f}% of the UCX run's")
for b in bad:
    print("  -", b)
sys.exit(1 if bad else 0)
PY
}

no_region() {
  local f
  for f in "/dev/shm/$1-rack.pool" /dev/shm/dualpath-pool-*"$1"*; do
    [[ -e $f ]] && fail "rack pool file left: $f"
  done
  return 0
}

case $MODE in
  1p1d)
    "$bin" cluster up --name "$NAME" --pd 1P1D >"$tmp/up.txt" 2>&1 || fail "cluster up: $(cat "$tmp/up.txt")"
    run "$NAME" 1P1D ucx --kv-substrate ucx
    run "$NAME" 1P1D coherent --kv-substrate rack-pool --rack-pool coherent --rack-pool-size 256M
    run "$NAME" 1P1D noncoherent --kv-substrate rack-pool --rack-pool noncoherent \
      --rack-pool-size 256M
    check ucx coherent noncoherent
    ;;
  2p2d)
    "$bin" cluster up --name "$NAME" --pd 2P2D --rack-pool noncoherent --rack-pool-size 256M \
      >"$tmp/up.txt" 2>&1 || fail "cluster up --rack-pool: $(cat "$tmp/up.txt")"
    [[ -e /dev/shm/$NAME-rack.pool ]] || fail "cluster up --rack-pool made no /dev/shm/$NAME-rack.pool"
    "$bin" cluster status --name "$NAME" >"$tmp/status.txt" 2>&1
    grep -q "rack pool /dev/shm/$NAME-rack.pool: noncoherent, 256 MiB" "$tmp/status.txt" ||
      fail "cluster status does not show the rack pool: $(cat "$tmp/status.txt")"
    grep "rack pool" "$tmp/status.txt"
    run "$NAME" 2P2D noncoherent --kv-substrate rack-pool
    grep -q "rack pool: the cluster's, /dev/shm/$NAME-rack.pool (noncoherent)" "$tmp/noncoherent.progress" ||
      fail "the run did not use the cluster's rack pool"
    "$bin" cluster down --name "$NAME" || fail "cluster down"
    no_region "$NAME"
    run "${NAME}c" 2P2D coherent --kv-substrate rack-pool --rack-pool coherent --rack-pool-size 256M
    check noncoherent coherent
    no_region "${NAME}c"
    ;;
  prefix)
    "$bin" cluster up --name "$NAME" --pd 1P1D >"$tmp/up.txt" 2>&1 || fail "cluster up: $(cat "$tmp/up.txt")"
    # Results after their blocks are written and published (--result-after-write on): every hit
    # the service counts is then in the rack, which the checks below compare against.
    after=(--engine-arg=--result-after-write --engine-arg=on)
    run "$NAME" 1P1D ucx --kv-substrate ucx "${after[@]}"
    run "$NAME" 1P1D cached --kv-substrate rack-pool --rack-pool coherent --rack-pool-size 256M \
      "${after[@]}"
    check ucx cached
    python3 - "$tmp" <<'PY' || fail "rack prefix cache checks (above)"
import json, sys
tmp = sys.argv[1]
bad = []
def load(tag):
    (r,) = json.load(open(f"{tmp}/{tag}.json"))["results"]
    return r
ucx, cached = load("ucx"), load("cached")
ku, kc = ucx["kv_substrate"], cached["kv_substrate"]
link = lambda r: sum(l["bytes"] for l in r["storage_links"])
loaded_blocks = sum(rec["loaded_tokens"] for rec in cached["records"]) // 64
print(f"storage read bytes (engines): ucx {ku['storage_read_bytes']}, rack-pool {kc['storage_read_bytes']}")
print(f"storage links rx bytes: ucx {link(ucx)} {[(l['node'], l['bytes']) for l in ucx['storage_links']]}, "
      f"rack-pool {link(cached)} {[(l['node'], l['bytes']) for l in cached['storage_links']]}")
print(f"rack prefix cache: {kc['rack_prefix_hits']} hits ({kc['rack_prefix_bytes']} bytes), "
      f"{kc['rack_prefix_misses']} misses, {kc['rack_prefix_corrupt']} corrupt, "
      f"{kc['rack_prefix_published']} published; {loaded_blocks} hit blocks loaded")
if ku["storage_read_bytes"] <= 0 or link(ucx) <= 0:
    bad.append("the ucx run read nothing from storage: no warm turns?")
else:
    for what, u, c in (("engines' storage read bytes", ku["storage_read_bytes"], kc["storage_read_bytes"]),
                       ("storage links' rx bytes", link(ucx), link(cached))):
        fall = 1 - c / u
        print(f"{what}: fall {100 * fall:.2f}% (rack-pool {c} / ucx {u})")
        if fall < 0.90:
            bad.append(f"{what} fell by {100 * fall:.2f}% < 90%")
if not kc["rack_prefix_cache"]:
    bad.append("the rack-pool run had no prefix cache")
if kc["rack_prefix_hits"] < loaded_blocks:
    bad.append(f"{kc['rack_prefix_hits']} rack hits < {loaded_blocks} loaded hit blocks")
if kc["rack_prefix_corrupt"] != 0:
    bad.append(f"{kc['rack_prefix_corrupt']} corrupt rack blocks")
for b in bad:
    print("  -", b)
sys.exit(1 if bad else 0)
PY
    ;;
  failover)
    # 18 requests: the kill after the second result lands while the others' KV still moves
    # through the pool (an event, not a time: the run must not finish before it).
    TURNS=6 run "$NAME" 1P1D failover --kv-substrate rack-pool --rack-pool noncoherent \
      --rack-pool-size 256M --fault rack-manager@2req
    grep -q "fault rack-manager@2req:0 (the rack pool's lock manager (pool serve on p0) killed" \
      "$tmp/failover.progress" || fail "the lock manager (pool serve on p0) was not killed mid-run"
    python3 - "$tmp/failover.json" <<'PY' || fail "failover JSON (above)"
import json, sys
(r,) = json.load(open(sys.argv[1]))["results"]
f, k = r.get("fault") or {}, r["kv_substrate"]
bad = []
if k.get("rack_manager_killed") != "p0":
    bad.append(f"kv_substrate.rack_manager_killed {k.get('rack_manager_killed')!r}, want 'p0'")
if f.get("results_before", 0) < 2 or f.get("recovery_s") is None:
    bad.append(f"fault outcome {f}: want >= 2 results before the kill and some after it")
for b in bad:
    print("  -", b)
sys.exit(1 if bad else 0)
PY
    check failover
    ;;
  *)
    echo "unknown MODE $MODE (1p1d, 2p2d, prefix, failover)"
    exit 2
    ;;
esac

# Nothing left behind.
"$bin" cluster down --name "$NAME" >/dev/null 2>&1
no_region "$NAME"
if ip netns list | grep -q "^dp-$NAME\."; then
  fail "namespaces left: $(ip netns list | grep "^dp-$NAME\." | tr '\n' ' ')"
fi
[[ -e $root/$NAME ]] && fail "state dir $root/$NAME left"
[[ -e $root/${NAME}c ]] && fail "state dir $root/${NAME}c left"

if ((failures > 0)); then
  echo "FAILED ($failures)"
  exit 1
fi
echo "PASS"
