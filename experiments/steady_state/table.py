"""The steady-state table of README.md from the committed CSVs (no simulation).

published_x2.csv: every point of the published grid at N and 2N requests (steady_state.py).
Usage: python experiments/steady_state/table.py
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
METRICS = ("thr", "p99", "load_thr", "steady_p99", "served", "r_thr", "r_p99")


def combined() -> pd.DataFrame:
    return pd.read_csv(HERE / "published_x2.csv")


def table(df: pd.DataFrame) -> pd.DataFrame:
    agg = {"points": ("point_id", "size"), "N": ("n", "min"), "N max": ("n", "max")}
    agg |= {f"{m}": (f"d_{m}", "max") for m in METRICS}
    out = df.groupby(["model", "workload"]).agg(**agg)
    return out.dropna(axis=1, how="all")


def main() -> None:
    df = combined()
    pd.set_option("display.width", 200)
    print("max |m(2N)/m(N) - 1| per workload (over loads, gmu, tree shapes, commit modes)")
    print(table(df).to_string(float_format=lambda x: f"{x:.3f}", na_rep="-"))
    print("rows where the metric moves by < 5%:")
    for m in METRICS:
        print(f"  {m:>10}: {int(df[f'ok_{m}'].sum())}/{len(df)}")


if __name__ == "__main__":
    main()
