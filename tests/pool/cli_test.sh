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

# Lock-manager fail-over through the CLI (docs/pool.md): `pool serve` on node 0 holds the role of
# a non-coherent region; killed with SIGKILL, a `pool stat` on node 1 still gets the lock (its own
# process takes the role after the 300 ms lease) instead of spinning, and reports the new manager.
"$bin" pool create "$dir/nc" --size 16M --chunk 1M --model noncoherent --nodes 2 \
  --lease-ms 300 >/dev/null
expect_bad "serve as a node the region does not have" "$bin" pool serve "$dir/nc" --node 2
"$bin" pool serve "$dir/nc" --node 0 >"$dir/serve.out" 2>"$dir/serve.err" &
serve_pid=$!
held=
for _ in $(seq 200); do  # until the server says it is attached (bounded: 200 x 50 ms)
  grep -q "serving" "$dir/serve.out" && { held=1; break; }
  sleep 0.05
done
[[ -n $held ]] || fail "pool serve did not attach: $(cat "$dir/serve.err")"
"$bin" pool stat "$dir/nc" --node 1 --json | grep -q "\"manager_node\":0,\"manager_pid\":$serve_pid}" ||
  fail "the server on node 0 does not hold the lock-manager role"
kill -9 "$serve_pid"
wait "$serve_pid" 2>/dev/null || true
start=$(date +%s%N)
json=$("$bin" pool stat "$dir/nc" --node 1 --json 2>/dev/null) || fail "stat after the manager's death"
echo "pool cli: stat after the manager's SIGKILL took $((($(date +%s%N) - start) / 1000000)) ms"
[[ $json == *'"manager_epoch":2,"manager_node":1,'* ]] ||
  fail "node 1 did not take the lock-manager role over: $json"
"$bin" pool destroy "$dir/nc" >/dev/null
echo "pool cli: ok"
