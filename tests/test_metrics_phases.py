"""Warm-up / under-load / cool-down split of a run (capsim.metrics.phases)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from capsim.config import EngineConfig, LoadConfig, SimConfig
from capsim.metrics import phases
from capsim.simulate import simulate


def _frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    # 3 requests: two sent at t=0 (the burst), one at t=2 when the first finished.
    req = pd.DataFrame(
        {
            "send_s": [0.0, 0.0, 2.0],
            "finish_s": [2.0, 5.0, 6.0],
            "ttft_s": [0.5, 0.7, 0.2],
        }
    )
    # one step per second, 10 tokens each, ending at t = 1..6
    steps = pd.DataFrame(
        {"t_start_s": np.arange(6.0), "step_s": np.ones(6), "num_emitted_tok": np.full(6, 10)}
    )
    return req, steps


def test_phase_boundaries_and_rates() -> None:
    req, steps = _frames()
    p = phases(req, steps)
    assert p["warmup_s"] == 2.0  # first finish
    assert p["load_window_s"] == 2.0  # last send
    assert p["cooldown_s"] == 4.0  # last finish - last send
    assert p["load_output_throughput_tok_per_s"] == pytest.approx(20 / 2.0)
    assert p["cooldown_output_throughput_tok_per_s"] == pytest.approx(40 / 4.0)
    assert p["steady_num_requests"] == 1 and p["steady_ttft_p99_s"] == pytest.approx(0.2)


def test_all_sent_in_the_burst_has_no_steady_ttft() -> None:
    req, steps = _frames()
    req.loc[2, "send_s"] = 0.0
    p = phases(req, steps)
    assert p["steady_num_requests"] == 0 and math.isnan(p["steady_ttft_p99_s"])
    assert math.isnan(p["load_output_throughput_tok_per_s"])  # empty window


def test_simulated_run_reports_the_phases_and_they_add_up() -> None:
    cfg = SimConfig(
        workload="sharegpt",
        engine=EngineConfig(gmu=0.9),
        load=LoadConfig(concurrency=16, num_requests=64),
        step_time="roofline",
    )
    s = simulate(cfg).summary
    assert s["load_window_s"] + s["cooldown_s"] == pytest.approx(s["duration_s"])
    tok = (
        s["load_output_throughput_tok_per_s"] * s["load_window_s"]
        + s["cooldown_output_throughput_tok_per_s"] * s["cooldown_s"]
    )
    assert tok == pytest.approx(s["total_output_tok"])
    assert 0 < s["steady_num_requests"] <= 64 - 16 + 1
