"""The capacity search on a stand-in replica: grid, bisection, the steady-state rule."""

from __future__ import annotations

import math

import pytest

import capsim.plan.capacity as cap
from capsim.plan.inputs import PlanSlo, SearchSettings
from capsim.plan.space import Candidate

CAND = Candidate(
    model="qwen3.5-35b-a3b",
    gpu="H200",
    tp=1,
    gmu=0.92,
    max_num_seqs=None,
    max_num_batched_tokens=None,
    num_spec_tok=3,
    tree=None,
    commit="storeall",
    enable_prefix_caching=False,
    kv_cache_dtype="bfloat16",
    max_model_len=8192,
    step_time="roofline",
)


def _fake(true_cap: float, short_bias: float):
    """p99 TTFT = 1 s x rate / cap_seen, where short runs see a capacity inflated by
    ``short_bias / num_requests`` (the overstatement of short probes), vanishing as runs grow."""

    def run_point(cfg, cost, slo):
        n = cfg.load.num_requests
        seen = true_cap * (1 + short_bias * 100 / n)
        p99 = cfg.load.rate_req_per_s / seen
        return dict.fromkeys(("ttft_p50_s", "tpot_mean_s", "tpot_p99_s", "e2el_p99_s"), 0.0) | {
            "ttft_p99_s": p99,
            "goodput_frac": 1.0,
            "num_requests": float(n),
            "mean_output_tok": 100.0,
            "output_tok_per_s": 1.0,
        }

    return run_point


def _task(**kw):
    settings = SearchSettings(probe_min_requests=100, probe_duration_s=1.0, rel_tol=0.05, **kw)
    top = 100.0
    return cap.CapacityTask(
        cand=CAND,
        workload="sharegpt",
        burstiness=1.0,
        slo=PlanSlo(ttft_p99_s=1.0),
        settings=settings,
        top_req_per_s=top,
        num_grid=cap.num_grid_for(0.05, 64),
    )


def test_grid_and_replicas():
    assert cap.grid_rate(100.0, 0.05, 0) == 100.0
    assert cap.grid_rate(100.0, 0.05, 2) == pytest.approx(100 / 1.05**2)
    assert cap.replicas_for(100.0, 100 / 1.05**2) == 2  # 1.1025 -> 2
    assert cap.replicas_for(100.0, 100.0) == 1
    assert 1.05 ** cap.num_grid_for(0.05, 64) >= 64


def test_exact_capacity_when_runs_are_steady(monkeypatch):
    monkeypatch.setattr(cap, "run_point", _fake(30.0, 0.0))
    row = cap.search_capacity(_task())
    assert row["status"] == "ok" and row["steady"]
    j = row["grid_j"]
    assert cap.grid_rate(100, 0.05, j) <= 30.0 < cap.grid_rate(100, 0.05, j - 1)


def test_short_probe_overstatement_is_caught(monkeypatch):
    """Short probes see 50% more capacity; the doubling rule keeps lengthening the run
    until p99 TTFT settles, so the answer ends close to the true capacity."""
    monkeypatch.setattr(cap, "run_point", _fake(30.0, 0.5))
    row = cap.search_capacity(_task(max_doublings=6))
    assert row["run_multiplier"] > 1
    assert (
        row["capacity_req_per_s"]
        <= 30.0 * (1 + 0.5 * 100 / (100 * 2 * row["run_multiplier"])) + 1e-9
    )
    short = cap.search_capacity(_task(max_doublings=0))
    assert not short["steady"] and short["capacity_req_per_s"] > row["capacity_req_per_s"]


def test_infeasible_when_nothing_meets(monkeypatch):
    monkeypatch.setattr(cap, "run_point", _fake(0.01, 0.0))
    row = cap.search_capacity(_task())
    assert row["status"] == "infeasible" and "req/s per replica" in row["reason"]
    assert math.isnan(row.get("capacity_req_per_s", math.nan))
