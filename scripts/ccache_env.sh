# Sourced by scripts/test.sh and scripts/run.sh: compile through ccache (installed by setup.sh),
# with paths relative to the checkout, so a fresh clone on a machine that built before (CI tests
# a fresh clone each time) reuses the objects of earlier builds. The cache is ccache's default
# (~/.cache/ccache, 5 GB). CMake reads these variables when it configures a new build tree.
# DUALPATH_NO_CCACHE=1 turns it off.
if [[ -z ${DUALPATH_NO_CCACHE:-} ]] && command -v ccache >/dev/null; then
  export CMAKE_C_COMPILER_LAUNCHER=${CMAKE_C_COMPILER_LAUNCHER:-ccache}
  export CMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
  export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
fi
