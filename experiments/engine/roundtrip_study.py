"""The client round-trip rule, before and after (session 14; PLAN.md 2026-12-04 18:49).

The async column of out_of_sample.md with the rule (main 606e5f8 on: a sent request reaches the
scheduler r = 22.7 ms after its send, no async lateness on top of the deferred output) against
the same column by the code before it (main f84beec), per run group: the rule's FIT runs (r was
fitted on their step logs), the runs seen before the rule (a study), and the runs of calls 43
and 45, run after the rule was committed (the pre-registered PREDICT test).

    git worktree add /tmp/pre_rule f84beec
    PYTHONPATH=. python3 experiments/engine/roundtrip_study.py --before-code /tmp/pre_rule
        (re-simulates every run with the code before the rule: roundtrip_before.csv)
    PYTHONPATH=. python3 experiments/engine/roundtrip_study.py
        (roundtrip_study.md / .csv from roundtrip_before.csv and out_of_sample.csv)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from host_fit_study import _atomic  # noqa: E402
from out_of_sample import S14_RUNS  # noqa: E402

from capsim.live.client_roundtrip import FIT_RUNS  # noqa: E402
from capsim.live.engine_oos import THRESHOLDS, within  # noqa: E402

BEFORE_COMMIT = "f84beec"
METRICS = tuple(THRESHOLDS)
_SNIPPET = """
import json, sys
from pathlib import Path
from capsim.live.engine_oos import ENGINE_OVERHEAD, load_run, simulate_run
runs = Path(sys.argv[1])
for d in sorted(p for p in runs.iterdir() if p.is_dir()):
    p = simulate_run(load_run(d), engine_overhead=ENGINE_OVERHEAD, data_root=runs.parent / "data")
    print(json.dumps({"run": d.name, **{k: p[k] for k in sys.argv[2:]}}))
"""


def simulate_before(code_dir: Path, runs_root: Path = HERE / "runs") -> pd.DataFrame:
    """Every run's async-column metrics by the capsim checkout at ``code_dir``."""
    if not (code_dir / "capsim" / "__init__.py").is_file():
        raise SystemExit(f"--before-code {code_dir}: no capsim package there")
    env = {**os.environ, "PYTHONPATH": str(code_dir)}
    out = subprocess.run(
        [sys.executable, "-c", _SNIPPET, str(runs_root), *METRICS],
        env=env, check=True, capture_output=True, text=True, cwd=code_dir,
    )  # fmt: skip
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    wide = pd.DataFrame(rows)
    return wide.melt(id_vars="run", var_name="metric", value_name="capsim_before")


def group_of(run: str, role_engine: str) -> str:
    if run in FIT_RUNS:
        return "fit of r"
    if run in S14_RUNS:
        return "pre-registered (calls 43, 45)"
    return "seen (study)" if role_engine == "predict" else "fit of the step period"


def study(oos: pd.DataFrame, before: pd.DataFrame) -> pd.DataFrame:
    df = oos[oos["metric"].isin(METRICS)].merge(before, on=["run", "metric"], how="inner")
    df["group"] = [group_of(r, e) for r, e in zip(df["run"], df["role_engine"], strict=True)]
    df["pass_before"] = [within(m, r, p) for m, r, p in
                         zip(df["metric"], df["real"], df["capsim_before"], strict=True)]  # fmt: skip
    df["err_before_pct"] = 100.0 * (df["capsim_before"] - df["real"]) / df["real"]
    cols = ["group", "run", "metric", "real", "capsim_before", "err_before_pct", "pass_before",
            "capsim_engine", "err_engine_pct", "pass_engine"]  # fmt: skip
    return df[cols].rename(columns={"capsim_engine": "capsim_after",
                                    "err_engine_pct": "err_after_pct",
                                    "pass_engine": "pass_after"})  # fmt: skip


def counts(df: pd.DataFrame) -> pd.DataFrame:
    g = df[df["pass_after"].notna()].groupby(["group", "metric"], sort=False)
    return pd.DataFrame(
        {
            "runs": g.size(),
            "before": g["pass_before"].apply(lambda x: int((x == True).sum())),  # noqa: E712
            "after": g["pass_after"].apply(lambda x: int((x == True).sum())),  # noqa: E712
        }
    ).reset_index()


def markdown(df: pd.DataFrame) -> str:
    c = counts(df)
    lines = [
        "# The client round-trip rule, before / after (session 14)",
        "",
        "Async column of out_of_sample.md: main f84beec (before the rule) / main 606e5f8+ (a sent "
        "request reaches the scheduler 22.7 ms after its send; no async lateness on top of the "
        "deferred output). Runs within issue 21's thresholds, per group. The rule's r was FITTED "
        f"on {', '.join(FIT_RUNS)}; the 'seen' runs were all committed before the rule was "
        "written (a study, not a test); the runs of calls 43 and 45 ran after it was committed "
        "(PLAN.md 2026-12-04 18:49, 18:54, 19:05): the pre-registered test. Regenerate: see the "
        "module docstring (`experiments/engine/roundtrip_study.py`).",
        "",
        "| group | metric | runs | before | after |",
        "|---|---|---|---|---|",
    ]
    for r in c.itertuples():
        lines.append(f"| {r.group} | {r.metric} | {r.runs} | {r.before} | {r.after} |")
    lines += ["", "Pre-registered runs, each metric (real, before, after; % error):", "",
              "| run | metric | real | before | err % | after | err % |",
              "|---|---|---|---|---|---|---|"]  # fmt: skip
    pre = df[df["group"].str.startswith("pre-registered")]
    for r in pre.itertuples():
        lines.append(
            f"| {r.run} | {r.metric} | {r.real:.4g} | {r.capsim_before:.4g} | "
            f"{r.err_before_pct:+.1f} | {r.capsim_after:.4g} | {r.err_after_pct:+.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before-code", type=Path, help=f"a checkout of main {BEFORE_COMMIT}")
    a = ap.parse_args(argv)
    before_csv = HERE / "roundtrip_before.csv"
    if a.before_code is not None:
        _atomic(before_csv, simulate_before(a.before_code).to_csv(index=False))
    df = study(pd.read_csv(HERE / "out_of_sample.csv"), pd.read_csv(before_csv))
    _atomic(HERE / "roundtrip_study.csv", df.to_csv(index=False))
    _atomic(HERE / "roundtrip_study.md", markdown(df))
    print(markdown(df))


if __name__ == "__main__":
    main()
