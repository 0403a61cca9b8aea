"""One simulated replica at one load -> the few numbers a plan needs (plain floats).

Workers return these dicts instead of whole ``SimResult`` objects (no per-request frames
cross the process boundary). Definitions are vLLM bench's (``capsim.metrics``);
``busy_frac`` = engine time spent in steps / run duration (1.0 whenever a request is in
flight: not a capacity measure; plans report load as a fraction of the SLO capacity);
``goodput_frac`` = share of requests whose own TTFT and TPOT are within the SLO's limits.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from capsim.config import SimConfig
from capsim.cost.base import StepTimeModel
from capsim.plan.inputs import PlanSlo


def stats_of(result: Any, slo: PlanSlo) -> dict[str, float]:
    req = result.requests
    ttft = req["ttft_s"].to_numpy()
    tpot = req["tpot_s"].to_numpy()
    e2el = req["e2el_s"].to_numpy()
    s = result.summary
    ok = np.ones(ttft.size, dtype=bool)
    if slo.ttft_limit_s is not None:
        ok &= ttft <= slo.ttft_limit_s
    if slo.tpot_limit_s is not None:
        ok &= ~(tpot > slo.tpot_limit_s)  # NaN TPOT (one output token) passes
    tp = tpot[np.isfinite(tpot)]
    duration = float(s["duration_s"])
    steps = result.steps
    busy = float(steps["step_s"].sum()) / duration if duration > 0 and len(steps) else math.nan
    return {
        "ttft_p50_s": float(np.median(ttft)),
        "ttft_p99_s": float(np.percentile(ttft, 99)),
        "tpot_mean_s": float(tp.mean()) if tp.size else math.nan,
        "tpot_p99_s": float(np.percentile(tp, 99)) if tp.size else math.nan,
        "e2el_p99_s": float(np.percentile(e2el, 99)),
        "goodput_frac": float(ok.mean()),
        "output_tok_per_s": float(s["output_throughput_tok_per_s"]),
        "request_per_s": float(s["request_throughput_req_per_s"]),
        "mean_output_tok": float(req["output_tok"].mean()),
        "busy_frac": busy,
        "mean_kv_usage": float(s.get("mean_kv_usage", math.nan)),
        "peak_running": float(s.get("peak_running", math.nan)),
        "num_preemptions": float(s.get("num_preemptions", 0)),
        "mean_acceptance_len_tok": float(s.get("mean_acceptance_len_tok", math.nan)),
        "num_requests": float(len(req)),
    }


def run_point(cfg: SimConfig, cost: StepTimeModel | None, slo: PlanSlo) -> dict[str, float]:
    from capsim.simulate import simulate

    return stats_of(simulate(cfg, cost=cost), slo)
