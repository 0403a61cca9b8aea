"""Timing cross-check: simulate a recorded live run and compare with what was observed.

A live dir (written by ``capsim live`` / ``experiments/live/timing_check.py``) holds:

    summary.json, requests.parquet, steps.parquet   the live run, SimResult schema
    server.json                                     the vLLM server's engine arguments
    step_log.jsonl                                  the engine core's own per-step log

``crosscheck`` fits a step-time model to ``step_log.jsonl`` (``capsim.live.steptime``),
simulates the same requests (same prompt/output lengths, same concurrency) with
``capsim.simulate.simulate``, and reports predicted vs observed peak running, waiting,
preemptions, KV usage, TTFT/TPOT percentiles and throughput.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pandas as pd

from capsim.config import EngineConfig, LoadConfig, SimConfig, SpecDecodeConfig
from capsim.live.client import read_step_log
from capsim.live.stepcheck import CPU_KERNEL_BLOCK_ALIGN_TOK, trace_ssm_state_dtype
from capsim.live.steptime import FittedStepTime, fit_step_time
from capsim.sim_result import SimResult
from capsim.traces.table import RequestTable

COMPARED_METRICS: tuple[str, ...] = (
    "output_throughput_tok_per_s",
    "duration_s",
    "ttft_median_s",
    "ttft_p99_s",
    "tpot_median_s",
    "tpot_p99_s",
    "e2el_median_s",
    "peak_running",
    "peak_waiting",
    "peak_kv_usage",
    "num_preemptions",
)


def sim_config_for(
    server: dict[str, Any],
    concurrency: int,
    num_requests: int,
    *,
    load: LoadConfig | None = None,
    spec: SpecDecodeConfig | None = None,
) -> SimConfig:
    """The SimConfig that mirrors a live server (tiny model, forced pool size); closed
    loop at ``concurrency`` unless ``load`` is given, no speculation unless ``spec`` is."""
    model_cfg = Path(server["model_dir"]) / "config.json"
    engine = EngineConfig(
        max_num_seqs=int(server["max_num_seqs"]),
        max_num_batched_tokens=int(server["max_num_batched_tokens"]),
        max_model_len=int(server["max_model_len"]),
        num_gpu_blocks_override=int(server["num_gpu_blocks"]),
        enable_prefix_caching=False,
        kernel_block_align_tok=max(CPU_KERNEL_BLOCK_ALIGN_TOK, int(server["block_size"])),
        ssm_state_dtype=trace_ssm_state_dtype(server),
        # the CPU backend always runs sync (vLLM platforms/cpu.py: async_scheduling = False)
        async_scheduling=False,
    )
    return SimConfig(
        model=str(model_cfg),
        gpu="H200",  # unused: the pool size is forced by num_gpu_blocks_override
        engine=engine,
        spec=spec or SpecDecodeConfig(num_spec_tok=0),
        workload="live",
        load=load
        or LoadConfig(mode="concurrency", concurrency=concurrency, num_requests=num_requests),
        seed=0,
        step_time="live-fitted",
    )


def load_live(live_dir: Path) -> tuple[dict[str, Any], pd.DataFrame, dict[str, Any]]:
    live_dir = Path(live_dir)
    for name in ("summary.json", "requests.parquet", "server.json"):
        if not (live_dir / name).exists():
            raise ValueError(f"live_dir={str(live_dir)!r}: {name} is missing")
    summary = json.loads((live_dir / "summary.json").read_text())
    requests = pd.read_parquet(live_dir / "requests.parquet")
    server = json.loads((live_dir / "server.json").read_text())
    return summary, requests, server


def simulate_live(live_dir: Path) -> tuple[SimResult, FittedStepTime, dict[str, Any]]:
    from capsim.simulate import simulate

    summary, requests, server = load_live(live_dir)
    log_path = Path(live_dir) / "step_log.jsonl"
    if not log_path.exists():
        raise ValueError(f"live_dir={str(live_dir)!r}: step_log.jsonl is missing")
    log = read_step_log(log_path)
    cost = fit_step_time(log, source=str(log_path))
    live_cfg = summary["config"]["live"]
    order = requests.loc[engine_order(requests, log)]
    table = RequestTable(
        name="live",
        prompt_tok=order["prompt_tok"].to_numpy(),
        output_tok=order["output_tok"].to_numpy(),
        source_id=tuple(order["source_id"].astype(str)),
    )
    cfg = sim_config_for(server, int(live_cfg["concurrency"]), len(order))
    result = simulate(cfg, workload=table, cost=cost)
    return result, cost, summary["summary"]


_REQ_ID = re.compile(r"^cmpl-(r\d+)")


def engine_order(requests: pd.DataFrame, log: pd.DataFrame) -> list[int]:
    """Row labels of ``requests`` in the order the engine first scheduled them.

    Clients racing to the server reach vLLM's FCFS queue in an order that differs from
    their send order by microseconds, and with a full pool that order decides who waits.
    The engine's step log lists first admissions (``new_req_ids``, named after the
    client's X-Request-Id); without it, the client's send order is used.
    """
    by_id = {rid: label for label, rid in requests["req_id"].items()}
    seen: list[int] = []
    if "new_req_ids" in log.columns:
        for ids in log["new_req_ids"]:
            for rid in ids if isinstance(ids, list) else []:
                m = _REQ_ID.match(rid)
                if m and m.group(1) in by_id and by_id[m.group(1)] not in seen:
                    seen.append(by_id[m.group(1)])
    rest = [lbl for lbl in requests.sort_values("send_s").index if lbl not in set(seen)]
    return seen + rest


def compare_summaries(observed: dict[str, Any], predicted: dict[str, Any]) -> pd.DataFrame:
    rows = []
    for key in COMPARED_METRICS:
        o = float(observed.get(key, math.nan))
        p = float(predicted.get(key, math.nan))
        rel = (p - o) / o if o not in (0.0,) and math.isfinite(o) else math.nan
        rows.append({"metric": key, "observed": o, "predicted": p, "rel_err": rel})
    return pd.DataFrame(rows)


def crosscheck(live_dir: Path) -> dict[str, Any]:
    """Simulate ``live_dir``'s run; write and return the comparison."""
    from capsim.io.atomic import write_json_atomic

    result, cost, observed = simulate_live(live_dir)
    table = compare_summaries(observed, result.summary)
    report = {
        "live_dir": str(live_dir),
        "step_time_model": cost.describe(),
        "rows": table.to_dict(orient="records"),
        "throughput_within_10pct": bool(
            abs(table.set_index("metric").loc["output_throughput_tok_per_s", "rel_err"]) <= 0.10
        ),
        "ttft_p99_within_20pct": bool(
            abs(table.set_index("metric").loc["ttft_p99_s", "rel_err"]) <= 0.20
        ),
        "simulated_summary": result.summary,
    }
    write_json_atomic(Path(live_dir) / "crosscheck.json", report)
    return report
