"""Is each published point long enough? Rerun it with k x the requests and compare.

For every point of the published grid (or a sub-grid), simulate the grid's request count N
and k*N (default k = 2), same seed, and print the relative change |m(kN) / m(N) - 1| of:

- ``thr``: output throughput over the whole run (``vllm bench serve``'s definition);
- ``p99``: p99 TTFT over the whole run;
- ``load_thr``: output throughput under load, i.e. without the cool-down (``phases`` in
  capsim/metrics.py; the drain of the longest outputs is reported apart);
- ``steady_p99``: p99 TTFT of the requests sent after the first finish (no initial burst);
- open loop only, ``served``: output throughput / offered token rate (rate x the sample's
  mean output): whether the engine keeps up, free of the sample's mean output length;
- with both commit modes, ``r_thr`` and ``r_p99``: the TreeWY / store-all ratios the
  report publishes (matched points, common random numbers).

A metric is stable at a point when it moves by less than ``--tol`` (5%). Prints the worst
case per workload and the unstable points; ``--out`` writes every point (CSV, atomic).

    python experiments/steady_state/steady_state.py --gmu 0.6,0.75,0.9 \
        --out experiments/steady_state/published_x2.csv
"""

from __future__ import annotations

import argparse
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

import pandas as pd

from capsim.simulate import simulate
from capsim.sweep.grid import PUBLISHED_GRID, expand, restrict
from capsim.sweep.grid_toml import load_spec

SUMMARY_KEYS = (
    "output_throughput_tok_per_s",
    "ttft_p99_s",
    "load_output_throughput_tok_per_s",
    "steady_ttft_p99_s",
    "total_output_tok",
    "num_requests",
)
SHORT = {
    "output_throughput_tok_per_s": "thr",
    "ttft_p99_s": "p99",
    "load_output_throughput_tok_per_s": "load_thr",
    "steady_ttft_p99_s": "steady_p99",
}


def _run(job: tuple[str, object, int]) -> dict[str, float]:
    pid, cfg, n = job
    c = replace(cfg, load=replace(cfg.load, num_requests=n))  # type: ignore[type-var]
    t0 = time.process_time()
    s = simulate(c).summary  # type: ignore[arg-type]
    return {"point_id": pid, "n": n, "cpu_s": time.process_time() - t0} | {
        k: float(s.get(k, math.nan)) for k in SUMMARY_KEYS
    }


def _delta(new: pd.Series, old: pd.Series) -> pd.Series:
    return (new / old - 1.0).abs()


def compare(points: list, res: pd.DataFrame, tol: float) -> pd.DataFrame:  # type: ignore[type-arg]
    """One row per point: both runs' metrics and their relative changes."""
    keys = pd.DataFrame([p.keys() for p in points]).set_index("point_id")
    base = res[res["run"] == 0].set_index("point_id")
    big = res[res["run"] == 1].set_index("point_id")
    df = keys[["match_id", "block", "model", "gmu", "workload", "load_mode", "load", "tree",
               "commit"]].copy()  # fmt: skip
    df["n"], df["n_big"] = base["n"], big["n"]
    for k, short in SHORT.items():
        df[short], df[f"{short}_big"] = base[k], big[k]
        df[f"d_{short}"] = _delta(big[k], base[k])
    rate = df["load"].where(df["load_mode"] == "rate")
    for tag, src in (("", base), ("_big", big)):
        offered = rate * src["total_output_tok"] / src["num_requests"]
        df[f"served{tag}"] = src["output_throughput_tok_per_s"] / offered
    df["d_served"] = _delta(df["served_big"], df["served"])
    df = df.reset_index()
    # matched ratios (TreeWY reconstruct / store-all), when both modes ran
    sa = df[df["commit"] == "storeall"].set_index("match_id")
    tw = df[df["commit"] == "reconstruct"].set_index("match_id")
    both = sa.index.intersection(tw.index)
    for short, inv in (("thr", False), ("p99", True)):
        for tag in ("", "_big"):
            num, den = tw.loc[both, f"{short}{tag}"], sa.loc[both, f"{short}{tag}"]
            sa.loc[both, f"r_{short}{tag}"] = (den / num) if inv else (num / den)
        sa[f"d_r_{short}"] = _delta(sa[f"r_{short}_big"], sa[f"r_{short}"])
    ratio_cols = [c for c in sa.columns if c.startswith(("r_", "d_r_"))]
    df = df.merge(sa[ratio_cols], left_on="match_id", right_index=True, how="left")
    df.loc[df["commit"] != "storeall", ratio_cols] = math.nan
    for short in (*SHORT.values(), "served", "r_thr", "r_p99"):
        df[f"ok_{short}"] = ~(df[f"d_{short}"] >= tol)  # NaN (not applicable) counts as ok
    return df


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--grid", default=str(PUBLISHED_GRID))
    ap.add_argument("--gmu", default=None)
    ap.add_argument("--model", action="append", default=None)
    ap.add_argument("--workload", action="append", default=None)
    ap.add_argument("--modes", default=None, help="commit modes (default: the grid's)")
    ap.add_argument("--no-trees", action="store_true", help="leave out the tree block")
    ap.add_argument("--factor", type=float, default=2.0)
    ap.add_argument("--tol", type=float, default=0.05)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default=None, help="CSV of every point (written atomically)")
    a = ap.parse_args()
    spec = restrict(
        load_spec(a.grid),
        gmu=tuple(float(g) for g in a.gmu.split(",")) if a.gmu else None,
        models=tuple(a.model) if a.model else None,
        workloads=tuple(a.workload) if a.workload else None,
        commit_modes=tuple(a.modes.split(",")) if a.modes else None,
        trees=not a.no_trees,
    )
    points = expand(spec)
    jobs = [
        (p.point_id, p.cfg, n)
        for p in points
        for n in (p.cfg.load.num_requests, math.ceil(p.cfg.load.num_requests * a.factor))
    ]
    t0, load0 = time.perf_counter(), os.getloadavg()[0]
    with ProcessPoolExecutor(a.jobs) as ex:
        rows = list(ex.map(_run, jobs, chunksize=1))
    wall = time.perf_counter() - t0
    res = pd.DataFrame(rows)
    res["run"] = [i % 2 for i in range(len(res))]
    df = compare(points, res, a.tol)
    if a.out:
        tmp = f"{a.out}.tmp{os.getpid()}"
        df.to_csv(tmp, index=False, float_format="%.6g")
        os.replace(tmp, a.out)
    print(
        f"{len(points)} points, N vs {a.factor:g}N, tol {a.tol:.0%}: {wall:.0f} s wall, "
        f"{res['cpu_s'].sum():.0f} s CPU, jobs={a.jobs}, 1-min loadavg {load0:.1f} -> "
        f"{os.getloadavg()[0]:.1f} (2-core machine shared with other jobs)"
    )
    agg: dict[str, tuple[str, str]] = {"points": ("point_id", "size"),
                                       "n": ("n", "min"), "n_max": ("n", "max")}  # fmt: skip
    for short in (*SHORT.values(), "served", "r_thr", "r_p99"):
        agg[f"max_d_{short}"] = (f"d_{short}", "max")
    worst = df.groupby(["model", "workload"]).agg(**agg)
    worst = worst.dropna(axis=1, how="all")
    pd.set_option("display.width", 250)
    print("worst relative change per workload (max over loads, gmu, trees, modes):")
    print(worst.to_string(float_format=lambda x: f"{x:.3f}"))
    for short in (*SHORT.values(), "served", "r_thr", "r_p99"):
        ok = df[f"ok_{short}"]
        print(f"  {short:>10}: stable at {int(ok.sum())}/{len(df)} rows")


if __name__ == "__main__":
    main()
