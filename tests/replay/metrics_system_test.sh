#!/usr/bin/env bash
# System test of Prometheus metrics (issue 17, acceptance 3; docs/metrics.md): Debian's real
# `prometheus` (its own temporary storage, loopback only, 1 s scrape interval, targets from a
# file_sd file the run writes) scrapes a small 1P2D `dualpath cluster run --metrics` of Basic and
# DualPath, then the test asks Prometheus' HTTP API (PromQL) and checks
#  - every process target (service, p0, d0, d1) was up (max_over_time(up) == 1), and each system's
#    four processes were each scraped (dualpath_process_info per system);
#  - per system and read path (pe, de): sum of dualpath_engine_read_bytes_total (counted by the
#    engines where they read) matches the sum of the run JSON's read_bytes_prefill /
#    read_bytes_decode within 1%; so does the service's dualpath_request_read_bytes_total;
#  - per system and node (its storage link): the engines' read bytes match the JSON's per-engine
#    sums within 1%;
#  - per system: completed requests (dualpath_service_requests_total{event="completed"}) and the
#    TTFT histogram's count match the JSON's "requests" within 1%.
# The last counts of each process reach Prometheus because each process waits (counted, bounded by
# --metrics-wait-s) for a scrape after its work ended.
#
# usage: metrics_system_test.sh DUALPATH_BINARY
# Exit 77 (CTest: skipped) without root, GlusterFS or prometheus.
set -uo pipefail
bin=$(realpath "$1")
NAME=metrics

if [[ $(id -u) != 0 ]]; then
  echo "SKIP: needs root (network namespaces, tc, FUSE mounts)"
  exit 77
fi
for tool in glusterd glusterfs prometheus promtool curl; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: $tool not installed (scripts/setup.sh)"
    exit 77
  fi
done

tmp=$(mktemp -d)
prom_pid=
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
cleanup() {
  [[ -n $prom_pid ]] && kill "$prom_pid" 2>/dev/null && wait "$prom_pid" 2>/dev/null
  "$bin" cluster down --name "$NAME" >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT
"$bin" cluster down --name "$NAME" >/dev/null 2>&1 # a crashed earlier run

# A free loopback port for Prometheus' own web/API listener.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
api="http://127.0.0.1:$port"
cat >"$tmp/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: dualpath
    file_sd_configs:
      - files: ['$tmp/targets.json']
        refresh_interval: 1s
EOF
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/data" \
  --web.listen-address="127.0.0.1:$port" >"$tmp/prometheus.log" 2>&1 &
prom_pid=$!
# Ready when its API answers (curl retries refused connections, bounded: 30 tries).
if ! curl -sf --retry 30 --retry-connrefused --retry-delay 1 "$api/-/ready" >/dev/null; then
  cat "$tmp/prometheus.log"
  fail "prometheus did not become ready"
  exit 1
fi

start=$(date +%s)
"$bin" cluster run --name "$NAME" --pd 1P2D --system basic,dualpath --workload synthetic \
  --agents 3 --turns 3 --max-context 1024 --gen 8 --goodput nominal --no-check --timeout 120 \
  --metrics --metrics-targets "$tmp/targets.json" --metrics-config "$tmp/run-prometheus.yml" \
  --json "$tmp/out.json" \
  >"$tmp/table.txt" 2>"$tmp/progress.txt"
rc=$?
echo "--- cluster run exit $rc in $(($(date +%s) - start)) s; progress:"
cat "$tmp/progress.txt"
[[ $rc == 0 ]] || fail "cluster run exited $rc"
grep -q '^metrics: scrape http://127.0.0.1:[0-9]*/metrics (service)$' "$tmp/progress.txt" ||
  fail "cluster run did not print where to scrape the service"
# The prometheus.yml the run wrote is one Prometheus accepts, with the same four targets.
promtool check config "$tmp/run-prometheus.yml" || fail "promtool rejects --metrics-config's file"
for t in $(python3 -c 'import json,sys; [print(t) for g in json.load(open(sys.argv[1])) for t in g["targets"]]' "$tmp/targets.json"); do
  grep -q "'$t'" "$tmp/run-prometheus.yml" || fail "target $t missing from --metrics-config's file"
done
[[ -s $tmp/out.json ]] || {
  fail "no JSON written"
  exit 1
}

python3 - "$api" "$tmp/out.json" <<'PY' || fail "Prometheus checks (above)"
import json, sys, urllib.parse, urllib.request

api, doc = sys.argv[1], json.load(open(sys.argv[2]))
bad = []

def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        bad.append(what)

def query(q):
    url = api + "/api/v1/query?" + urllib.parse.urlencode({"query": q})
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return [(s["metric"], float(s["value"][1])) for s in body["data"]["result"]]

def near(got, want):
    return abs(got - want) <= 0.01 * max(abs(want), 1)

window = "[15m]"
up = {m["process"]: v for m, v in query(f'max_over_time(up{{job="dualpath"}}{window})')}
check(sorted(up) == ["d0", "d1", "p0", "service"], f"targets {sorted(up)}")
for p, v in sorted(up.items()):
    check(v == 1, f"target {p}: max up {v}")
scraped = {(m["system"], m["instance"]): v
           for m, v in query(f"max_over_time(dualpath_process_info{window})")}
for r in doc["results"]:
    s = r["system"]
    n = sum(1 for (system, _) in scraped if system == s)
    check(n == 4, f"{s}: {n} of 4 processes scraped")
    for path, field in (("pe", "read_bytes_prefill"), ("de", "read_bytes_decode")):
        want = sum(x[field] for x in r["records"])
        for metric in ("dualpath_engine_read_bytes_total", "dualpath_request_read_bytes_total"):
            got = query(f'sum(max_over_time({metric}{{system="{s}",path="{path}"}}{window}))')
            v = got[0][1] if got else -1
            check(near(v, want), f"{s} {path}: {metric} {v:.0f} vs JSON {want}")
    # Per link: each node's engine read over its own storage link. Service engine ids follow the
    # --engines list, which is the cluster's node order (p0, d0, d1).
    nodes = ["p0", "d0", "d1"]
    want_node = {n: 0 for n in nodes}
    for x in r["records"]:
        want_node[nodes[x["prefill_engine"]]] += x["read_bytes_prefill"]
        want_node[nodes[x["decode_engine"]]] += x["read_bytes_decode"]
    got_node = {m["node"]: v for m, v in query(
        f'sum by (node) (max_over_time(dualpath_engine_read_bytes_total{{system="{s}"}}{window}))')}
    for n in nodes:
        check(near(got_node.get(n, -1), want_node[n]),
              f"{s} link {n}: {got_node.get(n, -1):.0f} vs JSON {want_node[n]}")
    for metric, q in (
            ("completed", f'max_over_time(dualpath_service_requests_total{{system="{s}",event="completed"}}{window})'),
            ("ttft count", f'max_over_time(dualpath_request_ttft_seconds_count{{system="{s}"}}{window})')):
        got = query(q)
        v = got[0][1] if got else -1
        check(near(v, r["requests"]), f"{s}: {metric} {v:.0f} vs JSON requests {r['requests']}")
# Something was read at all (otherwise the byte checks above prove nothing).
total = sum(x["read_bytes_prefill"] + x["read_bytes_decode"] for r in doc["results"] for x in r["records"])
check(total > 0, f"JSON reports {total} bytes read")
sys.exit(1 if bad else 0)
PY

if ((failures > 0)); then
  echo "--- prometheus log tail:"
  tail -20 "$tmp/prometheus.log"
  echo "metrics system test: $failures failure(s)"
  exit 1
fi
echo "metrics system test: OK"
