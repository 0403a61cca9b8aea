"""The measurement script runs on CPU at tiny shapes and its output builds valid tables."""

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from capsim.calibration.build import build
from capsim.calibration.tables import load_tables

pytest.importorskip("torch")
REPO = Path(__file__).resolve().parents[2]


def test_smoke_run_writes_schema_and_builds(tmp_path):
    out = tmp_path / "out"
    shim = tmp_path / "pyshim"
    shim.mkdir()
    (shim / "capsim_kernels").symlink_to(REPO / "kernels")  # kernels/ under its import name
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{shim}"}
    cmd = [
        sys.executable,
        "-m",
        "capsim_kernels.bench.step.model_step",
        "--smoke",
        "--out",
        str(out),
        "--ops",
        "gemm,moe,attn_decode",
        "--replays",
        "2",
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    rows = list(csv.DictReader((out / "model_step.csv").open()))
    assert {r["op"] for r in rows} == {"gemm", "moe", "attn_decode", "host"}
    assert all(float(r["p50_us"]) > 0 for r in rows)
    val = list(csv.DictReader((out / "model_step_validation.csv").open()))
    assert val and all(r["finite"] == "True" for r in val)
    (out / "model_step.csv").rename(out / "model_step_run1.csv")
    build(out, tmp_path / "data")
    tables = load_tables("H200", tmp_path / "data")
    assert len(tables.ops) == len(rows)
