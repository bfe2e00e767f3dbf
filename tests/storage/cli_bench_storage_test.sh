#!/usr/bin/env bash
# `dualpath bench storage`: bad input is one line on stderr and exit 2; a small run prints the
# documented JSON keys with positive bandwidths; --keep / --read-only re-read the same set; the
# default run leaves nothing behind; a run removes only what it created (issue 19: a second run
# on a kept fingerprint, or --read-only, removed the whole model directory).
set -u
bin=$1
fail() { echo "FAIL: $*"; exit 1; }
dir=$(mktemp -d /var/tmp/dp_cli_storage.XXXXXX)
trap 'rm -rf "$dir"' EXIT

expect_bad() { # ARGS...: exit 2 with exactly one stderr line naming the problem
  local err rc
  err=$("$bin" bench storage "$@" 2>&1 >/dev/null)
  rc=$?
  [[ $rc -eq 2 ]] || fail "bench storage $* exited $rc, want 2"
  [[ $(wc -l <<<"$err") -le 2 ]] || fail "bench storage $*: more than one error line: $err"
  [[ -n $err ]] || fail "bench storage $*: no error message"
}
expect_bad --dir "$dir" --block-bytes 5000
expect_bad --dir "$dir" --block-bytes 4096
expect_bad --dir "$dir" --queue-depth 0
expect_bad --dir "$dir" --files 0
expect_bad --dir "$dir" --sync sometimes
expect_bad --dir "$dir" --read-only
expect_bad --dir "$dir" --read-only --fingerprint nothex
expect_bad --block-bytes 8192
expect_bad --dir "$dir" --files 16777217
expect_bad --dir "$dir" --block-bytes 268439552
expect_bad --dir "$dir" --queue-depth 4096
expect_bad --dir "$dir" --verify-threads 65
[[ -z $(ls -A "$dir") ]] || fail "refused runs created something: $(ls -A "$dir")"

out=$("$bin" bench storage --dir "$dir" --files 8 --block-bytes 65536 --queue-depth 4 --json) ||
  fail "small run exited $?"
for key in read_gbps write_gbps block_bytes queue_depth files; do
  grep -q "\"$key\":" <<<"$out" || fail "json lacks $key: $out"
done
grep -q '"files":8' <<<"$out" || fail "files not echoed: $out"
grep -Eq '"read_gbps":[0-9.]*[1-9]' <<<"$out" || fail "read_gbps not positive: $out"
[[ -z $(find "$dir" -name '*.kvb') ]] || fail "default run left block files behind"

out=$("$bin" bench storage --dir "$dir" --files 8 --block-bytes 65536 --keep --json \
  --json-details) || fail "--keep run exited $?"
fp=$(sed -E 's/.*"fingerprint":"([0-9a-f]+)".*/\1/' <<<"$out")
[[ $(find "$dir" -name '*.kvb' | wc -l) -eq 8 ]] || fail "--keep did not keep 8 files"
"$bin" bench storage --dir "$dir" --files 8 --block-bytes 65536 --fingerprint "$fp" \
  --read-only --json >/dev/null || fail "--read-only of the kept set exited $?"
# One more file than exists: the read of the missing one is an error (exit 1, not data).
"$bin" bench storage --dir "$dir" --files 9 --block-bytes 65536 --fingerprint "$fp" \
  --read-only --json >/dev/null 2>&1
rc=$?; [[ $rc -eq 1 ]] || fail "--read-only of a missing block exited $rc, want 1"
[[ $(find "$dir" -name '*.kvb' | wc -l) -eq 8 ]] || fail "a failed --read-only removed kept files"

# Issue 19: a benchmark removes only what its own run created.
# Every path with its type, and each file's size (a directory's own size may grow on ext4).
listing() { (cd "$1" && find . \( -type f -printf 'f %p %s\n' \) -o -printf '%y %p\n' | sort); }
rm -rf "${dir:?}"/*
fp=00000000000000bb
"$bin" bench storage --dir "$dir" --files 4 --block-bytes 16384 --keep --fingerprint $fp \
  >/dev/null || fail "--keep run with --fingerprint exited $?"
[[ $(find "$dir/$fp" -name '*.kvb' | wc -l) -eq 4 ]] || fail "--keep did not keep 4 files"
echo "not the bench's" >"$dir/$fp/precious"
# Without --keep on the same fingerprint: the kept blocks dedupe (this run created none of them),
# so nothing of the kept set, and nothing else, may go.
before=$(listing "$dir")
"$bin" bench storage --dir "$dir" --files 4 --block-bytes 16384 --fingerprint $fp >/dev/null ||
  fail "second run on the kept fingerprint exited $?"
[[ $(listing "$dir") == "$before" ]] || fail "a run removed files it did not create:
$(diff <(echo "$before") <(listing "$dir"))"
# More files than kept: the run removes its own 4 new blocks and only those.
"$bin" bench storage --dir "$dir" --files 8 --block-bytes 16384 --fingerprint $fp >/dev/null ||
  fail "larger run on the kept fingerprint exited $?"
[[ $(listing "$dir") == "$before" ]] || fail "a larger run left or removed the wrong files:
$(diff <(echo "$before") <(listing "$dir"))"
# --read-only writes and deletes nothing (with or without --keep).
"$bin" bench storage --dir "$dir" --files 4 --block-bytes 16384 --fingerprint $fp --read-only \
  >/dev/null || fail "--read-only exited $?"
[[ $(listing "$dir") == "$before" ]] || fail "--read-only changed the directory:
$(diff <(echo "$before") <(listing "$dir"))"
# --read-only of a set that was never kept: bad input, and nothing is created.
expect_bad --dir "$dir" --files 4 --block-bytes 16384 --fingerprint 00000000000000cc --read-only
[[ ! -e "$dir/00000000000000cc" ]] || fail "--read-only created a model directory"
[[ $(listing "$dir") == "$before" ]] || fail "a refused --read-only changed the directory"
# A default run into a directory it creates removes all of it, directories included.
"$bin" bench storage --dir "$dir/new/deeper" --files 4 --block-bytes 16384 >/dev/null ||
  fail "run into a new --dir exited $?"
[[ ! -e "$dir/new" ]] || fail "a default run left directories it created: $(find "$dir/new")"
[[ $(listing "$dir") == "$before" ]] || fail "a default run changed the directory"
# SIGINT or SIGTERM in the middle of a --keep run: the run stops, removes what it created (a
# stopped run is not a kept set) and exits 128 + the signal. The signal is sent once the run has
# published its first file; 200,000 files take far longer than that on any machine here.
errf=$(mktemp)
for sig in INT TERM; do
  "$bin" bench storage --dir "$dir/stop" --files 200000 --block-bytes 8192 --keep \
    --fingerprint 00000000000000dd >/dev/null 2>"$errf" &
  pid=$!
  for _ in $(seq 1 600); do  # up to 60 s for the first file (a bounded wait for a condition)
    [[ -n $(find "$dir/stop" -name '*.kvb' -print -quit 2>/dev/null) ]] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  kill -$sig $pid
  wait $pid
  rc=$?
  want=$([[ $sig == INT ]] && echo 130 || echo 143)
  [[ $rc -eq $want ]] || fail "SIG$sig during bench storage: exit $rc, want $want: $(cat "$errf")"
  grep -q "SIG$sig" "$errf" || fail "SIG$sig: no message: $(cat "$errf")"
  [[ ! -e "$dir/stop" ]] || fail "SIG$sig: the stopped run left $(find "$dir/stop" | wc -l) paths"
done
rm -f "$errf"
[[ $(listing "$dir") == "$before" ]] || fail "a stopped run changed the directory"
echo "cli_bench_storage: ok"
