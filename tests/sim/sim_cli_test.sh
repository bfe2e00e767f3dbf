#!/usr/bin/env bash
# `dualpath sim` end to end at small sizes: modes, JSON, determinism, plots, requests too long for
# an engine, bad input.
#   sim_cli_test.sh BIN SOURCE_DIR
set -u
bin=$1
data=$2/data/traces
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
small=(--agents 12 --max-len 16K)

# Default comparison: a table with the three systems, JSON with the documented fields.
"$bin" sim "${small[@]}" --json "$tmp/a.json" >"$tmp/out.txt" || fail "default run exited $?"
for s in basic dualpath oracle; do grep -q "^$s " "$tmp/out.txt" || fail "table lacks $s"; done
grep -q "^last agent to finish" "$tmp/out.txt" || fail "table lacks the critical path"
python3 - "$tmp/a.json" <<'PY' || fail "offline JSON shape"
import json, sys
d = json.load(open(sys.argv[1]))
assert set(d) == {"config", "results", "wall_s", "sim_requests_per_s"}, d.keys()
assert [r["system"] for r in d["results"]] == ["basic", "dualpath", "oracle"]
for r in d["results"]:
    for k in ["jct_s", "ttft_p50_s", "ttft_p99_s", "ttst_s", "tpot_s", "snic_max_over_avg",
              "attn_max_over_avg", "max_aps"]:
        assert k in r, k
    assert r["jct_s"] > 0 and r["ttft_p50_s"] is None and r["max_aps"] is None, r
    p = r["last_agent"]  # the critical path: finishes at the JCT
    assert abs(p["finish_s"] - r["jct_s"]) <= 1e-9 * r["jct_s"], p
    assert p["turns"] > 0 and p["generated_tokens"] > 0 and p["decode_s"] > 0, p
assert d["config"]["pd"] == "2P4D" and d["config"]["agents"] == 12
assert d["config"]["sim"]["slo"] == {"ttft_mean_s": 4.0, "tpot_mean_s": 0.05}  # §7.4 defaults
assert d["results"][2]["jct_s"] <= d["results"][0]["jct_s"]  # oracle never slower than basic
assert d["sim_requests_per_s"] > 0
PY

# Determinism: the same seed gives the same JSON except the wall-clock fields.
"$bin" sim "${small[@]}" --json "$tmp/b.json" >/dev/null || fail "second run"
"$bin" sim "${small[@]}" --seed 9 --json "$tmp/c.json" >/dev/null || fail "seed 9 run"
python3 - "$tmp/a.json" "$tmp/b.json" "$tmp/c.json" <<'PY' || fail "determinism"
import json, sys
a, b, c = (json.load(open(p)) for p in sys.argv[1:])
for d in (a, b, c):
    d.pop("wall_s"); d.pop("sim_requests_per_s")
assert a == b, "same seed, different JSON"
assert a != c, "different seed, same JSON"
PY

# Online: latencies instead of JCT.
"$bin" sim "${small[@]}" --online --aps 0.5 --system dualpath --json "$tmp/o.json" >/dev/null \
  || fail "online run"
python3 - "$tmp/o.json" <<'PY' || fail "online JSON"
import json, sys
r = json.load(open(sys.argv[1]))["results"][0]
assert r["jct_s"] is None and r["ttft_p50_s"] > 0 and r["tpot_s"] > 0 and r["ttst_s"] > 0, r
PY

# Max arrival rate (short horizon to stay fast).
echo '{"online_horizon_s": 120}' >"$tmp/cfg.json"
"$bin" sim "${small[@]}" --find-max-aps --system dualpath --config "$tmp/cfg.json" \
  --json "$tmp/m.json" >/dev/null || fail "find-max-aps run"
python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['results'][0]; assert r['max_aps']>0, r" \
  "$tmp/m.json" || fail "max_aps missing"

# The SLO comes from the config: one no run can meet gives max_aps 0.
echo '{"online_horizon_s": 120, "slo": {"ttft_mean_s": 0.001}}' >"$tmp/strict.json"
"$bin" sim "${small[@]}" --find-max-aps --system dualpath --config "$tmp/strict.json" \
  --json "$tmp/s.json" >/dev/null || fail "find-max-aps with a strict SLO"
python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['results'][0]; assert r['max_aps']==0, r" \
  "$tmp/s.json" || fail "strict SLO not applied"

# A list of systems runs in the order given.
"$bin" sim "${small[@]}" --system oracle,basic --json "$tmp/l.json" >/dev/null || fail "system list"
python3 -c "import json,sys; assert [r['system'] for r in json.load(open(sys.argv[1]))['results']]==['oracle','basic']" \
  "$tmp/l.json" || fail "system list order"

# Ablation order, and plots.
"$bin" sim "${small[@]}" --ablation --plot "$tmp/plots" --json "$tmp/ab.json" >/dev/null \
  || fail "ablation run"
python3 -c "import json,sys; assert [r['system'] for r in json.load(open(sys.argv[1]))['results']]==['basic','layerwise','dualpath-rr','dualpath']" \
  "$tmp/ab.json" || fail "ablation systems"
for f in jct.png snic_basic.png snic_dualpath.png decode_basic.png decode_dualpath.png; do
  [[ -s "$tmp/plots/$f" ]] || fail "plot $f missing"
done

# Issue 25 item 10: a real Claude Code session (data/traces/weka-claude-code-long: prompts of
# 799K-838K tokens) ran into "PackBatch: queue[0] has 332571 cached tokens, more than
# max_batch_kv_tokens 332571 allows" (exit 1) under Basic, whose PE holds ~333K tokens of KV in HBM.
# The run completes, refuses and counts such requests per system (prefill side: Basic; the decode
# side too once decode HBM is made smaller than some prompt + generation), and says so in the table.
long=$data/weka-claude-code-long
echo '{"engine": {"de_hbm_reserved_gb": 47.59}}' >"$tmp/de.json"  # ~810K tokens of KV per DE
for cfg in default small-de; do
  extra=()
  [[ $cfg == small-de ]] && extra=(--config "$tmp/de.json")
  "$bin" sim --trace "$long" --system all "${extra[@]}" --json "$tmp/long-$cfg.json" \
    >"$tmp/long-$cfg.txt" 2>&1 || fail "long prompts ($cfg) exited $?: $(cat "$tmp/long-$cfg.txt")"
  grep -q "^requests too long for any engine" "$tmp/long-$cfg.txt" || fail "table lacks too-long ($cfg)"
  python3 - "$tmp/long-$cfg.json" "$long/trace_0061.json" <<'PY' || fail "too-long counts ($cfg)"
import json, sys
d = json.load(open(sys.argv[1]))
reqs = json.load(open(sys.argv[2]))["requests"]  # one agent, no sub-agents
assert len(reqs) == 6 and min(r["in"] for r in reqs) > 790_000
for r in d["results"]:
    t = r["too_long"]
    pe, de = t["prefill_capacity_tokens"], t["decode_capacity_tokens"]
    # Only Basic prefills without layerwise prefill, i.e. with the whole prompt's KV in HBM.
    assert (pe is not None) == (r["system"] == "basic"), r
    # The counts the trace implies: the prefill side first (sched::CheckTooLong).
    want_pe = sum(1 for q in reqs if pe is not None and q["in"] > pe)
    want_de = sum(1 for q in reqs if not (pe is not None and q["in"] > pe) and q["in"] + q["out"] > de)
    assert (t["prefill"], t["decode"]) == (want_pe, want_de), (r["system"], t, want_pe, want_de)
    assert t["requests"] == want_pe + want_de and r["requests"] == 6 - t["requests"], r
    assert r["agents"] == 1, r  # the session went on past its refused turns
basic = d["results"][0]["too_long"]
assert basic["prefill"] == 6, basic  # 332,571 tokens of PE HBM: every prompt is longer
if sys.argv[1].endswith("small-de.json"):
    assert d["results"][1]["too_long"]["decode"] > 0, d["results"][1]
PY
done

# Bad input: one line on stderr naming the problem, exit status 2.
printf '{"timestamp": 1, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n{"timestamp": oops\n' \
  >"$tmp/bad.jsonl"
echo '{"hardware": {"snic_gbsp": 1}}' >"$tmp/badcfg.json"
check_bad() {
  local want=$1; shift
  "$bin" sim "$@" >/dev/null 2>"$tmp/err.txt"
  local rc=$?
  [[ $rc -eq 2 ]] || fail "'$*' exited $rc, want 2"
  [[ $(wc -l <"$tmp/err.txt") -ge 1 ]] || fail "'$*' printed no error"
  grep -qi -- "$want" "$tmp/err.txt" || fail "'$*' error lacks '$want': $(cat "$tmp/err.txt")"
}
check_bad "unknown model" --model nosuchmodel
check_bad "P/D" --pd 0P2D
check_bad "P/D" --pd 2X4D
check_bad "agents" --agents 0
check_bad "max-len" --max-len lots
check_bad "unknown system" --system fastest
check_bad "unknown system ''" --system basic,,oracle
check_bad "unknown routing 'rr'" --routing rr
check_bad "aps" --online
check_bad "exclusive" --online --aps 1 --find-max-aps
check_bad "bad.jsonl:2" --trace "$tmp/bad.jsonl"
check_bad "snic_gbsp" --config "$tmp/badcfg.json"
check_bad "start-skew" --start-skew -5
check_bad "offline" --online --aps 1 --start-skew 10
echo "sim_cli: ok"
