#!/usr/bin/env bash
# Compares the synthetic generator with DualPath Table 2: for each MaxLen and seed, runs
# `dualpath trace stats --synthetic` and prints a markdown table of the generated means and their
# relative error. Usage: scripts/trace/table2_check.sh [path/to/dualpath] [seeds, default "1 2 3 4"]
set -euo pipefail
bin=${1:-build/release/bin/dualpath}
seeds=${2:-1 2 3 4}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for k in 32 48 64; do
  for s in $seeds; do
    "$bin" trace stats --synthetic "${k}K" --sessions 500 --seed "$s" --json >"$tmp/$k-$s.json"
  done
done
python3 - "$tmp" $seeds <<'PY'
import json, sys
tmp, seeds = sys.argv[1], sys.argv[2:]
table2 = {32: (60, 608, 148, 28639, 17183), 48: (106, 474, 172, 42607, 25120),
          64: (157, 429, 176, 55958, 32721)}
keys = ("turns_per_session", "append_mean", "gen_mean", "total_mean", "context_mean")
print("| MaxLen | seed | Turns | Append | Gen | Total | Context | hit/session | hit pooled | worst err |")
print("|---|---|---|---|---|---|---|---|---|---|")
worst_all = 0
for k, want in table2.items():
    print(f"| {k}K | Table 2 | {want[0]} | {want[1]} | {want[2]} | {want[3]:,} | {want[4]:,} | "
          f"{'~98.7%' if k == 64 else ''} | | |")
    for s in seeds:
        d = json.load(open(f"{tmp}/{k}-{s}.json"))
        got = [d[x] for x in keys]
        errs = [g / w - 1 for g, w in zip(got, want)]
        worst = max(abs(e) for e in errs)
        worst_all = max(worst_all, worst)
        cells = " | ".join(f"{g:,.0f} ({e:+.1%})" for g, e in zip(got, errs))
        print(f"| {k}K | {s} | {cells} | {d['session_hit_ratio_mean']:.2%} | "
              f"{d['ideal_hit_ratio']:.2%} | {worst:.1%} |")
print(f"\nworst relative error over all rows: {worst_all:.1%}")
PY
