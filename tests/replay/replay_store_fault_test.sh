#!/usr/bin/env bash
# System test of the store's faults during a real end-to-end run (issue 16 acceptance 4,
# docs/faults.md, docs/store.md "Failure cases"): a small 2P2D codex `cluster run --store
# --local-tiers --routing round-robin` (engines read what their node's tier lacks from the store,
# verify every block, recompute what they miss) with one fault, on an event (after 4 requests
# completed), and the store's leases at 2 s (--store-ttl 2):
#   store-node:   p1's `dualpath store node` killed with SIGKILL, started again 3 s later (same
#                 id, empty tier): its lease expires meanwhile, the leader drops its replicas;
#   store-leader: the leading `dualpath store master` killed with SIGKILL, started again 3 s
#                 later (a standby): the other master takes over once the leader lease expired;
#   comp-link:    a partition (issue 25 item 9, docs/faults.md "Partitions"): p1's compute link
#                 down for 10 s. p1 keeps fetching over the service's socket; the other engines'
#                 probes (and its own) go unanswered, the service cuts it off, re-submits its
#                 requests elsewhere and routes its round-robin turns to p0 until its link is back.
# Checks
#  - exit 0 within the deadline, every request ok, one record per request, 0 output mismatches
#    (the run's checker: nothing wrong was served);
#  - the fault injected (its detail names the killed pid) and undone (started again);
#  - the store reacted, as the injector's watch of the leader's Stats saw it: store-node, the
#    leader no longer lists the dead node (or lists it re-joined empty); store-leader, a new leader
#    term answers Stats; the time is printed, not asserted;
#  - store-node: the kill cost loads: hit tokens loaded < the ideal, or store misses > 0 (the
#    blocks that lived only in p1's DRAM were recomputed);
#  - store-leader: blocks were read from the store after all;
#  - comp-link: the service cut p1 off while its link was down (seen by the run's looks at the
#    service), requests completed after the cut-off and before the link came back (work moved;
#    before issue 25 none did: every agent ended up waiting on p1), and p1 was taken back after;
#    the re-submissions, the completions during the fault and the recovery time are printed;
#  - afterwards nothing is left: no namespace, no etcd or store process of the run, no store tier
#    file, no pool file, no state dir.
#
# usage: replay_store_fault_test.sh DUALPATH_BINARY store-node|store-leader|comp-link
# Exit 77 (CTest: skipped) without root, GlusterFS or etcd.
set -uo pipefail
bin=$(realpath "$1")
kind=$2
extra=()
case $kind in
  store-node) fault=store-node:p1@4req:3 NAME=rpsfnode turns=10 context=4096 limit=90 ;;
  store-leader) fault=store-leader@4req:3 NAME=rpsfleader turns=10 context=4096 limit=90 ;;
  # Turns until the context is full (~11 per agent): the run outlasts the 10 s fault with work to
  # spare; shorter contexts keep the run and its check short. ~20 s of replay with the dev build;
  # the ASan build (CI's debug preset) is several times slower, hence the longer hang guards.
  # A 10 s outage is twice the engines' peer timeout: docs/faults.md "Limits" says it can use up
  # the default 3 attempts of a request assigned across it (it did, 1 run in ~6: a request failed
  # fast on p1's dead link three times before the service cut p1 off), and to raise
  # --max-attempts for such outages; this test checks that work moves, not the attempt budget.
  comp-link) fault=comp-link:p1@4req:10 NAME=partcomp turns=30 context=3072 limit=180
    extra=(--service-arg=--max-attempts --service-arg=5) ;;
  *)
    echo "usage: $0 DUALPATH_BINARY store-node|store-leader|comp-link" >&2
    exit 2
    ;;
esac
# The whole command's hang guard: the replay's own limit plus bring-up, the check and tear-down.
DEADLINE=${DEADLINE:-$((limit + 60))}
root=${DUALPATH_TESTBED_ROOT:-/var/tmp/dualpath-testbed}

source "$(dirname "$0")/../lib/testbed_run.sh"
testbed_require etcd

testbed_begin

start=$(date +%s)
timeout -k 10 "$DEADLINE" "$bin" cluster run --name "$NAME" --pd 2P2D --system dualpath \
  --routing round-robin --workload codex --agents 2 --turns "$turns" --append 128 --max-context "$context" \
  --goodput nominal --timeout "$limit" --store --store-dram-mib 64 --store-ttl 2 --local-tiers \
  --engine-arg=--result-after-write --engine-arg=on "${extra[@]}" --fault "$fault" --json "$tmp/out.json" >"$tmp/table.txt" 2>"$tmp/progress.txt"
rc=$?
echo "--- cluster run --store --fault $fault exit $rc in $(($(date +%s) - start)) s; progress:"
cat "$tmp/progress.txt"
testbed_check_exit "$rc" "$DEADLINE"

if [[ -s $tmp/out.json ]]; then
  python3 - "$tmp/out.json" "$kind" <<'PY' || fail "JSON checks (above)"
import json, sys
doc = json.load(open(sys.argv[1]))
kind = sys.argv[2]
bad = []
def check(cond, what):
    if not cond:
        bad.append(what)
w = doc["config"]["workload"]
(r,) = doc["results"]
check(r["requests"] == w["requests"] and len(r["records"]) == w["requests"],
      f"{len(r['records'])} records, {w['requests']} requests")
check(r["failed"] == 0 and all(x["ok"] for x in r["records"]), f"{r['failed']} failed requests")
check(r["mismatches"] == 0, f"{r['mismatches']} mismatches")
f = r.get("fault")
check(f is not None and f["kind"] == kind, f"fault {f}")
loaded = sum(x["loaded_tokens"] for x in r["records"])
ideal = w["context_tokens"]
s = r.get("kv_store") or {}
counters = {k: s.get(k) for k in ("hits_local", "hits_remote", "misses", "rejected", "puts_ok",
                                   "puts_failed")}
print(f"hit tokens loaded {loaded} of {ideal} ideal = {100.0 * loaded / max(ideal, 1):.1f}%; "
      f"store: {counters}")
check(s.get("rejected", 1) == 0, f"{s.get('rejected')} store objects failed verification")
if f is not None:
    d = f["detail"]
    check(f["injected"], "the fault was not injected")
    check(f["results_before"] >= 4, f"injected after {f['results_before']} results, not 4")
    check(f["recovery_s"] is not None, "no request completed after the fault ended")
    if kind == "comp-link":
        check("up again" in d, f"link not set up again: {d}")
        check(f.get("cut_off_after_s") is not None,
              "the service never cut p1 off while its compute link was down")
        check(f.get("results_after_cut_off", 0) >= 1,
              "no request completed between the cut-off and the link's return: work did not move")
        check(f.get("back_after_s") is not None, "the service never took p1 back")
        print(f"PARTITION: {f['results_during']} requests completed during the "
              f"{f['end_s'] - f['start_s']:.2f} s fault, {f.get('results_after_cut_off')} of them "
              f"after the cut-off at {f.get('cut_off_after_s')} s into it; p1 back "
              f"{f.get('back_after_s')} s after it; next completion {f['recovery_s']} s after the "
              f"link came back; {f.get('scheduler_resubmissions')} re-submissions "
              f"({f.get('requests_resubmitted')} requests); JCT {r['jct_s']:.2f} s")
    else:
        check("killed (SIGKILL)" in d and "pid" in d, f"nothing killed: {d}")
        check("started again" in d, f"not started again: {d}")
    if kind == "store-node":
        check("no longer listed" in d or "re-joined empty" in d,
              f"the leader's Stats never dropped the dead node: {d}")
        check(loaded < ideal or s.get("misses", 0) > 0,
              "the kill cost nothing: every ideal hit token loaded and no store miss")
    elif kind == "store-leader":
        check("a new leader" in d, f"no new leader seen: {d}")
        check(s.get("hits_local", 0) + s.get("hits_remote", 0) > 0, "no block read from the store")
    print(f"FAULT {kind}: {d}; {f['end_s'] - f['start_s']:.2f} s; recovery {f['recovery_s']} s; "
          f"JCT {r['jct_s']:.2f} s")
for b in bad:
    print("  -", b)
sys.exit(1 if bad else 0)
PY
else
  fail "no JSON written"
fi

# Nothing left behind (the store's processes name the cluster in --cluster).
testbed_check_nothing_left "--cluster $NAME\.|dualpath-testbed/$NAME/"

if ((failures > 0)); then
  echo "replay store fault test ($kind): FAILED ($failures)"
  exit 1
fi
echo "replay store fault test ($kind): PASS"
