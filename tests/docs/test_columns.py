"""The result schema (capsim/sweep/columns.py, rendered as docs/reference/columns.md)
against the columns a real sweep writes: none undocumented, none documented but gone."""

from __future__ import annotations

import pandas as pd

from capsim.sweep.columns import POINT_COLUMNS, matched_column
from capsim.sweep.executors import SerialExecutor
from capsim.sweep.grid import Block, Deployment, SweepSpec, WorkloadLoads
from capsim.sweep.runner import run_sweep


def test_schema_matches_a_real_sweep(tmp_path):
    spec = SweepSpec(
        name="columns",
        blocks=(
            Block(
                name="b",
                deployments=(Deployment(model="qwen3.5-35b-a3b", gpu="B200", gmu=(0.9,)),),
                workloads=(
                    WorkloadLoads(name="sharegpt-multiturn", loads=(4,)),
                    WorkloadLoads(name="sharegpt", mode="rate", loads=(8,)),
                ),
                prefix_caching=(False, True),
            ),
        ),
        num_requests=8,
    )
    run_sweep(spec, tmp_path, executor=SerialExecutor(), keep_steps=False, progress=False)
    points = pd.read_parquet(tmp_path / "points.parquet")
    matched = pd.read_parquet(tmp_path / "matched.parquet")
    assert sorted(set(points.columns) - set(POINT_COLUMNS)) == []  # written, not described
    assert sorted(set(POINT_COLUMNS) - set(points.columns)) == []  # described, not written
    assert [c for c in matched.columns if matched_column(c) is None] == []
    for name, col in POINT_COLUMNS.items():
        assert col.unit and len(col.meaning) > 10, name
