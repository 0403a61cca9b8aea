"""Matched ratios, the memory-bound rule and the knee, on hand-built tables."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from capsim.sweep.knee import format_knee, knee_table
from capsim.sweep.matched import geomean, is_memory_bound, matched_table


def _row(
    commit,
    load,
    *,
    thr,
    blocks,
    running,
    ttft,
    tpot=0.01,
    e2el=1.0,
    pre=0,
    usage=0.5,
    usable=1000,
    per_req=10,
    cap=100.0,
    mid=None,
    mode="concurrency",
):
    return {
        "match_id": mid or f"m{load}",
        "block": "main",
        "model": "qwen3.5-35b-a3b",
        "gpu": "B200",
        "tp": 1,
        "gmu": 0.6,
        "workload": "sharegpt",
        "load_mode": mode,
        "load": float(load),
        "tree": "chain",
        "num_spec_tok": 3,
        "seed": 0,
        "commit": commit,
        "output_throughput_tok_per_s": thr,
        "peak_kv_blocks": blocks,
        "peak_kv_usage": usage,
        "usable_blocks": usable,
        "blocks_per_mean_request": per_req,
        "peak_running": running,
        "ttft_p99_s": ttft,
        "ttft_mean_s": ttft / 2,
        "tpot_mean_s": tpot,
        "e2el_mean_s": e2el,
        "num_preemptions": pre,
        "analytical_capacity_req": cap,
    }


def test_ratio_orientation():
    pts = pd.DataFrame(
        [
            _row("storeall", 64, thr=100.0, blocks=900, running=50, ttft=2.0, tpot=0.02),
            _row("reconstruct", 64, thr=150.0, blocks=300, running=64, ttft=0.5, tpot=0.01),
        ]
    )
    m = matched_table(pts)
    assert len(m) == 1
    r = m.iloc[0]
    assert r["throughput_ratio"] == pytest.approx(1.5)
    assert r["kv_reduction"] == pytest.approx(3.0)
    assert r["admitted_ratio"] == pytest.approx(64 / 50)
    assert r["ttft_p99_ratio"] == pytest.approx(4.0)
    assert r["tpot_ratio"] == pytest.approx(2.0)
    assert r["mode"] == "reconstruct"


def test_memory_bound_rule():
    base = pd.Series(_row("storeall", 8, thr=1, blocks=1, running=1, ttft=1, usage=0.5))
    assert not is_memory_bound(base)  # 500 free blocks >= 10 needed
    tight = base.copy()
    tight["peak_kv_usage"] = 0.995  # 5 free blocks < 10 needed
    assert is_memory_bound(tight)
    preempted = base.copy()
    preempted["num_preemptions"] = 3
    assert is_memory_bound(preempted)


def test_knee_first_load_below_offered():
    rows = []
    for load, sa_run, tw_run in ((8, 8, 8), (64, 63, 63), (128, 100, 128), (256, 100, 200)):
        # a full pool where a row falls short; at 64 both sit one short with headroom (async's
        # in-transit replacement): not a knee
        use = 1.0 if load >= 128 else 0.5
        rows.append(
            _row("storeall", load, thr=1, blocks=1, running=sa_run, ttft=1, cap=100, usage=use)
        )
        rows.append(
            _row("reconstruct", load, thr=1, blocks=1, running=tw_run, ttft=1, cap=300, usage=use)
        )
    k = knee_table(pd.DataFrame(rows))
    assert len(k) == 1
    assert k.iloc[0]["knee_storeall"] == 128
    assert k.iloc[0]["knee_treewy"] == 256
    assert k.iloc[0]["capacity_storeall"] == 100
    assert k.iloc[0]["capacity_treewy"] == 300
    assert "128" in format_knee(k)


def test_knee_never_reached_is_nan():
    rows = [
        _row(c, load, thr=1, blocks=1, running=load, ttft=1)
        for load in (1, 8)
        for c in ("storeall", "reconstruct")
    ]
    k = knee_table(pd.DataFrame(rows))
    assert math.isnan(k.iloc[0]["knee_storeall"])


def test_geomean():
    assert geomean(pd.Series([1.0, 4.0])) == pytest.approx(2.0)
    assert geomean(pd.Series([2.0, float("nan"), 0.0, 8.0])) == pytest.approx(4.0)
    assert math.isnan(geomean(pd.Series([], dtype=float)))
