#!/usr/bin/env bash
# The dualpath command: help lists subcommands; unknown subcommands and options exit 2.
set -u
bin=$1
fail() { echo "FAIL: $*"; exit 1; }

out=$("$bin" --help) || fail "--help exited $?"
for sub in $("$bin" --help | awk '/^Subcommands:/{f=1;next} f && NF {print $1}'); do
  "$bin" "$sub" --help >/dev/null || fail "$sub --help exited $?"
done
echo "$out" | grep -q "Subcommands:" || fail "--help does not list subcommands"

"$bin" no-such-command >/dev/null 2>&1
rc=$?; [[ $rc -eq 2 ]] || fail "unknown subcommand exited $rc, want 2"

"$bin" --log-level loud version >/dev/null 2>err.txt
rc=$?; [[ $rc -eq 2 ]] || fail "bad --log-level exited $rc, want 2"
rm -f err.txt
echo "cli_basics: ok"
