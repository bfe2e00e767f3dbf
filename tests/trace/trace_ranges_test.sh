#!/usr/bin/env bash
# Issue 19, defect 7: trace numbers outside their stated ranges (docs/trace.md "Input ranges") are
# refused where they are parsed: exit status 2 and one stderr line naming the file, the record and
# the field. Nothing is accepted to wrap around or become inf later.
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

check_bad() {
  local want=$1; shift
  timeout 60 "$bin" "$@" >/dev/null 2>"$tmp/err.txt"
  local rc=$?
  [[ $rc -eq 2 ]] || fail "'$*' exited $rc, want 2: $(head -c 400 "$tmp/err.txt")"
  [[ $(wc -l <"$tmp/err.txt") -eq 1 ]] || fail "'$*' printed not one line: $(cat "$tmp/err.txt")"
  grep -qF -- "$want" "$tmp/err.txt" || fail "'$*' error lacks '$want': $(cat "$tmp/err.txt")"
}
mooncake() {  # mooncake FILE TIMESTAMP INPUT OUTPUT
  printf '{"timestamp": 5, "input_length": 600, "output_length": 2, "hash_ids": [1, 2]}\n' >"$1"
  printf '{"timestamp": %s, "input_length": %s, "output_length": %s, "hash_ids": [1]}\n' \
    "$2" "$3" "$4" >>"$1"
}

# Mooncake output_length 2^64-1 was accepted and wrapped.
mooncake "$tmp/a.jsonl" 1 10 18446744073709551615
check_bad 'a.jsonl:2: field "output_length" = 18446744073709551615 is outside [0, 1073741824] tokens' \
  trace stats "$tmp/a.jsonl"
check_bad 'field "output_length"' trace stats "$tmp/a.jsonl" --infer-sessions
mooncake "$tmp/b.jsonl" 1 18446744073709551615 1
check_bad 'field "input_length" = 18446744073709551615 is outside [1, 1073741824]' \
  trace stats "$tmp/b.jsonl"
mooncake "$tmp/c.jsonl" 1e308 10 1
check_bad 'field "timestamp" = 1e+308 is outside [0, 1000000000] ms' trace stats "$tmp/c.jsonl"
mooncake "$tmp/d.jsonl" -1 10 1
check_bad 'field "timestamp" = -1 is outside' trace stats "$tmp/d.jsonl"

# WEKA: times and token counts.
weka() {  # weka FILE FIELD VALUE: one request with FIELD overridden
  python3 - "$@" <<'PY'
import sys
path, field, value = sys.argv[1:]
req = {"t": "0", "type": '"n"', "in": "100", "out": "10", "hash_ids": "[1]", "think_time": "0"}
req[field] = value
body = ", ".join('"%s": %s' % kv for kv in req.items())
open(path, "w").write('{"block_size": 64, "requests": [{%s}]}\n' % body)
PY
}
weka "$tmp/w1.json" think_time 1e8
check_bad 'w1.json:/requests/0: field "think_time" = 100000000 is outside [0, 1000000] s' \
  trace stats "$tmp/w1.json"
weka "$tmp/w2.json" t 1e308
check_bad 'field "t" = 1e+308 is outside [0, 1000000] s' trace stats "$tmp/w2.json"
weka "$tmp/w3.json" out 18446744073709551615
check_bad 'field "out" = 18446744073709551615 is outside' trace stats "$tmp/w3.json"
weka "$tmp/w4.json" think_time 1e999
check_bad 'number overflow' trace stats "$tmp/w4.json"
printf '{"block_size": 4294967360, "requests": []}\n' >"$tmp/w5.json"
check_bad 'field "block_size" = 4294967360 is outside [1, 1048576] tokens' trace stats "$tmp/w5.json"

# The ceilings themselves are accepted.
weka "$tmp/ok.json" think_time 1e6
"$bin" trace stats "$tmp/ok.json" >/dev/null 2>"$tmp/err.txt" || fail "think_time 1e6: $(cat "$tmp/err.txt")"
echo "trace ranges: ok"
