#!/usr/bin/env bash
# Installs dependencies, builds the release binary and runs the main job on embedded defaults.
# This is the README's run command.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release
cmake --build --preset release -j2 --target dualpath
./build/release/bin/dualpath cluster run --system all
