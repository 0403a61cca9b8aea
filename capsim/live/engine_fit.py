"""Fit the engine-overhead constants (capsim.cost.engine_overhead) from committed step logs.

experiments/engine/PLAN.md (2026-12-01, the addition stamped 23:35, written 23:10): delta from
the mean TPOT of the idle-engine decode run (``delta = (TPOT_real - TPOT_capsim) * capsim's
tokens per step``, as at 20:01);
the host time of a step's CUDA-graph mode from the first-step latency (``t_done_s -
t_sched_s`` of the request's prefill step, vLLM's step log) of three concurrency-1 runs,
median over each run's requests, less delta: 128 prompt tokens -> PIECEWISE (one constant),
1024 and 4096 -> NONE (eager; a line in the step's tokens).

    PYTHONPATH=. python3 -m capsim.live.engine_fit experiments/engine/runs
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from capsim.cost.engine_overhead import NONE, PIECEWISE, EngineOverheadFit, graph_mode

DELTA_RUN = "g090_k3_rand_c1_steps"
PIECEWISE_RUN = "g090_k3_in128_c1"
EAGER_RUNS: tuple[str, str] = ("g090_k3_rand_c1_steps", "g090_k3_in4096_c1")
FIT_RUNS: tuple[str, ...] = (DELTA_RUN, PIECEWISE_RUN, EAGER_RUNS[1])


def first_steps(run_dir: Path) -> pd.DataFrame:
    """The prefill steps of requests that ran alone on an idle engine (one request, no
    decode beside it): tokens and latency in seconds."""
    if not (run_dir / "steps.csv").exists():
        raise ValueError(f"run_dir={str(run_dir)!r}: steps.csv is missing (no step log)")
    s = pd.read_csv(run_dir / "steps.csv")
    pre = s[(s["num_prefill_tok"] > 0) & (s["num_req"] == 1) & (s["num_decode_req"] == 0)]
    if pre.empty:
        raise ValueError(f"run_dir={str(run_dir)!r}: no lone prefill step in steps.csv")
    return pd.DataFrame(
        {"num_tok": pre["num_tok"].to_numpy(int), "lat_s": (pre["t_done_s"] - pre["t_sched_s"])}
    )


def _one_shape(runs: Path, name: str) -> tuple[int, float]:
    fs = first_steps(runs / name)
    if fs["num_tok"].nunique() != 1:
        raise ValueError(
            f"run {name}: first steps of {sorted(set(fs['num_tok']))} tokens, want one"
        )
    return int(fs["num_tok"].iloc[0]), float(np.median(fs["lat_s"]))


def fit_engine_overhead(runs: Path) -> EngineOverheadFit:
    """The PLAN.md fit; refused where capsim's kernel price of a fit step exceeds its
    latency (then the host term would not be what sets that step)."""
    from capsim.cost.factory import build_step_time_model
    from capsim.gpus import get_gpu
    from capsim.live.engine_oos import fit_delta_s, load_run, sim_config
    from capsim.memory.cudagraph import capture_descs

    delta = fit_delta_s(load_run(runs / DELTA_RUN))
    points = {n: _one_shape(runs, n) for n in (PIECEWISE_RUN, *EAGER_RUNS)}
    cfg = sim_config(load_run(runs / PIECEWISE_RUN))
    gpu = get_gpu(cfg.gpu)
    base = build_step_time_model(cfg, cfg.model_spec(), gpu)
    seqs, tokens = cfg.engine.resolved_batch_defaults(gpu)
    descs = capture_descs(
        vllm_version=cfg.engine.vllm_version,
        max_num_seqs=seqs,
        num_spec_tok=cfg.spec.num_draft_nodes,
        max_num_batched_tokens=tokens,
    )
    from capsim.cost.base import BatchShape

    host = {}
    for name, (tok, lat) in points.items():
        shape = BatchShape(
            num_decode_req=0,
            query_tok_per_decode=1 + cfg.spec.num_draft_nodes,
            decode_context_tok=np.zeros(0, np.int64),
            prefill_new_tok=np.array([tok]),
            prefill_computed_tok=np.array([0]),
        )
        want = PIECEWISE if name == PIECEWISE_RUN else NONE
        if graph_mode(shape, descs) != want:
            raise ValueError(
                f"run {name}: a {tok}-token step is {graph_mode(shape, descs)}, not {want}"
            )
        kernels = base.step_time_s(shape)
        if kernels + delta > lat:
            raise ValueError(
                f"run {name}: capsim's kernel price {kernels:.4f} s + delta exceeds the "
                f"measured first-step latency {lat:.4f} s: the host term does not set it"
            )
        host[name] = (tok, lat - delta)
    (t0, h0), (t1, h1) = host[EAGER_RUNS[0]], host[EAGER_RUNS[1]]
    slope = (h1 - h0) / (t1 - t0)
    return EngineOverheadFit(
        name="measured-h200-vllm0.26",
        delta_s=float(delta),
        piecewise_host_s=float(host[PIECEWISE_RUN][1]),
        eager_host_s=float(h0 - slope * t0),
        eager_host_s_per_tok=float(slope),
        fit_runs=FIT_RUNS,
        source="fit: experiments/engine/runs (device call 3), capsim.live.engine_fit",
        covers=("qwen3.5-35b-a3b", "H200", "0.26", 1),
    )


def fit_main(argv: list[str] | None, module: str, fit_fn: Callable[[Path], Any]) -> int:
    """A fit command's ``main``: ``python3 -m MODULE RUNS_DIR`` prints the fit (a
    dataclass) as JSON, its fields in order; exit 2 with a usage line otherwise."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: python3 -m {module} RUNS_DIR", file=sys.stderr)
        return 2
    fit = fit_fn(Path(args[0]))
    print(
        json.dumps({k: getattr(fit, k) for k in fit.__dataclass_fields__}, indent=1, default=list)
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    return fit_main(argv, "capsim.live.engine_fit", fit_engine_overhead)


if __name__ == "__main__":
    sys.exit(main())
