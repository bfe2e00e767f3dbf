#!/usr/bin/env bash
# Installs dependencies; builds the tests labelled `tsan` (multithreaded code) with ThreadSanitizer
# and runs them; then builds everything with ASan+UBSan (the `debug` preset: clang, its tree also
# holds the libFuzzer targets) and runs every test under CTest; then runs each libFuzzer target for
# 15 s (scripts/fuzz.sh, which finds them built); then the Python package's tests (pytest in the
# project's venvs, scripts/test_python.sh), whose closing summary line is the last one printed.
# This is the README's test command; .ci/run calls exactly this.
# The Python venvs (scripts/setup.sh --venvs-only: on a fresh machine pip downloads and unpacks
# ~26 GB, 25-50 minutes spent waiting on the network and the disk, not the CPU) are made in the
# background while the C++ builds and tests run; the Python phase waits for them. Once made, that
# takes seconds. Their output goes to build/setup-venvs.log and is printed when they are waited for.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --system-only
mkdir -p build
venv_log=build/setup-venvs.log
# Its own process group (setsid), so that a run that stops early stops pip and its children too
# (an interrupted venv has no stamp yet and the next setup resumes it).
setsid bash scripts/setup.sh --venvs-only >"$venv_log" 2>&1 &
venv_pid=$!
echo "test: making the Python venvs in the background (pid $venv_pid, log $venv_log)"
stop_venvs() {
  if [[ -n ${venv_pid:-} ]] && kill -0 "$venv_pid" 2>/dev/null; then
    echo "test: stopping the background venv setup (pid $venv_pid); the next run resumes it" >&2
    kill -TERM -- "-$venv_pid" 2>/dev/null || true
  fi
}
trap stop_venvs EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
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

# After CTest: waits for the venvs, then installs the Python package into them and runs pytest.
if wait "$venv_pid"; then venv_rc=0; else venv_rc=$?; fi
venv_pid=
cat "$venv_log"
if ((venv_rc != 0)); then
  echo "test: the venv setup (scripts/setup.sh --venvs-only) failed with exit $venv_rc; its output is above and in $venv_log" >&2
  exit 1
fi
bash scripts/test_python.sh
