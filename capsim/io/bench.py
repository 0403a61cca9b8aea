"""A simulated point as ``vllm bench serve --save-result`` writes one (its metric names).

Times are in milliseconds as vLLM writes them (``mean_ttft_ms``, ``p99_tpot_ms``, ...);
throughputs per second; ``request_rate`` is null for a closed loop (vLLM writes ``inf``,
which is not JSON). ``std_*_ms`` come from the per-request columns (ITL: from the summary
only, so no std). Fields vLLM writes that a simulation has no value for are left out.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from capsim.sim_result import SimResult

_METRICS = ("ttft", "tpot", "itl", "e2el")


def _ms(value: Any) -> float | None:
    v = float(value) if value is not None else math.nan
    return v * 1e3 if math.isfinite(v) else None


def bench_result(result: SimResult) -> dict[str, Any]:
    s, cfg, req = result.summary, result.config, result.requests
    load = cfg["load"]
    out: dict[str, Any] = {
        "backend": "capsim",
        "model_id": cfg["model"],
        "dataset_name": cfg["workload"],
        "num_prompts": load["num_requests"],
        "request_rate": load["rate_req_per_s"] if load["mode"] == "rate" else None,
        "burstiness": load["burstiness"],
        "max_concurrency": load["concurrency"],
        "duration": s["duration_s"],
        "completed": s["num_requests"],
        "total_input_tokens": int(req["prompt_tok"].sum()),
        "total_output_tokens": int(s["total_output_tok"]),
        "request_throughput": s["request_throughput_req_per_s"],
        "output_throughput": s["output_throughput_tok_per_s"],
        "total_token_throughput": s["total_token_throughput_tok_per_s"],
    }
    for m in _METRICS:
        out[f"mean_{m}_ms"] = _ms(s.get(f"{m}_mean_s"))
        out[f"median_{m}_ms"] = _ms(s.get(f"{m}_median_s"))
        out[f"p99_{m}_ms"] = _ms(s.get(f"{m}_p99_s"))
        col = f"{m}_s"
        if col in req:
            vals = req[col].to_numpy(dtype=float)
            vals = vals[np.isfinite(vals)]
            out[f"std_{m}_ms"] = float(vals.std()) * 1e3 if vals.size else None
    out["step_time_model"] = s.get("step_time_label")
    return out
