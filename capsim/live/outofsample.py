"""Out-of-sample live timing: fit the step-time model on one live run, predict the others.

``crosscheck`` fits the CPU step-time model (``capsim.live.steptime``) to a run's own step
log and replays that run's requests in the engine's observed admission order: an
in-sample fit. Here each run is predicted from another run's step log (its "fit run")
and from its own inputs only: requests (prompt/output lengths) in the client's send
order, server arguments, and load: closed loop at its concurrency, or open loop replaying
the client's Poisson release times (``LiveRun.request_rate_per_s``). With speculative
decoding (MTP), capsim's speculation model runs with the per-depth acceptance measured
on the fit run (vLLM's per-position counters): acceptance is a workload input of capsim.
No step log and no admission order of a predicted run is used. Two predictions per run:
the fitted mean step time, and the mean times the fit run's observed spread
(``SpreadStepTime``). Each run dir also records the machine's load while it ran
(``loadavg.json``: 1-min load average before and during, cores used by other processes).

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

from capsim.config import AcceptanceConfig, LoadConfig, SpecDecodeConfig
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


def fit_acceptance(summary: dict[str, Any], num_spec_tok: int) -> AcceptanceConfig:
    """Per-depth conditional acceptance from a run's vLLM counters: depth d+1 accepted
    given depths <= d were = accepted_per_pos[d] / accepted_per_pos[d-1] (/ drafts at d=0).
    Acceptance is a workload input of capsim; here it is measured on the fit run."""
    pos = [int(v) for v in summary.get("spec_accepted_per_pos", [])]
    drafts = int(summary.get("spec_num_drafts", 0))
    if drafts <= 0 or len(pos) < num_spec_tok:
        raise ValueError(
            f"summary spec_num_drafts={drafts}, spec_accepted_per_pos={pos}: "
            f"no acceptance counters for {num_spec_tok} draft positions"
        )
    prev, cond = drafts, []
    for a in pos[:num_spec_tok]:
        cond.append(a / prev if prev else 0.0)
        prev = a
    return AcceptanceConfig(conditional=tuple(cond))


def observed_acceptance_len_tok(summary: dict[str, Any]) -> float:
    """Mean tokens per verify step (bonus included), from vLLM's counters; nan without."""
    drafts = int(summary.get("spec_num_drafts", 0))
    return 1.0 + summary["spec_num_accepted_tokens"] / drafts if drafts else math.nan


def num_spec_tok(server: dict[str, Any]) -> int:
    """k of the server's ``--speculative-config`` (0 without one)."""
    text = server.get("speculative_config") or ""
    return int(json.loads(text).get("num_speculative_tokens", 0)) if text else 0


def predict_run(
    run_dir: Path, cost: StepTimeModel, acceptance: AcceptanceConfig | None = None
) -> dict[str, Any]:
    """Simulate ``run_dir``'s requests with ``cost``; the simulated summary.

    Only the run's inputs are used: its requests in the client's send order, its server
    arguments, its load (closed loop at its concurrency, or open loop replaying the
    client's Poisson release times) and, with speculation, ``acceptance`` (taken from
    another run). Nothing of the run's own step log is read."""
    from capsim.simulate import simulate

    summary, requests, server = load_live(run_dir)
    if (Path(run_dir) / "config.json").exists():
        server = {**server, "model_dir": str(run_dir)}
    order = requests.sort_values(["release_s", "send_s"], kind="stable")
    live_load = summary["config"].get("load") or {
        "mode": "concurrency", "concurrency": summary["config"]["live"]["concurrency"]
    }  # fmt: skip
    n, conc = len(order), int(live_load["concurrency"])
    open_loop = live_load.get("mode") == "rate"
    table = RequestTable(
        name="live",
        prompt_tok=order["prompt_tok"].to_numpy(),
        output_tok=order["output_tok"].to_numpy(),
        source_id=tuple(order["source_id"].astype(str)),
        arrival_s=order["release_s"].to_numpy(float) if open_loop else None,
    )
    load = (
        LoadConfig(mode="replay", concurrency=min(conc, n), num_requests=n) if open_loop else None
    )
    k = num_spec_tok(server)
    spec = None
    if k:
        if acceptance is None:
            raise ValueError(f"run_dir={str(run_dir)!r}: speculative run needs an acceptance")
        spec = SpecDecodeConfig(num_spec_tok=k, commit="storeall", acceptance=acceptance)
    cfg = sim_config_for(server, conc, n, load=load, spec=spec)
    return simulate(cfg, workload=table, cost=cost).summary


def out_of_sample_table(runs_dir: Path, plan: list[tuple[str, str]]) -> pd.DataFrame:
    """One row per (run, metric): observed, predicted, relative error. ``plan`` lists
    (run, fit run): each run is predicted from its fit run's step log (and, with
    speculation, the fit run's acceptance); a run that is its own fit run is in sample."""
    runs_dir = Path(runs_dir)
    fits: dict[str, tuple[FittedStepTime, pd.DataFrame, dict[str, Any]]] = {}
    rows = []
    for run, fit in plan:
        if fit not in fits:
            log = step_log(runs_dir / fit)
            fit_summary = json.loads((runs_dir / fit / "summary.json").read_text())["summary"]
            fits[fit] = (fit_step_time(log, source=fit), log, fit_summary)
        mean, log, fit_summary = fits[fit]
        d = runs_dir / run
        _, _, server = load_live(d)
        k = num_spec_tok(server)
        acc = fit_acceptance(fit_summary, k) if k else None
        observed = json.loads((d / "summary.json").read_text())["summary"]
        preds = {
            "mean": predict_run(d, mean, acc),
            "spread": predict_run(d, SpreadStepTime(mean, log, seed=0), acc),
        }
        load = json.loads((d / "loadavg.json").read_text()) if (d / "loadavg.json").exists() else {}
        metrics = METRICS + (("mean_acceptance_len_tok",) if k else ())
        for m in metrics:
            o = (observed_acceptance_len_tok(observed) if m == "mean_acceptance_len_tok"
                 else float(observed.get(m, math.nan)))  # fmt: skip
            row = {"run": run, "fit": fit, "in_sample": run == fit, "metric": m, "observed": o}
            for tag, pred in preds.items():
                p = float(pred.get(m, math.nan))
                row[f"pred_{tag}"] = p
                row[f"err_{tag}"] = (p - o) / o if o and math.isfinite(o) else math.nan
            row["load_before"] = float(load.get("before", math.nan))
            row["loadavg_max"] = float(load.get("during_max", math.nan))
            row["others_cores"] = float(load.get("others_cores_mean", math.nan))
            rows.append(row)
    return pd.DataFrame(rows)


def format_table(df: pd.DataFrame) -> str:
    """The table as text: one line per run, errors in percent (mean model / spread)."""
    short = {"output_throughput_tok_per_s": "thru", "ttft_mean_s": "TTFT", "ttft_p99_s":
             "TTFTp99", "tpot_mean_s": "TPOT", "tpot_p99_s": "TPOTp99",
             "mean_acceptance_len_tok": "acc_len"}  # fmt: skip
    lines = []
    for run, g in df.groupby("run", sort=False):
        g = g.set_index("metric")
        first = g.iloc[0]
        lines.append(
            f"{run:26s} fit={first['fit']:22s} load before {first['load_before']:.2f} "
            f"max {first['loadavg_max']:.2f} others {first['others_cores']:.2f} cores"
        )
        for m, r in g.iterrows():
            lines.append(
                f"    {short[m]:8s} obs {r['observed']:10.4g}  "
                f"mean {r['pred_mean']:10.4g} ({r['err_mean']:+7.1%})  "
                f"spread {r['pred_spread']:10.4g} ({r['err_spread']:+7.1%})"
            )
    return "\n".join(lines)
