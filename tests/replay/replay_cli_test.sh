#!/usr/bin/env bash
# `dualpath cluster run` input errors: one line on stderr naming what was wrong, exit 2, before
# any cluster is touched (no root needed).
set -uo pipefail
bin=$(realpath "$1")
failures=0
expect_bad() {
  local want=$1
  shift
  local err rc
  err=$("$bin" cluster run --name rpclitest "$@" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc != 2 ]]; then
    echo "FAIL: cluster run $* exited $rc, want 2 ($err)"
    failures=$((failures + 1))
  elif [[ $err != *"$want"* ]] || [[ $(printf '%s\n' "$err" | wc -l) != 1 ]]; then
    echo "FAIL: cluster run $*: want one line naming '$want', got: $err"
    failures=$((failures + 1))
  else
    echo "ok: $* -> $err"
  fi
}
expect_bad "--system: unknown system 'fast'" --system fast
expect_bad "0P1D" --pd 0P1D
expect_bad "400" --stor-rate 400
expect_bad "--workload '/nonexistent/x.jsonl'" --workload /nonexistent/x.jsonl
expect_bad "--agents" --agents 0
expect_bad "--max-context" --max-context 10
expect_bad "--goodput 'maybe'" --goodput maybe
expect_bad "vocab" --model-spec vocab=0
expect_bad "--routing: unknown routing 'rr'" --routing rr
expect_bad "--shared-prefix 10 is for --workload codex only" --shared-prefix 10
expect_bad "--shared-prefix = 5000 is outside" --workload codex --max-context 8192 --shared-prefix 5000
# Issue 19: every numeric flag has an upper bound too, so no one number makes the run's memory or
# time unbounded (docs/replay.md "Input ranges").
expect_bad "--agents = 4000000000 is outside" --agents 4000000000
expect_bad "--turns = 100000 is outside" --turns 100000
expect_bad "--max-context = 4000000000 is outside" --max-context 4000000000
expect_bad "--append = 5000 is outside" --append 5000
expect_bad "--gen = 2000 is outside" --gen 2000
expect_bad "--agents x --turns x --max-context" --agents 100000 --turns 1000 --max-context 65536
expect_bad "--aps = 1e-06 is outside" --online --aps 0.000001
expect_bad "--timeout = 1000000000000 is outside" --timeout 1e12
expect_bad "--timeout = 0 is outside" --timeout 0
expect_bad "--block-tokens = 0 is outside" --block-tokens 0
expect_bad "--sample-interval = 1e-05 is outside" --sample-interval 0.00001
expect_bad "--heartbeat-s = 1000000000 is outside" --heartbeat-s 1e9
# Issue 17: fault specs (docs/faults.md).
expect_bad "--fault 'disk@3req': unknown kind 'disk'" --fault disk@3req
expect_bad "--fault 'stor-link@3req': stor-link needs a node" --fault stor-link@3req
expect_bad "--fault duration = 7200 is outside" --fault stor-link:p0@3req:7200
expect_bad "neither Nreq nor Ns" --fault brick@3
expect_bad "--fault 'engine@2req': engine needs a node" --fault engine@2req
expect_bad "engine is not undone (its requests are rescheduled): no duration" --fault engine:d1@2req:5
# Issue 17: a process must be able to wait for its last scrape within the run's stop timeout.
expect_bad "--metrics-wait-s = 30 is outside" --metrics --metrics-wait-s 30
# Issue 16: the store's DRAM size only with the store, and within range.
expect_bad "--store-dram-mib requires --store" --store-dram-mib 64
expect_bad "--store-dram-mib" --store --store-dram-mib 0
# The store's fault kinds and lease TTL only with the store (docs/faults.md).
expect_bad "--fault store-node:p0@3req:0: the store fault kinds need --store" \
  --fault store-node:p0@3req
expect_bad "--fault store-leader@3req:0: the store fault kinds need --store" --fault store-leader@3req
expect_bad "--fault 'store-node@3req': store-node needs a node" --store --fault store-node@3req
expect_bad "--store-ttl requires --store" --store-ttl 3
expect_bad "--store-ttl = 0.5 is outside" --store --store-ttl 0.5
# Issue 29: the KV substrate and the rack pool (docs/e2e.md "KV substrate").
expect_bad "--kv-substrate 'rdma': expected ucx or rack-pool" --kv-substrate rdma
expect_bad "--rack-pool: unknown memory model 'cxl'" --kv-substrate rack-pool --rack-pool cxl
expect_bad "--rack-pool-size = 1048576 is outside" --kv-substrate rack-pool --rack-pool-size 1M
expect_bad "--rack-pool-size: 'lots' is not a size" --kv-substrate rack-pool --rack-pool-size lots
expect_bad "--fault rack-manager@2req:0 needs --kv-substrate rack-pool --rack-pool noncoherent" \
  --kv-substrate rack-pool --fault rack-manager@2req
expect_bad "rack-manager is not undone (a standby takes the role): no duration" \
  --kv-substrate rack-pool --rack-pool noncoherent --fault rack-manager@2req:5
if [[ -e /var/tmp/dualpath-testbed/rpclitest ]]; then
  echo "FAIL: a bad-input run created cluster state"
  failures=$((failures + 1))
fi
((failures == 0)) && echo "replay cli test: OK"
exit $((failures > 0))
