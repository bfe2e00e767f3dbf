#!/usr/bin/env bash
# Issue 19: `bench storage` on a file system that fills up mid-run failed and left the blocks it
# had written (7 of 16 on an 8 MiB tmpfs). Now a failed run removes everything it made (its block
# files and the directories it created), --keep or not, leaves no temporary file, and never
# touches what was there before it. Needs root to mount the tmpfs; skips (exit 77) otherwise.
set -u
bin=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
# shellcheck source=../lib/small_tmpfs.sh
source "$(dirname "$0")/../lib/small_tmpfs.sh"
small_tmpfs dp_storage_nospace 8m
listing() { (cd "$1" && find . \( -type f -printf 'f %p %s\n' \) -o -printf '%y %p\n' | sort); }

# Something that was there before: a small kept set, and a stranger's file next to it.
fp=00000000000000bb
"$bin" bench storage --dir "$mnt" --files 2 --block-bytes 16384 --keep --fingerprint $fp \
  >/dev/null || fail "small --keep run exited $?"
echo "not the bench's" >"$mnt/$fp/precious"
before=$(listing "$mnt")

for args in "" "--keep" "--fingerprint $fp" "--sync none --keep --fingerprint $fp"; do
  # shellcheck disable=SC2086  # word splitting of $args is intended
  "$bin" bench storage --dir "$mnt" --files 16 --block-bytes 1048576 --queue-depth 4 $args \
    >"$dir/out" 2>"$dir/err"
  rc=$?
  [[ $rc -eq 1 ]] || fail "full file system ($args): exit $rc, want 1 ($(cat "$dir/err"))"
  [[ $(wc -l <"$dir/err") -eq 1 ]] || fail "($args) want one line on stderr: $(cat "$dir/err")"
  grep -qi "no space" "$dir/err" || fail "($args) message does not say no space: $(cat "$dir/err")"
  [[ $(listing "$mnt") == "$before" ]] || fail "a failed run ($args) left or removed files:
$(diff <(echo "$before") <(listing "$mnt"))"
done
echo "storage nospace: ok"
