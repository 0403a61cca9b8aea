"""Does a machine's own start-up say how fast its host is? (PLAN.md 2026-12-04 22:01, rule fixed
before computing; every machine's host fit had been seen: a study, no constant.)

For each machine of host_fit_study.md (boot_id -> its fit run's PIECEWISE host cost), the
start-ups recorded on it (experiments/engine/startups/<job>.log, machine from the manifest)
and three predictors read from their logs:

- ``capture_s_per_graph``: 'Graph capturing finished in N secs' over the PIECEWISE + FULL
  captures of 'Profiling CUDA graph memory' (mean over the machine's start-ups),
- ``compile_s``: 'compilation: X s' of 'init engine ... took', cold start-ups only (the first
  start-up of its configuration on that machine; mean over them),
- ``load_s``: 'Model loading took ... and X seconds' (mean).

Per predictor: the Spearman rank correlation with the PIECEWISE cost over the machines that
have it, and leave one machine out: PIECEWISE predicted as the other machines' mean ratio
(PIECEWISE / predictor) times this machine's predictor; median |error| against the registered
constant's (MEASURED_H200_VLLM026_ASYNC.piecewise_host_s).

    PYTHONPATH=. python3 experiments/engine/startup_host_study.py
writes startup_host_study.csv and .md next to this file (atomic writes).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from host_fit_study import _atomic  # noqa: E402
from repeatability import run_calls  # noqa: E402

from capsim.cost.engine_period import MEASURED_H200_VLLM026_ASYNC  # noqa: E402

PREDICTORS = ("capture_s_per_graph", "compile_s", "load_s")
_CAPTURE = re.compile(r"Graph capturing finished in (\d+(?:\.\d+)?) secs")
_MODES = re.compile(r"Profiling CUDA graph memory: PIECEWISE=(\d+).*?FULL=(\d+)")
_COMPILE = re.compile(r"init engine .* took [\d.]+ s \(compilation: ([\d.]+) s\)")
_LOAD = re.compile(r"Model loading took [\d.]+ GiB memory and ([\d.]+) seconds")


def _first(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    return next(pattern.finditer(text), None)


def startup_timings(log_text: str) -> dict[str, float]:
    """The three predictors of one start-up log (NaN where a line is missing)."""
    out = dict.fromkeys(PREDICTORS, float("nan"))
    cap, modes = _first(_CAPTURE, log_text), _first(_MODES, log_text)
    if cap and modes and int(modes.group(1)) + int(modes.group(2)) > 0:
        graphs = int(modes.group(1)) + int(modes.group(2))
        out["capture_s_per_graph"] = float(cap.group(1)) / graphs
    if (comp := _first(_COMPILE, log_text)) is not None:
        out["compile_s"] = float(comp.group(1))
    if (load := _first(_LOAD, log_text)) is not None:
        out["load_s"] = float(load.group(1))
    return out


def _config_key(row: pd.Series) -> tuple:
    cols = ("num_speculative_tokens", "max_num_batched_tokens", "enforce_eager", "model_config")
    return tuple(str(row.get(c, "")) for c in cols)


def machine_startups(root: Path = HERE) -> pd.DataFrame:
    """One row per recorded start-up with its machine, call order and the predictors; the
    compile time kept only on the first start-up of its configuration on that machine."""
    calls = run_calls(json.loads((root / "manifest.json").read_text()))
    ups = pd.read_csv(root / "startups.csv", dtype=str, keep_default_na=False)
    rows = []
    for _, r in ups.iterrows():
        log = root / "startups" / f"{r['job']}.log"
        if r["job"] not in calls or not log.exists():
            continue
        call, boot = calls[r["job"]]
        if boot == "-":
            continue
        rows.append({"job": r["job"], "call": int(call), "boot_id": boot,
                     "config": _config_key(r), **startup_timings(log.read_text())})  # fmt: skip
    df = pd.DataFrame(rows).sort_values(["call", "job"], kind="stable").reset_index(drop=True)
    cold = ~df.duplicated(["boot_id", "config"])
    df.loc[~cold, "compile_s"] = np.nan
    df["cold"] = cold
    return df.drop(columns="config")


def per_machine(startups: pd.DataFrame, fits: pd.DataFrame) -> pd.DataFrame:
    means = startups.groupby("boot_id")[list(PREDICTORS)].mean()
    means["startups"] = startups.groupby("boot_id").size()
    fit = fits.drop_duplicates("boot_id").set_index("boot_id")[["fit_run", "piecewise_host_ms"]]
    return fit.join(means, how="inner").reset_index()


def leave_one_out(m: pd.DataFrame, col: str) -> pd.DataFrame:
    d = m.dropna(subset=[col])
    d = d[d[col] > 0]
    ratio = d["piecewise_host_ms"] / d[col]
    pred = [(ratio.drop(i).mean()) * d.loc[i, col] for i in d.index]
    return pd.DataFrame({"boot_id": d["boot_id"], "predictor": col, "value": d[col],
                         "real_ms": d["piecewise_host_ms"], "loo_ms": pred})  # fmt: skip


def summary(m: pd.DataFrame) -> pd.DataFrame:
    const_ms = 1e3 * MEASURED_H200_VLLM026_ASYNC.piecewise_host_s
    rows = []
    for col in PREDICTORS:
        loo = leave_one_out(m, col)
        if len(loo) < 3:
            continue
        rho = loo["value"].rank().corr(loo["real_ms"].rank())
        err = (100 * (loo["loo_ms"] - loo["real_ms"]) / loo["real_ms"]).abs()
        err_c = (100 * (const_ms - loo["real_ms"]) / loo["real_ms"]).abs()
        real = loo["real_ms"]
        others = pd.Series([real.drop(i).mean() for i in real.index], index=real.index)
        err_o = (100 * (others - real) / real).abs()
        rows.append({"predictor": col, "machines": len(loo), "spearman": rho,
                     "loo_median_abs_err_pct": err.median(),
                     "constant_median_abs_err_pct": err_c.median(),
                     "others_mean_median_abs_err_pct": err_o.median(),
                     "beats_constant": bool(err.median() < err_c.median())})  # fmt: skip
    return pd.DataFrame(rows)


def markdown(m: pd.DataFrame, s: pd.DataFrame) -> str:
    const_ms = 1e3 * MEASURED_H200_VLLM026_ASYNC.piecewise_host_s
    lines = [
        "# Does a machine's start-up say how fast its host is? (a study)",
        "",
        "PLAN.md 2026-12-04 22:01 (rule fixed before computing; the machines' host fits had been "
        "seen). Per machine: host_fit_study.md's fit PIECEWISE host cost and three timings from "
        "the start-up logs recorded on it (means over its start-ups; compile seconds of cold "
        "start-ups only). Leave one machine out: PIECEWISE = the other machines' mean ratio "
        f"times this machine's timing, against the registered constant {const_ms:.1f} ms. "
        "Regenerate: `PYTHONPATH=. python3 experiments/engine/startup_host_study.py`.",
        "",
        "| predictor | machines | Spearman | LOO median abs err % | constant's % | beats the "
        "constant (the rule) | no predictor: the other machines' mean, % (added after the rule) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in s.itertuples():
        lines.append(
            f"| {r.predictor} | {r.machines} | {r.spearman:+.2f} | "
            f"{r.loo_median_abs_err_pct:.1f} | {r.constant_median_abs_err_pct:.1f} | "
            f"{'yes' if r.beats_constant else 'no'} | {r.others_mean_median_abs_err_pct:.1f} |"
        )
    lines += [
        "",
        "Reading: by the rule only the model loading seconds beat the constant, and they are a "
        "weak signal (rank correlation well below 0.5 over a dozen machines); the baseline "
        "added after the rule (no predictor at all, the other machines' mean PIECEWISE cost) "
        "comes close to them because the registered constant was fitted on one of the slower "
        "machines. No predictor is shipped: a deployment's host cost comes from a run on its own "
        "machine (`capsim engine host-fit`).",
    ]
    lines += ["", "| machine | fit run | PIECEWISE ms | start-ups | capture s / graph | "
              "compile s (cold) | load s |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in m.itertuples():
        lines.append(
            f"| {r.boot_id} | {r.fit_run} | {r.piecewise_host_ms:.1f} | {r.startups} | "
            f"{r.capture_s_per_graph:.3f} | {r.compile_s:.1f} | {r.load_s:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    fits = pd.read_csv(HERE / "host_fit_study.csv", dtype={"boot_id": str})
    m = per_machine(machine_startups(), fits)
    s = summary(m)
    _atomic(HERE / "startup_host_study.csv", m.to_csv(index=False))
    _atomic(HERE / "startup_host_study.md", markdown(m, s))
    print(markdown(m, s))


if __name__ == "__main__":
    main()
