# bench/lib.sh: the prologue shared by the Google Benchmark ratio scripts (bench/*/*_ratio.sh).
# Source it from a script, then call bench_setup; bench_medians runs the binary.
#
#   source "$(dirname "$0")/../lib.sh"
#   bench_setup NAME_ratio.sh build/release/bin/TARGET TARGET "$@"   # sets $bench and $json
#   bench_medians --benchmark_min_time=0.05                          # JSON of medians in $json

# bench_setup SCRIPT DEFAULT_BINARY TARGET [BINARY]: changes to the repository root, picks the
# binary (the script's first argument, else DEFAULT_BINARY) into $bench, exits 2 naming the CMake
# target when it is not built, and makes $json, a temporary file removed at exit.
bench_setup() {
  local script="$1" default="$2" target="$3"
  cd "$(dirname "${BASH_SOURCE[0]}")/.."
  bench="${4:-$default}"
  if [[ ! -x "$bench" ]]; then
    echo "$script: $bench not built (cmake --build --preset release --target $target)" >&2
    exit 2
  fi
  json="$(mktemp)"
  # shellcheck disable=SC2064  # expand now: $json is fixed from here on
  trap "rm -f '$json'" EXIT
}

# bench_medians [ARGS...]: runs $bench with 5 repetitions (medians tame a shared machine's noise)
# and writes only the aggregates, as JSON, to $json; ARGS go to the binary.
bench_medians() {
  "$bench" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
    --benchmark_format=json "$@" >"$json" 2>/dev/null
}
