"""Round 6's device script: the plan it runs (no kernel is launched here).

Regression tests for the faults of its first device call (2026-12-01): the compile
warm-up keyed windows by their label ('chain' for every T) and so warmed 30 of 373 cells'
compiles; the step-operator child loaded vLLM's files from the default folder instead of
the carried one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from capsim_kernels.bench.gdn import round6
from capsim_kernels.bench.gdn.round6_cells import main_cells, p2_cells, tp_cells

REPO = Path(__file__).resolve().parents[2]


def test_warm_up_covers_every_window_and_batch_specialisation():
    cells = main_cells(False) + tp_cells(False)
    want = {(c.shape.heads_key, c.state_dtype, c.tree.parent, c.kernels) for c in cells}
    warm = round6.warm_cells(False)
    got = {(c.shape.heads_key, c.state_dtype, c.tree.parent, c.kernels) for c in warm}
    assert got == want
    assert {c.batch for c in warm} == {1, 64}
    assert len(warm) == 2 * len(want) and len(warm) > 100


def test_plan_orders_the_benchmark_batches_first_and_keeps_persistent_apart():
    cells = main_cells(False)
    first = {c.batch for c in cells[:26]}
    assert first == {256}  # both shapes, every window, before any other batch
    assert all("p2" not in k for c in cells for k in c.kernels or ())
    assert {k for c in p2_cells(False) for k in c.kernels} == {
        "treewy_verify_p2",
        "treewy_verify_commit_p2",
    }


def test_vllm_src_follows_the_environment(tmp_path):
    code = "from capsim_kernels.bench import vllm_shim as v; print(v.DEFAULT_SRC)"
    env = {**os.environ, "CAPSIM_VLLM_SRC": str(tmp_path / "carried")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.strip()  # fmt: skip
    assert out == str(tmp_path / "carried")
