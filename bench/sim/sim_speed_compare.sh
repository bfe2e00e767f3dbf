#!/usr/bin/env bash
# Compares two `dualpath` binaries on the simulator's speed (issue 27) and checks that their
# results are byte-identical: the runs alternate (base, new, base, new, ...) so both see the same
# machine load, and every pair's JSON must be identical apart from the wall-time fields (`wall_s`,
# `sim_requests_per_s`). Prints per run the user CPU seconds (/usr/bin/time), the sim's own
# `sim_requests_per_s`, and the load average before the run; then the median user-CPU ratio
# base/new per command. On a shared machine the wall clock counts other processes' time, so the
# user-CPU ratio is the figure to compare (docs/sim.md "Simulator speed").
#
# Usage: bench/sim/sim_speed_compare.sh BASE_DUALPATH NEW_DUALPATH [REPS] [AGENTS]
#   REPS: pairs per command (default 3); AGENTS: the 48P96D run's --agents (default 48K).
# Build each as a user gets it: scripts/build_release.sh (the release preset, the simulator
#   profile-optimized; copy build/release/bin/dualpath aside for the base). To compare code
#   changes alone, build both with DUALPATH_NO_PGO=1 scripts/build_release.sh.
# Exit status: 0 identical, 1 a JSON differs (the diff is printed), 2 bad usage.
set -euo pipefail
if [[ $# -lt 2 || ! -x $1 || ! -x $2 ]]; then
  echo "usage: $0 BASE_DUALPATH NEW_DUALPATH [REPS] [AGENTS] (both executable)" >&2
  exit 2
fi
base=$(realpath "$1")
new=$(realpath "$2")
reps=${3:-3}
agents=${4:-48K}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

commands=("sim --pd 48P96D --agents $agents --system dualpath"
  "sim --agents 2K --system all --ablation")
# The JSON without the fields that measure wall time.
strip() { grep -v -E '"(wall_s|sim_requests_per_s)"' "$1"; }
rate() { /usr/bin/python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["sim_requests_per_s"]))' "$1"; }

status=0
for ci in "${!commands[@]}"; do
  cmd=${commands[$ci]}
  echo "== dualpath $cmd"
  printf '%-4s %-4s %10s %12s %8s\n' rep bin user_s req_per_s load1
  for ((r = 1; r <= reps; ++r)); do
    for which in base new; do
      bin=$base
      [[ $which == new ]] && bin=$new
      load=$(cut -d' ' -f1 /proc/loadavg)
      out="$dir/$which.$ci.$r.json"
      # shellcheck disable=SC2086  # $cmd is a flag list
      /usr/bin/time -f %U -o "$dir/time" "$bin" $cmd --json "$out" >/dev/null
      user=$(cat "$dir/time")
      echo "$user" >>"$dir/$which.$ci.user"
      printf '%-4s %-4s %10s %12s %8s\n' "$r" "$which" "$user" "$(rate "$out")" "$load"
    done
    if ! diff <(strip "$dir/base.$ci.$r.json") <(strip "$dir/new.$ci.$r.json") >"$dir/diff"; then
      echo "JSON DIFFERS (rep $r):"
      head -40 "$dir/diff"
      status=1
    fi
  done
  /usr/bin/python3 - "$dir/base.$ci.user" "$dir/new.$ci.user" <<'PY'
import statistics, sys
b = [float(x) for x in open(sys.argv[1])]
n = [float(x) for x in open(sys.argv[2])]
print(f"median user CPU: base {statistics.median(b):.2f} s, new {statistics.median(n):.2f} s, "
      f"ratio base/new {statistics.median(b) / statistics.median(n):.3f}")
PY
done
[[ $status -eq 0 ]] && echo "JSON byte-identical apart from wall_s and sim_requests_per_s"
exit $status
