#!/usr/bin/env bash
# System test of `dualpath cluster run --fault` (issue 17, docs/faults.md): one fault injected
# into a small 1P1D run (1P2D for an engine kill) on the real testbed, on an event (after 2
# requests completed), and checks
#  - the run completes within its deadline (the replay's --timeout 90 and a hard `timeout` of
#    DEADLINE s around the whole command: a hang is a failure, not a wait);
#  - exit 0, every request ok, one record per request, 0 output mismatches (the run's checker);
#  - the fault was injected and undone, and a request completed after its end (the recovery time,
#    printed; not asserted: timings are the benchmark's business);
#  - per kind: the service restart was seen by the replayer (service_restarts = 1), the brick
#    process was started again;
#  - a link taken down was set up again;
#  - a killed engine is named in the JSON and its buffer root in its node's pool was reclaimed
#    (the run's requests rescheduled to the other decode engine, outputs checked as above);
#  - afterwards nothing is left: no namespace, process, state dir or pool file.
#
# usage: replay_fault_test.sh DUALPATH_BINARY KIND
#   KIND: stor-link (p0's storage link down 5 s, Basic: every hit is read through p0),
#         brick (glusterfsd killed and restarted, Basic), service (control serve killed and
#         restarted, DualPath), comp-link (d0's compute link down 5 s, DualPath), engine (d1's
#         engine SIGKILLed, DualPath on 1P2D)
# Exit 77 (CTest: skipped) without root or GlusterFS.
set -uo pipefail
bin=$(realpath "$1")
kind=$2
DEADLINE=${DEADLINE:-150}
pd=1P1D
case $kind in
  stor-link) fault=stor-link:p0@2req:5 system=basic ;;
  brick) fault=brick@2req system=basic ;;
  service) fault=service@2req system=dualpath ;;
  comp-link) fault=comp-link:d0@2req:5 system=dualpath ;;
  engine) fault=engine:d1@2req system=dualpath pd=1P2D ;;
  *)
    echo "usage: $0 DUALPATH_BINARY stor-link|brick|service|comp-link|engine" >&2
    exit 2
    ;;
esac
NAME=rpfault${kind//-/}
root=${DUALPATH_TESTBED_ROOT:-/var/tmp/dualpath-testbed}

source "$(dirname "$0")/../lib/testbed_run.sh"
testbed_require

testbed_begin

if [[ $kind == engine ]]; then
  # Killing a cluster's only decode engine is refused (exit 2, naming why) before any system
  # starts or any log directory is made; the cluster the run brought up goes down again.
  logs_before=$(ls "${DUALPATH_REPLAY_ROOT:-/var/tmp/dualpath-replay}" 2>/dev/null | grep -c "^$NAME-")
  timeout -k 10 60 "$bin" cluster run --name "$NAME" --pd 1P1D --system dualpath \
    --workload synthetic --agents 2 --turns 2 --goodput nominal --fault engine:d0@2req \
    >/dev/null 2>"$tmp/refused.txt"
  rc=$?
  ((rc == 2)) || fail "--fault engine:d0 on 1P1D: exit $rc, want 2"
  grep -q "d0 is 1P1D's only decode node; no engine could take its requests" "$tmp/refused.txt" ||
    fail "--fault engine:d0 on 1P1D: $(tail -1 "$tmp/refused.txt")"
  logs_after=$(ls "${DUALPATH_REPLAY_ROOT:-/var/tmp/dualpath-replay}" 2>/dev/null | grep -c "^$NAME-")
  ((logs_after == logs_before)) || fail "the refused run left a log directory"
  echo "ok: refused: $(tail -1 "$tmp/refused.txt")"
fi

start=$(date +%s)
timeout -k 10 "$DEADLINE" "$bin" cluster run --name "$NAME" --pd "$pd" --system "$system" \
  --workload synthetic --agents 2 --turns 4 --max-context 1024 --gen 8 --goodput nominal \
  --timeout 90 --fault "$fault" --json "$tmp/out.json" >"$tmp/table.txt" 2>"$tmp/progress.txt"
rc=$?
echo "--- cluster run --fault $fault ($system) exit $rc in $(($(date +%s) - start)) s; progress:"
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
requests = doc["config"]["workload"]["requests"]
(r,) = doc["results"]
f = r["fault"]
check(r["requests"] == requests and len(r["records"]) == requests,
      f"{r['requests']} results / {len(r['records'])} records for {requests} requests")
check(all(x["ok"] for x in r["records"]), "a request failed")
check(r["mismatches"] == 0, f"{r['mismatches']} mismatches")
check(f is not None and f["kind"] == kind, f"fault {f}")
if kind != "engine":
    check(r["killed_engine"] is None, f"killed_engine {r['killed_engine']!r} without an engine kill")
if f is not None:
    check(f["injected"], "the fault was not injected")
    check(f["end_s"] is not None and f["end_s"] >= f["start_s"], "fault end before its start")
    check(f["recovery_s"] is not None, "no request completed after the fault ended")
    check(f["results_before"] >= 2, f"injected after {f['results_before']} results, not 2")
    if kind == "service":
        check(f["service_restarts"] == 1, f"service_restarts {f['service_restarts']}")
    if kind.endswith("-link"):
        check("up again" in f["detail"], f"link not set up again: {f['detail']}")
    if kind == "brick":
        check("started again" in f["detail"], f"brick not restarted: {f['detail']}")
    if kind == "engine":
        check("engine on d1 killed (SIGKILL)" in f["detail"], f"engine not killed: {f['detail']}")
        check(r["killed_engine"] == "d1", f"killed_engine {r['killed_engine']!r}, want 'd1'")
        b = r["killed_engine_buffers"]
        check(b is not None and b["reclaimed"], f"d1's buffers not reclaimed: {b}")
    print(f"RECOVERY {kind}: {f['recovery_s']} s after a {f['end_s'] - f['start_s']:.2f} s "
          f"fault ({f['results_during']} requests completed during it, "
          f"{f['resubmitted']} re-submitted); JCT {r['jct_s']:.2f} s")
for b in bad:
    print("FAIL:", b)
sys.exit(1 if bad else 0)
PY
else
  fail "no JSON written"
fi

# Nothing left behind (the run brought the cluster up, so it took it down).
testbed_check_nothing_left

if ((failures > 0)); then
  echo "replay fault test ($kind): $failures failure(s)"
  exit 1
fi
echo "replay fault test ($kind): OK"
