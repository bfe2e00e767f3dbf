#!/usr/bin/env python3
"""Per-session shape of agentic workloads: real sessions against synthetic trajectories.

Reads per-turn CSVs written by `dualpath trace stats ... --turns-csv FILE` (session,turn,append,gen)
and prints, for the first (real) file:
  - the shape parameters the synthetic generator takes from real sessions (synthetic_model.h):
    sd of log(turns), the slopes of log(session median append / generation) on log(turns), the
    residual between-session sd and the within-session sd of log(generation);
and, for every other file against the first:
  - the two-sample Kolmogorov-Smirnov statistic D (and its asymptotic p-value) of the per-session
    distributions of turns / mean turns and generation share / mean generation share (the shapes:
    the real sessions are Claude Code's, not DualPath's, so absolute levels differ by design);
  - the Spearman rank correlation of a session's generation share with its turn count, and of
    its median generation / median append per turn with its turn count (robust to Claude Code's
    compactions, which re-send the whole context as one "append" in long sessions);
  - the generation share of the longest 2 % of sessions against all sessions.
Generation share of a session = generated tokens / (appended tokens after the first turn +
generated tokens): the first prompt is the task, not the agent's loop.

With --plot DIR, writes the empirical CDFs (DIR/*.dat) and DIR/shape.png through gnuplot.
Standard library only. Usage:
  scripts/trace/shape_compare.py REAL.csv [NAME=]OTHER.csv... [--plot DIR]
"""
import csv
import math
import os
import statistics as st
import subprocess
import sys
from collections import defaultdict


def load(path):
    sessions = defaultdict(list)
    with open(path) as f:
        for row in csv.DictReader(f):
            sessions[int(row["session"])].append((int(row["turn"]), int(row["append"]), int(row["gen"])))
    out = []
    for k in sorted(sessions):
        turns = sorted(sessions[k])
        out.append(([t[1] for t in turns], [t[2] for t in turns]))
    return out


def gen_share(app, gen):
    later = sum(app[1:]) + sum(gen)
    return sum(gen) / later if later else 0.0


def slope(x, y):
    mx, my = st.mean(x), st.mean(y)
    sxx = sum((a - mx) ** 2 for a in x)
    return sum((a - mx) * (b - my) for a, b in zip(x, y)) / sxx


def corr(x, y):
    mx, my = st.mean(x), st.mean(y)
    sx = math.sqrt(sum((a - mx) ** 2 for a in x))
    sy = math.sqrt(sum((b - my) ** 2 for b in y))
    return sum((a - mx) * (b - my) for a, b in zip(x, y)) / (sx * sy)


def ranks(v):
    order = sorted(range(len(v)), key=lambda i: v[i])
    r = [0.0] * len(v)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2
        i = j + 1
    return r


def spearman(x, y):
    return corr(ranks(x), ranks(y))


def ks(a, b):
    """Two-sample Kolmogorov-Smirnov D and its asymptotic p-value (Smirnov's series)."""
    a, b = sorted(a), sorted(b)
    i = j = 0
    d = 0.0
    while i < len(a) and j < len(b):
        x = min(a[i], b[j])
        while i < len(a) and a[i] <= x:
            i += 1
        while j < len(b) and b[j] <= x:
            j += 1
        d = max(d, abs(i / len(a) - j / len(b)))
    n = len(a) * len(b) / (len(a) + len(b))
    lam = (math.sqrt(n) + 0.12 + 0.11 / math.sqrt(n)) * d
    p = 2 * sum((-1) ** (k - 1) * math.exp(-2 * k * k * lam * lam) for k in range(1, 101))
    return d, min(1.0, max(0.0, p))


def measure(sessions):
    """The shape parameters of synthetic_model.h, from sessions with more than 5 turns."""
    turns_all = [len(a) for a, _ in sessions]
    long = [(a, g) for a, g in sessions if len(a) > 5]
    lt = [math.log(len(a)) for a, _ in long]
    la = [math.log(st.median(a[1:])) for a, _ in long]
    lg = [math.log(st.median(g[1:]) + 1) for _, g in long]
    g_slope, a_slope = slope(lt, lg), slope(lt, la)
    g_resid = st.pstdev([y - g_slope * x for x, y in zip(lt, lg)])
    a_resid = st.pstdev([y - a_slope * x for x, y in zip(lt, la)])
    within_g = st.mean(st.pstdev([math.log(x + 1) for x in g[1:]]) for _, g in long)
    within_a = st.mean(st.pstdev([math.log(x + 1) for x in a[1:]]) for a, _ in long)
    deciles = defaultdict(list)  # median generation by tenth of the session (turns after the first)
    for a, g in long:
        for i in range(1, len(g)):
            deciles[min(9, 10 * i // len(g))].append(g[i])
    ra = [y - a_slope * x for x, y in zip(lt, la)]
    rg = [y - g_slope * x for x, y in zip(lt, lg)]
    return {
        "sessions": len(sessions),
        "turns_sigma (sd log turns)": st.pstdev([math.log(n) for n in turns_all]),
        "append_turns_slope": a_slope,
        "gen_turns_slope": g_slope,
        "gen_traj_sigma (residual)": g_resid,
        "gen_turn_sigma (within)": within_g,
        "append_turn_sigma (within)": within_a,
        "append_traj_sigma (residual)": a_resid,
        "append_gen_rho (residuals' correlation)": corr(ra, rg),
        "median generation by tenth of the session": " ".join(
            f"{st.median(deciles[k]):.0f}" for k in range(10)),
    }


def shape(sessions):
    turns = [len(a) for a, _ in sessions]
    share = [gen_share(a, g) for a, g in sessions]
    mt, ms = st.mean(turns), st.mean(share)
    long = [(len(a), st.median(g[1:]) / max(1, st.median(a[1:]))) for a, g in sessions if len(a) > 5]
    by_len = sorted(range(len(turns)), key=lambda i: -turns[i])
    top = by_len[: max(1, len(turns) // 50)]
    return {
        "turns": turns,
        "share": share,
        "turns_norm": [t / mt for t in turns],
        "share_norm": [s / ms for s in share],
        "share_mean": ms,
        "share_top2": st.mean(share[i] for i in top),
        "spearman": spearman(turns, share),
        "spearman_median": spearman([x[0] for x in long], [x[1] for x in long]),
        "turns_mean": mt,
        "turns_median": st.median(turns),
        "turns_max": max(turns),
        "gen_max": max(sum(g) for _, g in sessions),
    }


def write_cdf(path, values):
    v = sorted(values)
    with open(path, "w") as f:
        for i, x in enumerate(v):
            f.write(f"{x:.6g} {(i + 1) / len(v):.6g}\n")


def plot(dirname, names):
    os.makedirs(dirname, exist_ok=True)
    gp = os.path.join(dirname, "shape.gp")
    with open(gp, "w") as f:
        f.write("set terminal pngcairo size 1200,450\n")
        f.write(f"set output '{os.path.join(dirname, 'shape.png')}'\n")
        f.write("set multiplot layout 1,2\nset key bottom right\nset ylabel 'fraction of sessions'\n")
        for key, label in (("turns", "turns / mean turns"), ("share", "generation share / mean share")):
            f.write(f"set xlabel '{label}'\nset logscale x\n")
            parts = [f"'{os.path.join(dirname, f'{key}_{n}.dat')}' using 1:2 with steps title '{n}'"
                     for n in names]
            f.write("plot " + ", ".join(parts) + "\n")
        f.write("unset multiplot\n")
    with open(os.path.join(dirname, "gnuplot.log"), "w") as log:
        subprocess.run(["gnuplot", gp], check=True, stderr=log)


def main(argv):
    plot_dir = None
    if "--plot" in argv:
        k = argv.index("--plot")
        plot_dir = argv[k + 1]
        argv = argv[:k] + argv[k + 2:]
    if len(argv) < 1:
        sys.exit(__doc__)
    named = []
    for arg in argv:
        name, _, path = arg.rpartition("=")
        named.append((name or os.path.splitext(os.path.basename(path))[0], path))
    data = [(n, load(p)) for n, p in named]
    real_name, real = data[0]
    print(f"shape parameters measured on {real_name}:")
    for k, v in measure(real).items():
        print(f"  {k:45s} {v:.3f}" if isinstance(v, float) else f"  {k:45s} {v}")
    shapes = [(n, shape(s)) for n, s in data]
    r = shapes[0][1]
    print("\n| workload | sessions | turns mean / median / max | gen share mean | share of longest 2% "
          "| most generated by one session | Spearman(share, turns) | Spearman(median gen / median "
          "append, turns) | KS D turns (p) | KS D gen share (p) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n, s in shapes:
        if s is r:
            d = "–"
            e = "–"
        else:
            dt, pt = ks(r["turns_norm"], s["turns_norm"])
            ds, ps = ks(r["share_norm"], s["share_norm"])
            d, e = f"{dt:.3f} ({pt:.2g})", f"{ds:.3f} ({ps:.2g})"
        print(f"| {n} | {len(s['turns'])} | {s['turns_mean']:.1f} / {s['turns_median']:.0f} / "
              f"{s['turns_max']} | {s['share_mean']:.3f} | {s['share_top2']:.3f} | "
              f"{s['gen_max']:,} | {s['spearman']:+.3f} | {s['spearman_median']:+.3f} | {d} | {e} |")
    if plot_dir:
        os.makedirs(plot_dir, exist_ok=True)
        for n, s in shapes:
            write_cdf(os.path.join(plot_dir, f"turns_{n}.dat"), s["turns_norm"])
            write_cdf(os.path.join(plot_dir, f"share_{n}.dat"), s["share_norm"])
        plot(plot_dir, [n for n, _ in shapes])


if __name__ == "__main__":
    main(sys.argv[1:])
