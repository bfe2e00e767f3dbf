#!/usr/bin/env bash
# Issue 19: on a small tmpfs, `pool create --size 16G` died with SIGBUS, `--size 64M` "succeeded"
# with a sparse file whose later writes would SIGBUS, and `bench pool` died the same way leaving
# its temporary directory. Now the region is reserved at creation: a size the file system cannot
# hold is one line naming --size (or --mib), exit 2, and nothing is left behind.
# Needs root to mount the tmpfs; skips (exit 77) otherwise.
set -u
bin=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
# shellcheck source=../lib/small_tmpfs.sh
source "$(dirname "$0")/../lib/small_tmpfs.sh"
small_tmpfs dp_pool_nospace 8m

expect_nospace() {  # <flag> <command...>: exit 2, one stderr line naming the flag and no space
  local flag=$1; shift
  "$@" >"$dir/out" 2>"$dir/err"
  local rc=$?
  [[ $rc -eq 2 ]] || fail "$*: exit $rc, want 2 ($(cat "$dir/err"))"
  [[ $(wc -l <"$dir/err") -eq 1 ]] || fail "$*: want one line on stderr, got: $(cat "$dir/err")"
  grep -q -- "$flag" "$dir/err" || fail "$*: message does not name $flag: $(cat "$dir/err")"
  grep -qi "no space" "$dir/err" || fail "$*: message does not say no space: $(cat "$dir/err")"
}

expect_nospace --size "$bin" pool create "$mnt/r" --size 16G
[[ ! -e $mnt/r ]] || fail "a failed create left $mnt/r"
expect_nospace --size "$bin" pool create "$mnt/r" --size 64M
[[ ! -e $mnt/r ]] || fail "a failed create left $mnt/r"
[[ -z $(ls -A "$mnt") ]] || fail "failed creates left files: $(ls -A "$mnt")"

# What fits is created, fully backed (a write to every page cannot fault), and removable.
"$bin" pool create "$mnt/r" --size 4M --chunk 64K >/dev/null || fail "4M create exited $?"
[[ $(($(stat -c %b "$mnt/r") * 512)) -ge $(stat -c %s "$mnt/r") ]] || fail "4M region is sparse"
"$bin" pool stat "$mnt/r" >/dev/null || fail "stat of the 4M region exited $?"
# The remaining space is now too small for a second region of the same size.
expect_nospace --size "$bin" pool create "$mnt/r2" --size 6M
[[ ! -e $mnt/r2 ]] || fail "a failed create left $mnt/r2"
"$bin" pool destroy "$mnt/r" >/dev/null || fail "destroy exited $?"

expect_nospace --mib "$bin" bench pool --dir "$mnt" --mib 64 --passes 1 --model coherent
[[ -z $(ls -A "$mnt") ]] || fail "a failed bench pool left: $(ls -A "$mnt")"
echo "pool nospace: ok"
