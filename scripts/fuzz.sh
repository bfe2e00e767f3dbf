#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, in the `debug` preset's tree: clang, ASan + UBSan, and
# libFuzzer's coverage instrumentation on every project file) and runs each for a bounded time on
# its committed corpus (fuzz/corpus/<target>) plus the text seeds of the RPC targets
# (fuzz/seeds/<target>/*.txtpb, encoded here with protoc). Fails if any target finds a crash, a
# leak, a sanitizer report, a timeout or a broken invariant; the input that did it is saved as
# build/fuzz/artifacts/<target>-crash-* (reproduce: build/debug/bin/<target> FILE).
#
#   scripts/fuzz.sh [--seconds N] [--jobs J] [--update-corpus] [TARGET...]
#     --seconds N       time per target (default 600: the long run of docs/fuzzing.md)
#     --jobs J          targets run at once (default 2)
#     --update-corpus   afterwards, merge what the run found into fuzz/corpus/<target>, minimized
#                       (libFuzzer -merge=1: only inputs that add coverage are kept)
#   The README's test command runs `scripts/fuzz.sh --seconds 15`.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=600
jobs=2
update=0
targets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) seconds=${2:?--seconds needs a value}; shift 2 ;;
    --jobs) jobs=${2:?--jobs needs a value}; shift 2 ;;
    --update-corpus) update=1; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    -*) echo "fuzz: unknown option '$1' (see scripts/fuzz.sh --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[[ $seconds =~ ^[1-9][0-9]*$ ]] || { echo "fuzz: --seconds must be a positive integer, got '$seconds'" >&2; exit 2; }
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "fuzz: --jobs must be a positive integer, got '$jobs'" >&2; exit 2; }

# Every target is fuzz/<target>.cc (fuzz/CMakeLists.txt declares each with its libraries).
mapfile -t all < <(cd fuzz && ls -- *_fuzz.cc | sed 's/\.cc$//')
if [[ ${#targets[@]} -eq 0 ]]; then
  targets=("${all[@]}")
fi
for t in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] || { echo "fuzz: unknown target '$t' (targets: ${all[*]})" >&2; exit 2; }
done

# The test command has built them already (they are part of the debug build); run alone, this
# builds them and the libraries they link.
source scripts/ccache_env.sh
cmake --preset debug >/dev/null
cmake --build --preset debug -j2 --target "${targets[@]}"
bin=build/debug/bin

out=build/fuzz/run
rm -rf "$out"
mkdir -p "$out" build/fuzz/artifacts

# The RPC targets' seeds are text-format call sequences (fuzz/proto/dualpath/fuzz/v1/calls.proto).
encode_seeds() {
  local t=$1 msg=$2
  mkdir -p "$out/seeds/$t"
  for f in fuzz/seeds/"$t"/*.txtpb; do
    [[ -e $f ]] || continue
    grep -v '^#' "$f" | protoc --proto_path=fuzz/proto --proto_path=src/control/proto \
      --proto_path=src/engine/proto --encode="dualpath.fuzz.v1.$msg" \
      fuzz/proto/dualpath/fuzz/v1/calls.proto >"$out/seeds/$t/$(basename "$f" .txtpb)"
  done
}
encode_seeds control_rpc_fuzz ControlCalls
encode_seeds engine_rpc_fuzz EngineCalls

run_one() {
  local t=$1
  mkdir -p "$out/work/$t" "$out/seeds/$t"
  # New inputs go to the first directory (the run's own); the committed corpus is read only.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$bin/$t" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=3072 \
    -print_final_stats=1 -artifact_prefix="build/fuzz/artifacts/$t-" \
    "$out/work/$t" "fuzz/corpus/$t" "$out/seeds/$t" >"$out/$t.log" 2>&1
}

status=0
pids=()
names=()
next=0
while [[ $next -lt ${#targets[@]} || ${#pids[@]} -gt 0 ]]; do
  while [[ $next -lt ${#targets[@]} && ${#pids[@]} -lt $jobs ]]; do
    run_one "${targets[$next]}" &
    pids+=($!)
    names+=("${targets[$next]}")
    next=$((next + 1))
  done
  # Wait for the oldest run (runs take the same time, so this keeps `jobs` busy).
  if wait "${pids[0]}"; then rc=0; else rc=$?; fi
  t=${names[0]}
  pids=("${pids[@]:1}")
  names=("${names[@]:1}")
  stats=$(grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$out/$t.log" |
          sed 's/^stat:://' | tr '\n' ' ')
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9]+[a-zA-Z]*' "$out/$t.log" | tail -1)
  if [[ $rc -eq 0 ]]; then
    echo "fuzz: $t ok (${seconds} s): $cov $stats"
  else
    status=1
    echo "fuzz: $t FAILED (exit $rc); its log: $out/$t.log" >&2
    grep -E 'ERROR|fuzz invariant|SUMMARY|runtime error|Test unit written' "$out/$t.log" | head -20 >&2 || true
  fi
done

if [[ $update -eq 1 && $status -eq 0 ]]; then
  for t in "${targets[@]}"; do
    rm -rf "$out/merged/$t"
    mkdir -p "$out/merged/$t"
    "$bin/$t" -merge=1 "$out/merged/$t" "fuzz/corpus/$t" "$out/work/$t" "$out/seeds/$t" \
      >"$out/$t.merge.log" 2>&1
    rm -rf "fuzz/corpus/$t"
    cp -r "$out/merged/$t" "fuzz/corpus/$t"
    echo "fuzz: $t corpus: $(ls "fuzz/corpus/$t" | wc -l) inputs after merging"
  done
fi
exit $status
