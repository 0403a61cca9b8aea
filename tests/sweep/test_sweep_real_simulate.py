"""The sweep over the real simulator: identical results in any executor, sane ratios."""

from __future__ import annotations

import pandas as pd
import pytest

from capsim.sweep.executors import LocalExecutor, SerialExecutor
from capsim.sweep.grid import Block, Deployment, SweepSpec, WorkloadLoads
from capsim.sweep.knee import knee_table
from capsim.sweep.runner import run_sweep

pytest.importorskip("capsim.simulate")


def tiny_spec() -> SweepSpec:
    return SweepSpec(
        name="tiny-real",
        blocks=(
            Block(
                name="main",
                deployments=(Deployment(model="qwen3.5-35b-a3b", gpu="B200", tp=1, gmu=(0.6,)),),
                workloads=(
                    WorkloadLoads(name="spec-bench", loads=(8, 192)),
                    WorkloadLoads(name="burstgpt-standin", mode="rate", loads=(16,)),
                ),
            ),
        ),
        requests_per_concurrency=1.0,  # 8 and 192 requests: one per client slot
        rate_window_s=1.0,  # 16 requests at 16 req/s
        min_requests=8,
    )


def test_real_sweep_is_executor_independent(tmp_path):
    spec = tiny_spec()
    a = run_sweep(spec, tmp_path / "serial", executor=SerialExecutor(), progress=False)
    b = run_sweep(spec, tmp_path / "local", executor=LocalExecutor(2), progress=False)
    assert a.ok and b.ok and len(a.points) == 6
    pd.testing.assert_frame_equal(a.points, b.points)
    pd.testing.assert_frame_equal(a.matched, b.matched)
    m = a.matched.set_index("load")
    # store-all holds 1 + k = 4 GDN slots per group, TreeWY 1: its pool peak is larger
    assert (m["kv_reduction"] > 1).all()
    # at 192 concurrent requests store-all's pool (capacity ~130 at this gmu) is the limit
    assert bool(m.loc[192.0, "memory_bound"])
    assert m.loc[192.0, "admitted_ratio"] > 1
    k = knee_table(a.points)
    row = k[k["workload"] == "spec-bench"].iloc[0]
    assert row["knee_storeall"] == 192 and pd.isna(row["knee_treewy"])
    assert row["capacity_storeall"] < 192 <= row["capacity_treewy"]
