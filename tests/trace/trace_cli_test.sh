#!/usr/bin/env bash
# `dualpath trace stats` on the shipped samples and the synthetic generator; bad input gives one
# error line on stderr and exit status 2.
set -u
bin=$1
src=$2
data=$src/data/traces
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# json_field FILE KEY: prints one top-level field of a JSON object.
json_field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

# Mooncake sample: 200 one-turn sessions; human output names the figures.
"$bin" trace stats "$data/mooncake/conversation_trace_head200.jsonl" >"$tmp/out" 2>"$tmp/err" ||
  fail "mooncake stats exited $?: $(cat "$tmp/err")"
grep -Eq '^sessions +200$' "$tmp/out" || fail "mooncake: no 'sessions 200' line: $(cat "$tmp/out")"
grep -q 'ideal hit ratio' "$tmp/out" || fail "mooncake: no ideal hit ratio line"
"$bin" trace stats "$data/mooncake/conversation_trace_head200.jsonl" --json >"$tmp/m.json" ||
  fail "mooncake --json exited $?"
[[ $(json_field "$tmp/m.json" requests) == 200 ]] || fail "mooncake --json: requests != 200"

# Conversations inferred from hash chains: 193 sessions in the first 200 requests.
"$bin" trace stats "$data/mooncake/conversation_trace_head200.jsonl" --infer-sessions --json \
  >"$tmp/mi.json" || fail "--infer-sessions exited $?"
[[ $(json_field "$tmp/mi.json" sessions) == 193 ]] || fail "--infer-sessions: sessions != 193"
[[ $(json_field "$tmp/mi.json" requests) == 200 ]] || fail "--infer-sessions: requests != 200"

# WEKA directory: 3 single-agent sessions + 1 with 3 sub-agents = 7 sessions; hits are high.
"$bin" trace stats "$data/weka-claude-code" --json >"$tmp/w.json" || fail "weka dir exited $?"
[[ $(json_field "$tmp/w.json" sessions) == 7 ]] || fail "weka dir: sessions != 7"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["ideal_hit_ratio"]; sys.exit(0 if 0.8 < r < 1 else 1)' \
  "$tmp/w.json" || fail "weka dir: ideal hit ratio not in (0.8, 1)"

# Synthetic: deterministic for a seed, different for another seed.
"$bin" trace stats --synthetic 64K --sessions 40 --seed 3 --json >"$tmp/s1.json" || fail "synthetic exited $?"
"$bin" trace stats --synthetic 64K --sessions 40 --seed 3 --json >"$tmp/s2.json" || fail "synthetic exited $?"
"$bin" trace stats --synthetic 64K --sessions 40 --seed 4 --json >"$tmp/s3.json" || fail "synthetic exited $?"
cmp -s "$tmp/s1.json" "$tmp/s2.json" || fail "synthetic: same seed, different output"
cmp -s "$tmp/s1.json" "$tmp/s3.json" && fail "synthetic: different seeds, same output"
[[ $(json_field "$tmp/s1.json" sessions) == 40 ]] || fail "synthetic: sessions != 40"

# Figure 9 sweep: x4 appends keep every trajectory within MaxLen and cut the turn count.
"$bin" trace stats --synthetic 64K --sessions 40 --seed 3 --scale-append 4 --json >"$tmp/x4.json" ||
  fail "--scale-append exited $?"
python3 -c 'import json,sys; a,b=(json.load(open(p)) for p in sys.argv[1:]); sys.exit(0 if b["turns_per_session"] < a["turns_per_session"] and b["total_mean"] <= 65536 else 1)' \
  "$tmp/s1.json" "$tmp/x4.json" || fail "--scale-append 4 did not shorten trajectories"

# --turns-csv: a header and one line per turn, matching the request count.
"$bin" trace stats "$data/weka-claude-code/trace_0057.json" --json --turns-csv "$tmp/t.csv" \
  >"$tmp/t.json" || fail "--turns-csv exited $?"
[[ $(head -1 "$tmp/t.csv") == "session,turn,append,gen" ]] || fail "--turns-csv: bad header"
[[ $(($(wc -l <"$tmp/t.csv") - 1)) == $(json_field "$tmp/t.json" requests) ]] ||
  fail "--turns-csv: line count != requests"

# Bad input: exit 2 and exactly one line on stderr that names the problem.
expect_bad() {
  local want=$1
  shift
  "$bin" "$@" >/dev/null 2>"$tmp/err"
  local rc=$?
  [[ $rc -eq 2 ]] || fail "'$*' exited $rc, want 2 (stderr: $(cat "$tmp/err"))"
  [[ $(wc -l <"$tmp/err") -eq 1 ]] || fail "'$*' printed $(wc -l <"$tmp/err") stderr lines, want 1"
  grep -q -- "$want" "$tmp/err" || fail "'$*': stderr lacks '$want': $(cat "$tmp/err")"
}
head -3 "$data/mooncake/conversation_trace_head200.jsonl" >"$tmp/bad.jsonl"
echo '{"timestamp": 5, "input_length": 10, "output_length": 1}' >>"$tmp/bad.jsonl"
expect_bad 'bad.jsonl:4: missing field "hash_ids"' trace stats "$tmp/bad.jsonl"
echo '{"timestamp": 5, "input_length": -10' >"$tmp/torn.jsonl"
expect_bad 'torn.jsonl:1: not valid JSON' trace stats "$tmp/torn.jsonl"
echo '{"block_size": 64, "requests": [{"t": 0, "in": 64, "out": -1, "hash_ids": [1]}]}' >"$tmp/neg.json"
expect_bad 'neg.json:/requests/0: field "out" must be a non-negative integer' trace stats "$tmp/neg.json"
expect_bad 'no such file or directory' trace stats "$tmp/absent.jsonl"
touch "$tmp/trace.csv"
expect_bad 'cannot tell the format' trace stats "$tmp/trace.csv"
expect_bad 'want a MaxLen such as' trace stats --synthetic 64Q
expect_bad 'outside \[8, 1024\]' trace stats --synthetic 4K
expect_bad 'exactly one of' trace stats
expect_bad 'exactly one of' trace stats --synthetic 64K "$tmp/bad.jsonl"
expect_bad 'need --synthetic' trace stats "$data/weka-claude-code" --scale-gen 2
expect_bad 'outside (0, 1000\]' trace stats --synthetic 64K --scale-append 0
expect_bad 'not a one-turn Mooncake request' trace stats "$data/weka-claude-code" --infer-sessions
mkdir "$tmp/empty"
expect_bad 'no \*.json session files' trace stats "$tmp/empty"

echo "trace_cli: ok"
