"""Fit the async step-period constants (capsim.cost.engine_period) from committed step logs.

experiments/engine/PLAN.md (2026-12-02 05:20, named before fitting): a step's real cost is
its sched-to-sched period in vLLM's step log (``t_sched_s[i+1] - t_sched_s[i]``; gaps over
1 s, an idle engine, dropped), means over the steps of one CUDA-graph mode (means, not
medians: throughput and mean TPOT are sums of periods; PLAN.md 2026-12-02 05:45):

- ``kernel_excess_s``: mean over the FULL steps of ``g090_k0_rand_c1`` of capsim's kernel
  price minus the period (one request, k = 0: no host floor hides the GPU there);
- the FULL host floor with MTP: the mean FULL period of ``g090_k1_rand_c1`` (k = 1) and of
  ``g090_k3_rand_c1_steps`` (k = 3), a line in k through the two;
- ``piecewise_host_s``: mean PIECEWISE period of ``g090m16_k3_sg_c64`` (loaded);
- ``eager_host_s``: mean NONE period over the four runs' NONE steps, pooled.

Refused where a fit step is not host-bound (the kernel price, less the excess, above the
period it is fitted to): then the period would not measure the host term.

    PYTHONPATH=. python3 -m capsim.live.engine_period_fit experiments/engine/runs
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from capsim.cost.base import BatchShape
from capsim.cost.engine_overhead import FULL, NONE, PIECEWISE, graph_mode
from capsim.cost.engine_period import AsyncPeriodFit
from capsim.live.engine_fit import fit_main

EXCESS_RUN = "g090_k0_rand_c1"
SPEC_RUNS: tuple[str, str] = ("g090_k1_rand_c1", "g090_k3_rand_c1_steps")
LOADED_RUN = "g090m16_k3_sg_c64"
FIT_RUNS: tuple[str, ...] = (EXCESS_RUN, *SPEC_RUNS, LOADED_RUN)
IDLE_GAP_S = 1.0
# fewest PIECEWISE / NONE steps a machine's host fit accepts per mode (the fit run of the
# registered fit has 121 PIECEWISE steps; a ShareGPT-like 64-client run has 75-280)
MIN_HOST_STEPS = 20


def step_shapes(steps: pd.DataFrame, num_spec_tok: int) -> list[BatchShape]:
    """Batch shapes rebuilt from a step log's counts: decode contexts at their mean, the
    prefill tokens split evenly over the step's prefill requests at 0 computed tokens (the
    log does not say how far each chunk is into its prompt: an approximation)."""
    out = []
    for r in steps.itertuples():
        n_pre = int(r.num_req - r.num_decode_req)
        dec = int(r.num_decode_req)
        ctx = r.decode_ctx_tok / dec if dec else 0
        pre = np.full(n_pre, r.num_prefill_tok // max(n_pre, 1), np.int64)
        if n_pre:
            pre[0] += r.num_prefill_tok - pre.sum()
        out.append(
            BatchShape(
                num_decode_req=dec,
                query_tok_per_decode=1 + num_spec_tok,
                decode_context_tok=np.full(dec, int(ctx), np.int64),
                prefill_new_tok=pre,
                prefill_computed_tok=np.zeros(n_pre, np.int64),
            )
        )
    return out


def run_periods(run_dir: Path) -> pd.DataFrame:
    """Per logged step: CUDA-graph mode, period and capsim's kernel price, in seconds."""
    from capsim.cost.factory import build_step_time_model
    from capsim.gpus import get_gpu
    from capsim.live.engine_oos import load_run, sim_config
    from capsim.memory.cudagraph import CaptureDescs, capture_descs

    if not (run_dir / "steps.csv").exists():
        raise ValueError(f"run_dir={str(run_dir)!r}: steps.csv is missing (no step log)")
    steps = pd.read_csv(run_dir / "steps.csv")
    cfg = sim_config(load_run(run_dir))
    gpu = get_gpu(cfg.gpu)
    base = build_step_time_model(cfg, cfg.model_spec(), gpu)
    seqs, tokens = cfg.engine.resolved_batch_defaults(gpu)
    k = cfg.spec.num_draft_nodes
    descs = (
        CaptureDescs((), ())  # --enforce-eager: every step is eager (NONE)
        if cfg.engine.enforce_eager
        else capture_descs(
            vllm_version=cfg.engine.vllm_version,
            max_num_seqs=seqs,
            num_spec_tok=k,
            max_num_batched_tokens=tokens,
        )
    )
    sh = step_shapes(steps, k)
    df = pd.DataFrame(
        {
            "mode": [graph_mode(s, descs) for s in sh],
            "period_s": steps["t_sched_s"].shift(-1) - steps["t_sched_s"],
            "kernels_s": [base.step_time_s(s) for s in sh],
        }
    ).iloc[:-1]
    return df[df["period_s"] < IDLE_GAP_S]


def _mode(df: pd.DataFrame, mode: str, run: str) -> pd.DataFrame:
    x = df[df["mode"] == mode]
    if x.empty:
        raise ValueError(f"run {run}: no {mode} step in steps.csv")
    return x


def _host_bound(x: pd.DataFrame, excess_s: float, what: str) -> float:
    period = float(np.mean(x["period_s"]))
    gpu = float(np.mean(x["kernels_s"])) - excess_s
    if gpu > period:
        raise ValueError(
            f"{what}: capsim's kernel price less the excess ({gpu:.4f} s) exceeds the "
            f"period ({period:.4f} s): the host term does not set it"
        )
    return period


def fit_async_period(runs: Path) -> AsyncPeriodFit:
    """The PLAN.md 2026-12-02 05:20 fit."""
    frames = {name: run_periods(runs / name) for name in FIT_RUNS}
    full0 = _mode(frames[EXCESS_RUN], FULL, EXCESS_RUN)
    excess = float(np.mean(full0["kernels_s"] - full0["period_s"]))
    h1, h3 = (_host_bound(_mode(frames[n], FULL, n), excess, f"run {n} FULL") for n in SPEC_RUNS)
    pw = _host_bound(_mode(frames[LOADED_RUN], PIECEWISE, LOADED_RUN), excess, "PIECEWISE")
    eager = pd.concat([_mode(f, NONE, n) for n, f in frames.items()])
    return AsyncPeriodFit(
        name="measured-h200-vllm0.26",
        kernel_excess_s=excess,
        full_spec_host_s=h1,
        full_spec_host_s_per_k=(h3 - h1) / 2.0,
        piecewise_host_s=pw,
        eager_host_s=_host_bound(eager, excess, "NONE"),
        fit_runs=FIT_RUNS,
        source="fit: experiments/engine/runs steps.csv periods, capsim.live.engine_period_fit",
    )


def fit_machine_host(
    run_dirs: list[Path], base: AsyncPeriodFit, name: str = "machine"
) -> AsyncPeriodFit:
    """``base`` with its PIECEWISE and NONE (eager) host costs replaced by one machine's own:
    the mean periods of those steps pooled over ``run_dirs`` (step logs of runs on that
    machine; the same period rule as the fit above). These host-bound steps are what moves
    from machine to machine (experiments/engine/repeatability.md: 50-57% apart where the
    GPU-bound FULL steps stay within 4%), so the FULL-graph terms and the kernel excess are
    kept from ``base``. Refused where a mode has fewer than ``MIN_HOST_STEPS`` steps or is
    not host-bound."""
    if not run_dirs:
        raise ValueError("host fit: no run given")
    frames = {d.name: run_periods(d) for d in run_dirs}
    out: dict[str, float] = {}
    for mode, key in ((PIECEWISE, "piecewise_host_s"), (NONE, "eager_host_s")):
        x = pd.concat([f[f["mode"] == mode] for f in frames.values()])
        if len(x) < MIN_HOST_STEPS:
            raise ValueError(
                f"host fit: {len(x)} {mode} steps in {sorted(frames)}, need >= {MIN_HOST_STEPS} "
                "(a run with prefills under load has them)"
            )
        out[key] = _host_bound(x, base.kernel_excess_s, f"host fit {mode}")
    return dataclasses.replace(
        base,
        name=name,
        fit_runs=tuple(sorted(frames)),
        source=f"fit: PIECEWISE/NONE mean periods of {sorted(frames)} (capsim engine host-fit); "
        f"FULL terms and kernel excess from {base.name}",
        **out,
    )


def main(argv: list[str] | None = None) -> int:
    return fit_main(argv, "capsim.live.engine_period_fit", fit_async_period)


if __name__ == "__main__":
    sys.exit(main())
