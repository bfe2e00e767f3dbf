#!/usr/bin/env bash
# Installs dependencies, builds the release binary and runs the main job on embedded defaults.
# This is the README's run command.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --system-only  # the Python venvs are for the tests (scripts/test.sh)
bash scripts/build_release.sh  # cmake --preset release + build, the simulator profile-optimized
./build/release/bin/dualpath cluster run --system all
