#!/usr/bin/env bash
# Installs dependencies; builds the tests labelled `tsan` (multithreaded code) with
# ThreadSanitizer and runs them; then builds everything with ASan+UBSan (the `debug` preset) and
# runs every test under CTest; then runs each libFuzzer target for 15 s (scripts/fuzz.sh); then the
# Python package's tests (pytest in the project's venvs, scripts/test_python.sh), whose closing
# summary line is the last one printed.
# This is the README's test command; .ci/run calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/ccache_env.sh

cmake --preset debug
# The tsan preset runs only tests labelled tsan; their CTest names are their target names.
mapfile -t tsan_targets < <(ctest --test-dir build/debug -N -L tsan | awk '/Test +#/{print $3}')
cmake --preset tsan
cmake --build --preset tsan -j2 --target "${tsan_targets[@]}"
ctest --preset tsan

cmake --build --preset debug -j2
ctest --preset debug

# Every libFuzzer target (fuzz/) for 15 s on its committed corpus, two at a time; the long run
# is `scripts/fuzz.sh` (10 minutes per target, docs/fuzzing.md).
bash scripts/fuzz.sh --seconds 15

# After CTest: installs the Python package into .venv and .venv-sglang and runs pytest.
bash scripts/test_python.sh
