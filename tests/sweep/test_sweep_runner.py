"""Sweep runner: outputs, resume, change detection, executor equivalence, fail-fast."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
import pytest
from sweep_fakes import (
    WORKLOADS,
    failing_simulate,
    fake_simulate,
    other_calibration_simulate,
    sleep_then_return,
    small_spec,
)

from capsim.sweep.executors import DaskExecutor, LocalExecutor, SerialExecutor
from capsim.sweep.grid import expand
from capsim.sweep.runner import run_sweep
from capsim.sweep.store import SweepMismatchError


def _run(spec, out, fn=fake_simulate, executor=None, **kw):
    return run_sweep(
        spec,
        out,
        executor=executor or SerialExecutor(),
        point_fn=fn,
        progress=False,
        workloads=WORKLOADS,
        **kw,
    )


def test_outputs(spec, tmp_path):
    rep = _run(spec, tmp_path / "out")
    n = len(expand(spec))
    assert rep.ok and rep.num_computed == n == 20
    points = pd.read_parquet(tmp_path / "out" / "points.parquet")
    matched = pd.read_parquet(tmp_path / "out" / "matched.parquet")
    assert len(points) == n and len(matched) == n // 2
    assert set(points["commit"]) == {"storeall", "reconstruct"}
    assert len(list((tmp_path / "out" / "steps").glob("*.parquet"))) == n
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["complete"] is True
    assert manifest["fingerprint"] == spec.fingerprint()
    assert manifest["calibration"] == {"kind": "fake", "version": 1}
    assert len(manifest["calibration_id"]) == 12
    assert manifest["seeds"]["root_seed"] == spec.seed
    assert {"python", "numpy", "pandas", "simpy"} <= set(manifest["versions"])
    assert manifest["git_sha"]
    assert not list((tmp_path / "out").rglob("*.tmp"))
    # ratios are "> 1 is better for TreeWY": the fake gives TreeWY a smaller pool footprint
    assert (matched["kv_reduction"] > 1).all()


def test_resume_after_failures_computes_only_missing(spec, tmp_path):
    out = tmp_path / "out"
    first = _run(spec, out, fn=failing_simulate)
    assert first.failures and first.num_computed == 20 - len(first.failures)
    assert (out / "failures.json").exists()
    assert json.loads((out / "manifest.json").read_text())["complete"] is False
    second = _run(spec, out)
    assert second.num_computed == len(first.failures)
    assert second.num_reused == first.num_computed
    fresh = _run(spec, tmp_path / "fresh")
    pd.testing.assert_frame_equal(second.points, fresh.points)


def test_resume_after_interrupt(spec, tmp_path):
    calls = {"n": 0}

    def interrupted(cfg):
        calls["n"] += 1
        if calls["n"] > 5:
            raise KeyboardInterrupt
        return fake_simulate(cfg)

    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        _run(spec, out, fn=interrupted)
    assert len(list((out / "points").glob("*.json"))) == 5
    again = _run(spec, out)
    assert again.num_reused == 5 and again.num_computed == 15
    assert len(again.points) == 20


def test_changed_config_is_detected(spec, tmp_path):
    out = tmp_path / "out"
    _run(spec, out)
    with pytest.raises(SweepMismatchError, match=r"num_requests: 40 -> 41"):
        _run(replace(spec, num_requests=41), out)
    # nothing of the second config was written
    assert len(list((out / "points").glob("*.json"))) == 20


def test_changed_calibration_is_detected(spec, tmp_path):
    out = tmp_path / "out"
    _run(spec, out, fn=failing_simulate)
    with pytest.raises(SweepMismatchError, match="step-time model"):
        _run(spec, out, fn=other_calibration_simulate)


def test_fail_fast_before_simulating(spec, tmp_path):
    def never(cfg):
        raise AssertionError("must not simulate")

    bad_wl = replace(
        spec,
        blocks=(
            replace(
                spec.blocks[0],
                workloads=(replace(spec.blocks[0].workloads[0], name="no-such-workload"),),
            ),
        ),
    )
    with pytest.raises(ValueError, match="no-such-workload"):
        _run(bad_wl, tmp_path / "a", fn=never)
    bad_model = replace(
        spec,
        blocks=(
            replace(
                spec.blocks[0],
                deployments=(replace(spec.blocks[0].deployments[0], model="gpt-9"),),
            ),
        ),
    )
    with pytest.raises(ValueError, match="gpt-9"):
        _run(bad_model, tmp_path / "b", fn=never)
    too_small = replace(
        spec,
        blocks=(
            replace(
                spec.blocks[0],
                deployments=(
                    replace(
                        spec.blocks[0].deployments[0], model="qwen3.5-397b-a17b", tp=8, gmu=(0.3,)
                    ),
                ),
            ),
        ),
    )
    with pytest.raises(ValueError, match=r"gmu=0\.3"):
        _run(too_small, tmp_path / "c", fn=never)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ValueError, match=r"not writable|not a directory"):
        _run(spec, blocker / "out", fn=never)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_executors_give_identical_results(tmp_path):
    spec = small_spec()
    serial = _run(spec, tmp_path / "serial")
    local = _run(spec, tmp_path / "local", executor=LocalExecutor(2))
    pd.testing.assert_frame_equal(serial.points, local.points)
    pd.testing.assert_frame_equal(serial.matched, local.matched)
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        dask = _run(spec, tmp_path / "dask", executor=DaskExecutor(client))
    pd.testing.assert_frame_equal(serial.points, dask.points)
    for name in ("serial", "local", "dask"):
        steps = sorted((tmp_path / name / "steps").glob("*.parquet"))
        assert len(steps) == 20
    a = pd.read_parquet(sorted((tmp_path / "serial" / "steps").glob("*"))[0])
    b = pd.read_parquet(sorted((tmp_path / "dask" / "steps").glob("*"))[0])
    pd.testing.assert_frame_equal(a, b)


def test_dask_needs_scheduler():
    with pytest.raises(ValueError, match="--scheduler"):
        DaskExecutor(None)


def test_local_executor_stops_workers_when_closed():
    """Closing the result stream (an error or Ctrl-C in the caller) does not wait for
    the points still running."""
    import time

    gen = LocalExecutor(2).map_unordered(sleep_then_return, [0.01, 30.0, 30.0, 30.0])
    assert next(gen) == 0.01
    t0 = time.perf_counter()
    gen.close()
    assert time.perf_counter() - t0 < 10.0
