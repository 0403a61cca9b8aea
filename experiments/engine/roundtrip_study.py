"""Session 14's two step-model changes, one after the other (PLAN.md 2026-12-04 18:49, 19:35).

The async column of out_of_sample.md three ways: by the code before the client round-trip
rule (main f84beec: `before`), with the rule (main c5a7f6a: a sent request reaches the scheduler
r = 22.7 ms after its send, no async lateness on top of the deferred output: `rule`), and with
the rule and the two-batch pipeline recurrence (main now: `pipeline`), per run group: the rule's
FIT runs (r was fitted on their step logs), the runs seen before the rule (a study), and the
runs of calls 43 and 45, run after the rule was committed (its pre-registered PREDICT test;
seen before the recurrence was written, so for the recurrence they are a study too), and the
runs of call 46 (session 15), run after the recurrence was committed: its pre-registered test.

    git worktree add /tmp/pre_rule f84beec
    PYTHONPATH=. python3 experiments/engine/roundtrip_study.py --before-code /tmp/pre_rule
        (re-simulates every run with the code before the rule: roundtrip_before.csv)
    git worktree add /tmp/rule_c5 c5a7f6a
    PYTHONPATH=. python3 experiments/engine/roundtrip_study.py --rule-code /tmp/rule_c5
        (re-simulates every run with the rule's code: roundtrip_rule.csv; before session 15 this
        file was c5a7f6a's out_of_sample.csv capsim_engine column, the same numbers for the runs
        it had)
    PYTHONPATH=. python3 experiments/engine/roundtrip_study.py
        (roundtrip_study.md / .csv from those two and out_of_sample.csv)
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
from out_of_sample import S14_RUNS, S15_RUNS  # noqa: E402

from capsim.live.client_roundtrip import FIT_RUNS  # noqa: E402
from capsim.live.engine_oos import THRESHOLDS, within  # noqa: E402

BEFORE_COMMIT = "f84beec"
RULE_COMMIT = "c5a7f6a"
METRICS = tuple(THRESHOLDS)
# The older code's simulate_run drew its own open-loop arrivals; since session 15 (PLAN.md
# 2026-12-04 22:04, arrival_replay_study.md) the harness replays the real client's send times,
# so the snippet gives the older code the same arrivals (its sim_config / request_table wrapped:
# the model under test is the old code's, the load is the run's).
_SNIPPET = """
import dataclasses, json, sys
from pathlib import Path
import capsim.live.engine_oos as eo
from capsim.config import LoadConfig
from capsim.live.engine_oos import ENGINE_OVERHEAD, load_run, simulate_run
_cfg, _tab = eo.sim_config, eo.request_table
def sim_config(run, *a, **k):
    cfg = _cfg(run, *a, **k)
    if cfg.load.mode != "rate":
        return cfg
    load = LoadConfig(mode="replay", num_requests=len(run.requests), concurrency=cfg.load.concurrency)
    return dataclasses.replace(cfg, load=load)
def request_table(run, *a, **k):
    t = _tab(run, *a, **k)
    if run.bench.get("request_rate") is None:
        return t
    st = run.requests["start_s"].to_numpy(float)
    return dataclasses.replace(t, arrival_s=st - st[0])
eo.sim_config, eo.request_table = sim_config, request_table
runs = Path(sys.argv[1])
for d in sorted(p for p in runs.iterdir() if p.is_dir()):
    p = simulate_run(load_run(d), engine_overhead=ENGINE_OVERHEAD, data_root=runs.parent / "data")
    print(json.dumps({"run": d.name, **{k: p[k] for k in sys.argv[2:]}}))
"""


def simulate_before(
    code_dir: Path, runs_root: Path = HERE / "runs", column: str = "capsim_before"
) -> pd.DataFrame:
    """Every run's async-column metrics by the capsim checkout at ``code_dir``."""
    if not (code_dir / "capsim" / "__init__.py").is_file():
        raise SystemExit(f"{code_dir}: no capsim package there")
    env = {**os.environ, "PYTHONPATH": str(code_dir)}
    out = subprocess.run(
        [sys.executable, "-c", _SNIPPET, str(runs_root), *METRICS],
        env=env, check=True, capture_output=True, text=True, cwd=code_dir,
    )  # fmt: skip
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    wide = pd.DataFrame(rows)
    return wide.melt(id_vars="run", var_name="metric", value_name=column)


def group_of(run: str, role_engine: str) -> str:
    if run in FIT_RUNS:
        return "fit of r"
    if run in S14_RUNS:
        return "pre-registered (calls 43, 45)"
    if run in S15_RUNS:
        return "recurrence pre-registered (call 46)"
    return "seen (study)" if role_engine == "predict" else "fit of the step period"


def study(oos: pd.DataFrame, before: pd.DataFrame, rule: pd.DataFrame) -> pd.DataFrame:
    df = oos[oos["metric"].isin(METRICS)].merge(before, on=["run", "metric"], how="inner")
    df = df.merge(rule, on=["run", "metric"], how="inner")
    df["group"] = [group_of(r, e) for r, e in zip(df["run"], df["role_engine"], strict=True)]
    df = df.rename(columns={"capsim_engine": "capsim_pipeline"})
    for col in ("before", "rule", "pipeline"):
        pred = df[f"capsim_{col}"]
        df[f"pass_{col}"] = [within(m, r, p) for m, r, p in
                             zip(df["metric"], df["real"], pred, strict=True)]  # fmt: skip
        df[f"err_{col}_pct"] = 100.0 * (pred - df["real"]) / df["real"]
    cols = ["group", "run", "metric", "real"]
    for col in ("before", "rule", "pipeline"):
        cols += [f"capsim_{col}", f"err_{col}_pct", f"pass_{col}"]
    return df[cols]


def counts(df: pd.DataFrame) -> pd.DataFrame:
    g = df[df["pass_pipeline"].notna()].groupby(["group", "metric"], sort=False)
    out = {"runs": g.size()}
    for col in ("before", "rule", "pipeline"):
        out[col] = g[f"pass_{col}"].apply(lambda x: int((x == True).sum()))  # noqa: E712
    return pd.DataFrame(out).reset_index()


def markdown(df: pd.DataFrame) -> str:
    c = counts(df)
    lines = [
        "# Session 14's step-model changes: before / round-trip rule / + pipeline recurrence",
        "",
        "Async column of out_of_sample.md by main f84beec (before), main c5a7f6a (the client round "
        "trip: a sent request reaches the scheduler 22.7 ms after its send, no async lateness on "
        "top of the deferred output) and main now (the rule and the two-batch pipeline "
        "recurrence, PLAN.md 2026-12-04 19:35: no new constant). Runs within issue 21's "
        "thresholds, per group. The rule's r was FITTED on "
        f"{', '.join(FIT_RUNS)}; the 'seen' runs were committed before either change (a study); "
        "the runs of calls 43 and 45 ran after the rule was committed (PLAN.md 2026-12-04 18:49, "
        "18:54, 19:05: the rule's pre-registered test) and before the recurrence was written "
        "(for it, a study); the runs of call 46 (session 15) ran after the recurrence was "
        "committed (main 951c9cb, PLAN.md 2026-12-04 19:47 and 21:31): its pre-registered test. "
        "The rule column is re-simulated by c5a7f6a's code for every run. Regenerate: see the "
        "module docstring (`experiments/engine/roundtrip_study.py`).",
        "",
        "| group | metric | runs | before | rule | rule + pipeline |",
        "|---|---|---|---|---|---|",
    ]
    for r in c.itertuples():
        lines.append(
            f"| {r.group} | {r.metric} | {r.runs} | {r.before} | {r.rule} | {r.pipeline} |"
        )
    lines += ["", "Calls 43, 45 and 46, each metric (real; before, rule, rule + pipeline: "
              "% error):", "", "| run | metric | real | before | rule | rule + pipeline |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    pre = df[df["group"].str.contains("pre-registered")]
    for r in pre.itertuples():
        lines.append(
            f"| {r.run} | {r.metric} | {r.real:.4g} | {r.err_before_pct:+.1f} | "
            f"{r.err_rule_pct:+.1f} | {r.err_pipeline_pct:+.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before-code", type=Path, help=f"a checkout of main {BEFORE_COMMIT}")
    ap.add_argument("--rule-code", type=Path, help=f"a checkout of main {RULE_COMMIT}")
    a = ap.parse_args(argv)
    before_csv = HERE / "roundtrip_before.csv"
    if a.before_code is not None:
        _atomic(before_csv, simulate_before(a.before_code).to_csv(index=False))
    rule_csv = HERE / "roundtrip_rule.csv"
    if a.rule_code is not None:
        _atomic(rule_csv, simulate_before(a.rule_code, column="capsim_rule").to_csv(index=False))
    rule = pd.read_csv(rule_csv)
    df = study(pd.read_csv(HERE / "out_of_sample.csv"), pd.read_csv(before_csv), rule)
    _atomic(HERE / "roundtrip_study.csv", df.to_csv(index=False))
    _atomic(HERE / "roundtrip_study.md", markdown(df))
    print(markdown(df))


if __name__ == "__main__":
    main()
