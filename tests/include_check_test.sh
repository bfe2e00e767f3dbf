#!/usr/bin/env bash
# Tests tests/include_check.py on small made-up trees: a clean tree passes, and each kind of
# violation fails naming the file, the line and the component. (The real tree is checked by the
# include_check test itself.)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
check="$here/include_check.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

# A tree of three components: b may use a, a may use nothing, cli may use anything.
make_tree() {
  local r=$1
  mkdir -p "$r/docs" "$r/src/a" "$r/src/b" "$r/src/cli" "$r/include/dualpath/a" \
    "$r/include/dualpath/b"
  cat >"$r/docs/architecture.md" <<'EOF'
# Made up

| component | paths | may use |
|---|---|---|
| a | `a/` | |
| b | `b/` | a |
| cli | `cli/` | * |

After the table.
EOF
  printf '#pragma once\n#include <string>\n' >"$r/include/dualpath/a/a.h"
  printf '#pragma once\n#include "dualpath/a/a.h"\n' >"$r/include/dualpath/b/b.h"
  printf '#pragma once\n' >"$r/src/a/private.h"
  printf '#include "dualpath/a/a.h"\n\n#include "a/private.h"\n' >"$r/src/a/a.cc"
  printf '#include "dualpath/b/b.h"\n#include "dualpath/a/a.h"\n' >"$r/src/b/b.cc"
  # A unit test of b may use what b may use.
  printf '#include "dualpath/a/a.h"\n' >"$r/src/b/b_test.cc"
  printf '#include "dualpath/b/b.h"\n' >"$r/src/cli/main.cc"
  printf 'dualpath_library(a SOURCES a.cc)\ntarget_link_libraries(dualpath PRIVATE dualpath_a)\n' \
    >"$r/src/a/CMakeLists.txt"
  cat >"$r/src/b/CMakeLists.txt" <<'EOF'
# dualpath_b uses dualpath_a
dualpath_library(b
  SOURCES b.cc
  PUBLIC_DEPS dualpath_a
  PRIVATE_DEPS fmt::fmt)
dualpath_test(b_test SOURCES b_test.cc DEPS dualpath_b dualpath_a)
EOF
  printf 'add_executable(dualpath main.cc)\n' >"$r/src/cli/CMakeLists.txt"
}

# expect_fail NAME EXPECTED-LINE: runs the check on $tmp/NAME and wants exit 1 and that line.
expect_fail() {
  local out rc=0
  out=$(python3 "$check" "$tmp/$1" 2>&1) || rc=$?
  if [[ $rc -ne 1 ]] || ! grep -qF -- "$2" <<<"$out"; then
    echo "FAIL $1: want exit 1 and '$2', got exit $rc:"
    echo "$out"
    fail=1
  else
    echo "ok   $1: $2"
  fi
}

make_tree "$tmp/clean"
if out=$(python3 "$check" "$tmp/clean" 2>&1); then
  echo "ok   clean: $(tail -1 <<<"$out")"
else
  echo "FAIL clean tree: $out"
  fail=1
fi
grep -q "3 components, 7 includes and 4 links checked, 0 violation" <<<"$out" ||
  { echo "FAIL clean: unexpected counts: $out"; fail=1; }

make_tree "$tmp/up"  # a lower layer reaching up
printf '#include "dualpath/b/b.h"\n' >>"$tmp/up/src/a/a.cc"
expect_fail up 'src/a/a.cc:4: #include "dualpath/b/b.h": a may not use b'

make_tree "$tmp/header"  # the same in a public header
printf '#include "dualpath/b/b.h"\n' >>"$tmp/header/include/dualpath/a/a.h"
expect_fail header 'include/dualpath/a/a.h:3: #include "dualpath/b/b.h": a may not use b'

make_tree "$tmp/private"  # another folder's private header, even one b may use
printf '#include "a/private.h"\n' >>"$tmp/private/src/b/b.cc"
expect_fail private 'src/b/b.cc:3: #include "a/private.h": private header of a (src/a/)'

make_tree "$tmp/test"  # a unit test of a may not use b either
printf '#include "dualpath/b/b.h"\n' >"$tmp/test/src/a/a_test.cc"
expect_fail test 'src/a/a_test.cc:1: #include "dualpath/b/b.h": a may not use b'

make_tree "$tmp/link"  # the link graph
sed -i 's/dualpath_library(a SOURCES a.cc)/dualpath_library(a SOURCES a.cc PRIVATE_DEPS dualpath_b)/' \
  "$tmp/link/src/a/CMakeLists.txt"
expect_fail link 'src/a/CMakeLists.txt:1: dualpath_a links dualpath_b: a may not use b'

make_tree "$tmp/link2"  # the line of the offending target in a command over several lines
sed -i 's/  PRIVATE_DEPS fmt::fmt)/  PRIVATE_DEPS fmt::fmt\n    dualpath_cli)/' "$tmp/link2/src/b/CMakeLists.txt"
expect_fail link2 'src/b/CMakeLists.txt:6: dualpath_b links dualpath_cli: b may not use cli'

make_tree "$tmp/newdir"  # a component the table does not know
mkdir -p "$tmp/newdir/src/c"
printf '#include "dualpath/a/a.h"\n' >"$tmp/newdir/src/c/c.cc"
expect_fail newdir 'src/c/c.cc: no component in docs/architecture.md owns it'

make_tree "$tmp/unknown"  # an include of a component the table does not know
printf '#include "dualpath/zz/z.h"\n' >>"$tmp/unknown/src/b/b.cc"
expect_fail unknown 'src/b/b.cc:3: #include "dualpath/zz/z.h": no component in docs/architecture.md'

exit $fail
