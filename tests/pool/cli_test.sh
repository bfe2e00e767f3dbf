#!/usr/bin/env bash
# `dualpath pool create|stat|destroy`: happy path, and bad input -> one line on stderr, exit 2,
# nothing changed.
set -euo pipefail
bin=$1
dir=$(mktemp -d /dev/shm/dpcli-XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

expect_bad() {  # expect_bad <description> <command...>: exit 2, exactly one stderr line
  local what=$1; shift
  set +e
  "$@" >"$dir/out" 2>"$dir/err"
  local rc=$?
  set -e
  [[ $rc -eq 2 ]] || fail "$what: exit $rc, want 2 ($(cat "$dir/err"))"
  [[ $(wc -l <"$dir/err") -eq 1 ]] || fail "$what: want one line on stderr, got: $(cat "$dir/err")"
}

"$bin" pool create "$dir/r" --size 16M --chunk 1M >/dev/null
"$bin" pool stat "$dir/r" | grep -q "model         coherent" || fail "stat text"
"$bin" pool stat "$dir/r" --json | grep -q '"num_chunks":' || fail "stat json"
sum=$(md5sum <"$dir/r")

expect_bad "create over an existing region" "$bin" pool create "$dir/r" --size 16M
expect_bad "bad size unit" "$bin" pool create "$dir/x" --size 12Q
expect_bad "bad model" "$bin" pool create "$dir/x" --size 16M --model weird
expect_bad "region too small" "$bin" pool create "$dir/x" --size 100K
[[ ! -e "$dir/x" ]] || fail "a failed create left a file"
head -c 100000 /dev/urandom >"$dir/foreign"
fsum=$(md5sum <"$dir/foreign")
expect_bad "stat of a foreign file" "$bin" pool stat "$dir/foreign"
grep -q "not a dualpath pool region" "$dir/err" || fail "foreign file message: $(cat "$dir/err")"
expect_bad "destroy of a foreign file" "$bin" pool destroy "$dir/foreign"
[[ $(md5sum <"$dir/foreign") == "$fsum" ]] || fail "foreign file modified"
expect_bad "stat of a directory" "$bin" pool stat "$dir"
mkfifo "$dir/fifo"
expect_bad "stat of a FIFO" "$bin" pool stat "$dir/fifo"
expect_bad "destroy of a directory" "$bin" pool destroy "$dir"
expect_bad "stat of a missing file" "$bin" pool stat "$dir/missing"
# 16 PiB: more than any file system here holds in one file (EFBIG or ENOSPC): no space, exit 2.
expect_bad "a size no file system here holds" "$bin" pool create "$dir/big" --size 16777216G
[[ ! -e "$dir/big" ]] || fail "a create beyond the file system left a file"
[[ $(md5sum <"$dir/r") == "$sum" ]] || fail "region modified by failed commands"

"$bin" pool destroy "$dir/r" >/dev/null
[[ ! -e "$dir/r" ]] || fail "destroy left the region"
echo "pool cli: ok"
