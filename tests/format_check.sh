#!/usr/bin/env bash
# Fails if any C++ file in the tree is not clang-formatted; prints the offenders.
set -euo pipefail
root=${1:-.}
cd "$root"
mapfile -t files < <(git ls-files -co --exclude-standard -- '*.h' '*.cc' '*.cpp' '*.hpp' 2>/dev/null ||
  find include src tests bench -name '*.h' -o -name '*.cc')
bad=0
for f in "${files[@]}"; do
  [[ -f "$f" ]] || continue
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "not formatted: $f (run: clang-format -i $f)"
    bad=1
  fi
done
echo "format_check: ${#files[@]} files checked"
exit $bad
