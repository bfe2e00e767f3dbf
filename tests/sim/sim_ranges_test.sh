#!/usr/bin/env bash
# Issue 19, defects 3 and 7: numbers that cannot be true are refused where they are parsed (exit
# status 2, one stderr line naming the field), and memory stays bounded by the workload's size,
# not by simulated time or a rate.
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# Memory cap for every run below: a regression that sizes memory by simulated time is killed
# instead of taking the machine. ASan reserves terabytes of address space, so under ASan the cap
# is its resident-set limit rather than ulimit -v.
if grep -q __asan_init "$bin"; then
  export ASAN_OPTIONS="${ASAN_OPTIONS:-}:hard_rss_limit_mb=1500"
else
  ulimit -v 3000000  # KiB
fi

# check_bad WANT ARGS...: exit 2 within 60 s, exactly one stderr line, and it contains WANT.
check_bad() {
  local want=$1; shift
  timeout 60 "$bin" "$@" >/dev/null 2>"$tmp/err.txt"
  local rc=$?
  [[ $rc -eq 2 ]] || fail "'$*' exited $rc, want 2: $(head -c 400 "$tmp/err.txt")"
  [[ $(wc -l <"$tmp/err.txt") -eq 1 ]] || fail "'$*' printed not one line: $(cat "$tmp/err.txt")"
  grep -qF -- "$want" "$tmp/err.txt" || fail "'$*' error lacks '$want': $(cat "$tmp/err.txt")"
}

# weka FILE THINK [T]: a two-turn WEKA session whose second turn waits THINK seconds.
weka() {
  printf '{"block_size": 64, "requests": [
  {"t": 0, "type": "n", "in": 100, "out": 10, "hash_ids": [1]},
  {"t": %s, "type": "n", "in": 200, "out": 10, "hash_ids": [1, 2, 3], "think_time": %s}]}\n' \
    "${3:-1}" "$2" >"$1"
}

# Defect 3: a think time of 1e8 s took 3 GB, 1e12 s ended in std::bad_alloc.
for think in 1e8 1e12 1e308; do
  weka "$tmp/think_$think.json" "$think"
  check_bad 'field "think_time" = ' sim --trace "$tmp/think_$think.json" --system dualpath
done
# ... and trace times of 1e308 gave a JCT of inf and -nan.
weka "$tmp/t.json" 1 1e308
check_bad 'field "t" = 1e+308 is outside [0, 1000000] s' sim --trace "$tmp/t.json"
printf '{"timestamp": 1e308, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n' \
  >"$tmp/ts.jsonl"
check_bad 'field "timestamp" = 1e+308 is outside' sim --trace "$tmp/ts.jsonl"
# Defect 7: output_length 2^64-1 was accepted and wrapped.
printf '{"timestamp": 1, "input_length": 10, "output_length": 18446744073709551615, "hash_ids": [1]}\n' \
  >"$tmp/out.jsonl"
check_bad 'field "output_length" = 18446744073709551615 is outside [0, 1073741824] tokens' \
  sim --trace "$tmp/out.jsonl"

# Defect 3: a storage NIC of 1e-9 Gbit/s reached 12 GB in 20 s; every rate has a floor.
cfg() { echo "$1" >"$tmp/cfg.json"; }
cfg '{"hardware": {"snic_gbps": 1e-9}}'
check_bad 'hardware.snic_gbps = 1e-09 is outside [0.01, 10000] Gbit/s' sim --config "$tmp/cfg.json"
cfg '{"hardware": {"cnic_gbps": 0.000001}}'
check_bad 'hardware.cnic_gbps = 1e-06 is outside' sim --config "$tmp/cfg.json"
cfg '{"sched": {"fetch_interval_ms": 1e-12}}'
check_bad 'sched.fetch_interval_ms = 1e-12 is outside' sim --config "$tmp/cfg.json"
cfg '{"engine": {"max_decode_batch": 4294967297}}'
check_bad 'engine.max_decode_batch = 4294967297 is outside [1, 65536]' sim --config "$tmp/cfg.json"
# A number no double holds is bad input too, not a raw library exception.
cfg '{"hardware": {"snic_gbps": 1e999}}'
check_bad 'number overflow' sim --config "$tmp/cfg.json"
printf '{"block_size": 64, "requests": [{"t": 1e999, "in": 10, "out": 1, "hash_ids": []}]}\n' \
  >"$tmp/big.json"
check_bad 'number overflow' sim --trace "$tmp/big.json"

# Model geometry whose KV bytes per token overflow 64 bits.
printf '{"name": "huge", "attention": "gqa", "num_layers": 4294967295, "num_heads": 4294967295,
  "num_kv_heads": 4294967295, "head_dim": 4294967295, "params_active_non_embedding": 1}\n' \
  >"$tmp/huge.json"
check_bad "key 'num_layers' = 4294967295 is outside [1, 4096]" sim --model "$tmp/huge.json"

# Flags.
check_bad '--aps = 1e-300 is outside' sim --online --aps 1e-300 --agents 4 --max-len 16K
check_bad '--agents = 20000000 is outside' sim --agents 20000000

# The mechanism, in range: a think time at the ceiling (1e6 s) with 1 ms windows used to size
# one bin per window of simulated time (1e9 windows, 8 GB per storage NIC). Now the windows widen
# and the run finishes under the memory cap above.
weka "$tmp/far.json" 1e6
cfg '{"snic_window_s": 0.001}'
timeout 120 "$bin" sim --trace "$tmp/far.json" --config "$tmp/cfg.json" --json "$tmp/far_out.json" \
  >/dev/null 2>"$tmp/err.txt" || fail "in-range far think time exited $?: $(head -c 400 "$tmp/err.txt")"
python3 - "$tmp/far_out.json" <<'PY' || fail "far think time: results"
import json, math, sys
for r in json.load(open(sys.argv[1]))["results"]:
    assert math.isfinite(r["jct_s"]) and r["jct_s"] >= 1e6, r
    assert math.isfinite(r["mean_agent_jct_s"]), r
PY
echo "sim ranges: ok"
