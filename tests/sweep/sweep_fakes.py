"""A cheap, deterministic stand-in for capsim.simulate.simulate used by the sweep tests.

It prices nothing: it derives plausible summaries from the real memory plan (so capacities
and store-all/TreeWY differences are real) and from a seeded sample of lengths (so the
same seed gives the same numbers). It is a top-level function, so it pickles into the
process-pool and dask workers.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from capsim.gpus import get_gpu
from capsim.memory.memory_plan import plan_memory
from capsim.models import get_model
from capsim.sim_result import SimResult
from capsim.sweep.grid import Block, Deployment, SweepSpec, WorkloadLoads


def fake_simulate(cfg) -> SimResult:
    rng = np.random.default_rng(cfg.seed)
    n = cfg.load.num_requests
    prompt = rng.integers(100, 2000, size=n)
    output = rng.integers(50, 600, size=n)
    plan = plan_memory(get_model(cfg.model), get_gpu(cfg.gpu), cfg.engine, cfg.spec)
    ctx = int(prompt.mean() + output.mean())
    cap = plan.max_concurrency(ctx)
    if cfg.load.mode == "concurrency":
        offered = float(cfg.load.concurrency)
    else:
        offered = float(cfg.load.rate_req_per_s) * 4.0  # ~4 s per request in flight
    running = min(offered, cap)
    over = max(0.0, offered / cap - 1.0)
    usage = min(1.0, running * plan.blocks_per_request(ctx) / plan.usable_blocks)
    step_s = 0.01 + 0.0001 * running
    summary = {
        "num_requests": n,
        "duration_s": n * step_s,
        "output_throughput_tok_per_s": running * 3.2 / step_s,
        "ttft_mean_s": 0.05 + 0.5 * over,
        "ttft_p99_s": 0.1 + 2.0 * over + 0.0002 * offered,
        "tpot_mean_s": step_s / 3.2,
        "tpot_p99_s": 1.5 * step_s / 3.2,
        "e2el_mean_s": 0.05 + 0.5 * over + output.mean() * step_s / 3.2,
        "peak_kv_usage": usage,
        "mean_kv_usage": usage * 0.8,
        "peak_running": int(running),
        "peak_waiting": int(max(0.0, offered - running)),
        "num_preemptions": int(over > 0.5),
        "mean_acceptance_len_tok": 3.2,
        "num_blocks": plan.num_blocks,
        "usable_blocks": plan.usable_blocks,
        "block_size_tok": plan.block_size_tok,
        "gdn_blocks_per_request": plan.gdn_blocks_per_request,
        "analytical_capacity_req": cap,
    }
    requests = pd.DataFrame({"req_id": np.arange(n), "prompt_tok": prompt, "output_tok": output})
    steps = pd.DataFrame(
        {"t_start_s": np.arange(10) * step_s, "kv_usage": np.linspace(0, usage, 10)}
    )
    return SimResult(
        config=cfg.to_dict(),
        summary=summary,
        requests=requests,
        steps=steps,
        step_time_model={"kind": "fake", "version": 1},
    )


def failing_simulate(cfg) -> SimResult:
    if cfg.load.offered_load >= 64:
        raise RuntimeError("boom at high load")
    return fake_simulate(cfg)


def other_calibration_simulate(cfg) -> SimResult:
    res = fake_simulate(cfg)
    return SimResult(
        config=res.config,
        summary=res.summary,
        requests=res.requests,
        steps=res.steps,
        step_time_model={"kind": "fake", "version": 2},
    )


WORKLOADS = frozenset(
    {
        "sharegpt",
        "spec-bench",
        "synthetic-balanced",
        "synthetic-prefill-heavy",
        "synthetic-generation-heavy",
        "burstgpt-standin",
    }
)


def small_spec(**changes) -> SweepSpec:
    """35B at two gmu values, one closed-loop and one open-loop workload: 12 points."""
    kwargs = {
        "name": "small",
        "blocks": (
            Block(
                name="main",
                deployments=(
                    Deployment(model="qwen3.5-35b-a3b", gpu="B200", tp=1, gmu=(0.6, 0.9)),
                ),
                workloads=(
                    WorkloadLoads(name="sharegpt", mode="concurrency", loads=(8, 128, 256)),
                    WorkloadLoads(name="burstgpt-standin", mode="rate", loads=(16, 64)),
                ),
            ),
        ),
        "num_requests": 40,
    }
    kwargs.update(changes)
    return SweepSpec(**kwargs)


def sleep_then_return(seconds: float) -> float:
    """A slow task for executor tests."""
    import time

    time.sleep(seconds)
    return seconds
