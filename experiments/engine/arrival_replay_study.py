"""The open-loop runs' arrivals (PLAN.md 2026-12-04 22:04, rule fixed before computing; every run
here had been seen: a study).

capsim simulates a Poisson run with its own gamma draws at the run's rate; the real client sent
at its own draws, recorded in requests.csv ``start_s``. Every open-loop predict run of
out_of_sample.md is simulated by the async column's model twice: with capsim's own draws
(``simulate_run(..., replay_open_loop=False)``, the harness before session 15) and with
capsim's ``replay`` load at the recorded send times (the same lengths, the same engine,
nothing else changed; the harness since, ``capsim.live.engine_oos.replay_sends``).

    PYTHONPATH=. python3 experiments/engine/arrival_replay_study.py
writes arrival_replay_study.csv and .md next to this file (atomic writes).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from host_fit_study import _atomic  # noqa: E402

from capsim.live.engine_oos import ENGINE_OVERHEAD, load_run, simulate_run, within  # noqa: E402

METRICS: tuple[tuple[str, str], ...] = (
    ("throughput_tok_per_s", "out tok/s"),
    ("ttft_mean_ms", "TTFT mean ms"),
    ("ttft_p99_ms", "TTFT p99 ms"),
    ("tpot_mean_ms", "TPOT mean ms"),
    ("peak_running", "peak running"),
)


def study(oos: pd.DataFrame, runs_root: Path = HERE / "runs") -> pd.DataFrame:
    pred = oos[oos["role_engine"] == "predict"]
    rows = []
    for name in sorted(set(pred["run"])):
        run = load_run(runs_root / name)
        if run.bench.get("request_rate") is None:
            continue
        data = runs_root.parent / "data"
        own = simulate_run(run, engine_overhead=ENGINE_OVERHEAD, data_root=data,
                           replay_open_loop=False)  # fmt: skip
        got = simulate_run(run, engine_overhead=ENGINE_OVERHEAD, data_root=data)
        for metric, _ in METRICS:
            r = pred[(pred["run"] == name) & (pred["metric"] == metric)].iloc[0]
            rows.append({"run": name, "metric": metric, "real": r["real"],
                         "own_draws": own[metric], "replay": got[metric]})  # fmt: skip
    df = pd.DataFrame(rows)
    for col in ("own_draws", "replay"):
        df[f"err_{col}_pct"] = 100.0 * (df[col] - df["real"]) / df["real"]
        df[f"pass_{col}"] = [within(m, a, b) for m, a, b in
                             zip(df["metric"], df["real"], df[col], strict=True)]  # fmt: skip
    return df


def count_rows(df: pd.DataFrame, metrics, a: str, b: str) -> list[str]:
    """Per metric: runs within the threshold by column ``a`` and ``b`` (``pass_<col>``), and on
    how many ``b`` lies closer to the real value (``err_<col>_pct``); markdown rows."""
    rows = []
    for metric, label in metrics:
        x = df[df["metric"] == metric]
        closer = int((x[f"err_{b}_pct"].abs() < x[f"err_{a}_pct"].abs()).sum())
        rows.append(
            f"| {label} | {int((x[f'pass_{a}'] == True).sum())} | "  # noqa: E712
            f"{int((x[f'pass_{b}'] == True).sum())} | {closer} of {len(x)} |"  # noqa: E712
        )
    return rows


def run_rows(df: pd.DataFrame, short: dict[str, str], a: str, b: str) -> list[str]:
    """One markdown row per (run, metric): real, column ``a`` and ``b`` with their errors."""
    return [
        f"| {r['run']} | {short[r['metric']]} | {r['real']:.4g} | {r[a]:.4g} | "
        f"{r[f'err_{a}_pct']:+.1f} | {r[b]:.4g} | {r[f'err_{b}_pct']:+.1f} |"
        for _, r in df.iterrows()
    ]


def markdown(df: pd.DataFrame) -> str:
    short = dict(METRICS)
    n = df["run"].nunique()
    lines = [
        "# Open-loop runs: capsim's own arrival draws vs the real client's send times (a study)",
        "",
        "PLAN.md 2026-12-04 22:04 (rule before computing; every run seen). The async column of "
        "out_of_sample.md (own gamma draws at the run's rate) and the same model with capsim's "
        "`replay` load at requests.csv's recorded send times. Regenerate: "
        "`PYTHONPATH=. python3 experiments/engine/arrival_replay_study.py`.",
        "",
        f"Within issue 21's thresholds over {n} open-loop predict runs:",
        "",
        "| metric | own draws | replay | closer to real with replay |",
        "|---|---|---|---|",
    ]
    lines += count_rows(df, METRICS, "own_draws", "replay")
    lines += ["", "| run | metric | real | own draws | err % | replay | err % |",
              "|---|---|---|---|---|---|---|"]  # fmt: skip
    lines += run_rows(df, short, "own_draws", "replay")
    return "\n".join(lines) + "\n"


def main() -> None:
    df = study(pd.read_csv(HERE / "out_of_sample.csv"))
    _atomic(HERE / "arrival_replay_study.csv", df.to_csv(index=False))
    _atomic(HERE / "arrival_replay_study.md", markdown(df))
    print(markdown(df))


if __name__ == "__main__":
    main()
