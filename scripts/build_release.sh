#!/usr/bin/env bash
# Builds the release `dualpath` binary with the simulator's hot path (dualpath_sim, dualpath_sched)
# optimized from a profile (PGO, issue 27: ~9 % less CPU per simulated request; docs/sim.md
# "Simulator speed"). Called by scripts/run.sh; needs what scripts/setup.sh installs.
#
# Stages, in build/release (CMake's DUALPATH_SIM_PGO):
#   1. generate: sim and sched instrumented; the binary runs two training simulations, shapes and
#      sizes other than the benchmark's (8P16D with 8K agents, all systems; 2P4D with 2K agents,
#      the ablation), and writes its counts to build/release/pgo;
#   2. use: sim and sched compiled again with those counts, `dualpath` linked.
# Profiles change only the code's layout and inlining, never what it computes: the simulator's
# results are the same with or without (the release build has no -ffast-math and no FMA).
# When the sim/sched sources and the compiler are those the kept profile was made from
# (build/release/pgo/source.sha256), stage 1 is skipped. DUALPATH_NO_PGO=1 builds without a
# profile.
#
# Usage: scripts/build_release.sh [extra targets...]   (from any directory)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ccache_env.sh
build=build/release
pgo=$build/pgo
if [[ -n ${DUALPATH_NO_PGO:-} ]]; then
  cmake --preset release -DDUALPATH_SIM_PGO= >/dev/null
  cmake --build --preset release -j2 --target dualpath "$@"
  exit 0
fi
# What the profile depends on: the two libraries' sources and headers, and the compiler.
source_hash() {
  {
    find src/sim src/sched include/dualpath/sim include/dualpath/sched include/dualpath/kv -type f \
      \( -name '*.cc' -o -name '*.h' \) ! -name '*_test.cc' -print0 | sort -z | xargs -0 sha256sum
    c++ --version | head -1
  } | sha256sum | cut -d' ' -f1
}
want=$(source_hash)
if [[ ! -f $pgo/source.sha256 || $(cat "$pgo/source.sha256") != "$want" ]]; then
  echo "build_release: profiling the simulator (stage 1 of 2)"
  cmake --preset release -DDUALPATH_SIM_PGO=generate >/dev/null
  cmake --build --preset release -j2 --target dualpath
  rm -rf "$pgo"
  "$build/bin/dualpath" sim --pd 8P16D --agents 8K --system all >/dev/null
  "$build/bin/dualpath" sim --agents 2K --system all --ablation >/dev/null
  echo "$want" >"$pgo/source.sha256"
  echo "build_release: optimizing with the profile (stage 2 of 2)"
fi
cmake --preset release -DDUALPATH_SIM_PGO=use >/dev/null
cmake --build --preset release -j2 --target dualpath "$@"
