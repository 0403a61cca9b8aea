"""A small sweep results directory made with the sweep tests' stand-in point function."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sweep"))

from sweep_fakes import fake_simulate

from capsim.sweep.executors import SerialExecutor
from capsim.sweep.grid import (
    Block,
    Deployment,
    SweepSpec,
    WorkloadLoads,
)
from capsim.sweep.runner import run_sweep


@pytest.fixture(scope="session")
def results_dir(tmp_path_factory) -> Path:
    conc = (1, 8, 32, 64, 128, 256)
    spec = SweepSpec(
        name="report-test",
        blocks=(
            Block(
                name="main",
                deployments=(
                    Deployment(model="qwen3.5-35b-a3b", gpu="B200", tp=1, gmu=(0.6, 0.9)),
                    Deployment(model="qwen3.5-397b-a17b", gpu="B200", tp=8, gmu=(0.75,)),
                ),
                workloads=(
                    WorkloadLoads(name="sharegpt", loads=conc),
                    WorkloadLoads(name="spec-bench", loads=conc),
                    WorkloadLoads(name="burstgpt-standin", mode="rate", loads=(4, 64)),
                ),
            ),
            Block(
                name="trees",
                deployments=(Deployment(model="qwen3.5-35b-a3b", gpu="B200", tp=1, gmu=(0.9,)),),
                workloads=(WorkloadLoads(name="spec-bench", loads=(8, 64, 256)),),
                trees=((1, 1, 1), (2, 2, 2)),
            ),
        ),
        num_requests=30,
    )
    out = tmp_path_factory.mktemp("sweep")
    run_sweep(spec, out, executor=SerialExecutor(), point_fn=fake_simulate, progress=False)
    return out


@pytest.fixture(scope="session")
def report_html(results_dir, tmp_path_factory) -> Path:
    """The stand-in sweep's report, built once."""
    from capsim.reports.build import build_report

    return build_report(results_dir, tmp_path_factory.mktemp("report"))


CUSTOM_GRID = Path(__file__).resolve().parent / "data" / "custom_grid.toml"


@pytest.fixture(scope="session")
def custom_dir(tmp_path_factory) -> Path:
    """Issue 22's acceptance grid (rate + concurrency workloads, caching on/off, two GPUs,
    a tree) run through the real simulator, 48 requests per point."""
    from capsim.sweep.grid_toml import load_spec

    out = tmp_path_factory.mktemp("custom")
    run_sweep(
        load_spec(CUSTOM_GRID), out, executor=SerialExecutor(), keep_steps=False, progress=False
    )
    return out


@pytest.fixture(scope="session")
def custom_html(custom_dir) -> Path:
    from capsim.reports.build import build_report

    return build_report(custom_dir)
