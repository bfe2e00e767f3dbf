#!/usr/bin/env bash
# Installs dependencies, builds with ASan+UBSan (the `debug` preset) and runs every test under
# CTest. This is the README's test command; .ci/run calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset debug
cmake --build --preset debug -j2
ctest --preset debug
