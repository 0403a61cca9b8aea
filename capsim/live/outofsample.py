"""Out-of-sample live timing: fit the step-time model on one live run, predict the others.

``crosscheck`` fits the CPU step-time model (``capsim.live.steptime``) to a run's own step
log and replays that run's requests in the engine's observed admission order: an
in-sample fit. Here the model is fitted on ONE run (the "fit run") and the other runs are
predicted from their requests (prompt/output lengths, concurrency, server arguments) only:
no step log and no admission order of a predicted run is used (requests are offered in the
client's send order). Each run dir also records the machine's load average while it ran
(``loadavg.json``): live CPU timings on a shared machine are contended. Two predictions
per run: the fitted mean step time, and the mean times the fit run's observed spread
(``SpreadStepTime``).

A committed run dir (``experiments/live/runs/<name>/``) holds ``summary.json``,
``requests.parquet``, ``server.json``, ``config.json`` (the tiny model's HF config),
``step_log.parquet`` (the engine's per-step log, compact) and ``loadavg.json``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from capsim.cost.base import BatchShape, StepTimeModel
from capsim.live.client import read_step_log
from capsim.live.crosscheck import load_live, sim_config_for
from capsim.live.steptime import FittedStepTime, _features, fit_step_time
from capsim.traces.table import RequestTable

METRICS: tuple[str, ...] = (
    "output_throughput_tok_per_s",
    "ttft_mean_s",
    "ttft_p99_s",
    "tpot_mean_s",
    "tpot_p99_s",
)
STEP_LOG_COLUMNS: tuple[str, ...] = (
    "t_unix_s",
    "step_s",
    "num_tok",
    "num_req",
    "num_decode_req",
    "decode_ctx_tok",
    "num_prefill_tok",
)


def step_log(run_dir: Path) -> pd.DataFrame:
    """The run's engine step log: ``step_log.parquet`` (committed) or ``.jsonl`` (raw)."""
    run_dir = Path(run_dir)
    if (run_dir / "step_log.parquet").exists():
        return pd.read_parquet(run_dir / "step_log.parquet")
    if (run_dir / "step_log.jsonl").exists():
        return read_step_log(run_dir / "step_log.jsonl")
    raise ValueError(f"run_dir={str(run_dir)!r}: no step_log.parquet or step_log.jsonl")


def compact_run(src: Path, dst: Path, model_config: Path) -> None:
    """Copy a live run into a committed dir: the step log as Parquet, the model config."""
    import shutil

    src, dst = Path(src), Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    for name in ("summary.json", "requests.parquet", "server.json", "loadavg.json"):
        if (src / name).exists():
            shutil.copyfile(src / name, dst / name)
    log = step_log(src)
    log[[c for c in STEP_LOG_COLUMNS if c in log.columns]].to_parquet(
        dst / "step_log.parquet", index=False
    )
    shutil.copyfile(model_config, dst / "config.json")


class SpreadStepTime:
    """A fitted step-time model with its spread: step k is the fitted mean (without the
    loop gap) times the fit run's observed/fitted ratio of its step ``(offset + k) mod n``,
    in time order, so slow stretches (CPU contention, long prefills) stay contiguous as
    they were measured; ``offset`` is drawn from ``seed``. The mean model alone gives
    every batch the same time, which underestimates p99 TPOT."""

    def __init__(self, base: FittedStepTime, log: pd.DataFrame, seed: int = 0) -> None:
        x = _features(log)
        pred = np.maximum(x @ np.asarray(base.coef), base.min_step_s)
        self.base = base
        self.ratios = log["step_s"].to_numpy(float) / pred
        self._k = int(np.random.default_rng(seed).integers(self.ratios.size))

    def step_time_s(self, shape: BatchShape) -> float:
        gap = self.base.loop_gap_s
        ratio = float(self.ratios[self._k % self.ratios.size])
        self._k += 1
        return (self.base.step_time_s(shape) - gap) * ratio + gap

    def describe(self) -> dict[str, object]:
        q = np.quantile(self.ratios, [0.5, 0.9, 0.99])
        return {
            **self.base.describe(),
            "kind": "live-fitted+spread",
            "spread": f"replay of {self.ratios.size} observed/fitted step ratios in time order",
            "ratio_p50_p90_p99": [float(v) for v in q],
        }


def predict_run(run_dir: Path, cost: StepTimeModel) -> dict[str, Any]:
    """Simulate ``run_dir``'s requests (send order) with ``cost``; the simulated summary."""
    from capsim.simulate import simulate

    summary, requests, server = load_live(run_dir)
    if (Path(run_dir) / "config.json").exists():
        server = {**server, "model_dir": str(run_dir)}
    order = requests.sort_values("send_s", kind="stable")
    table = RequestTable(
        name="live",
        prompt_tok=order["prompt_tok"].to_numpy(),
        output_tok=order["output_tok"].to_numpy(),
        source_id=tuple(order["source_id"].astype(str)),
    )
    cfg = sim_config_for(server, int(summary["config"]["live"]["concurrency"]), len(order))
    return simulate(cfg, workload=table, cost=cost).summary


def out_of_sample_table(fit_dir: Path, run_dirs: list[Path]) -> pd.DataFrame:
    """One row per (run, metric): observed, predicted, relative error; the fit run first
    (in sample), then every other run (out of sample)."""
    fit_dir = Path(fit_dir)
    log = step_log(fit_dir)
    mean = fit_step_time(log, source=fit_dir.name)
    rows = []
    for d in [fit_dir, *[Path(r) for r in run_dirs if Path(r) != fit_dir]]:
        observed = json.loads((d / "summary.json").read_text())["summary"]
        pred_mean = predict_run(d, mean)
        pred_spread = predict_run(d, SpreadStepTime(mean, log, seed=0))
        load = json.loads((d / "loadavg.json").read_text()) if (d / "loadavg.json").exists() else {}
        for m in METRICS:
            o = float(observed.get(m, math.nan))
            row = {"run": d.name, "in_sample": d == fit_dir, "metric": m, "observed": o}
            for tag, pred in (("mean", pred_mean), ("spread", pred_spread)):
                p = float(pred.get(m, math.nan))
                row[f"pred_{tag}"] = p
                row[f"err_{tag}"] = (p - o) / o if o and math.isfinite(o) else math.nan
            row["loadavg_max"] = float(load.get("during_max", math.nan))
            rows.append(row)
    return pd.DataFrame(rows)
