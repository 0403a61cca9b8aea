"""Round 7's device plan (round6.py --plan r7): what it measures and in which order, and
the CPU-side pieces the call's results pass through (no kernel is launched here)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from capsim_kernels.bench.gdn import round6
from capsim_kernels.bench.gdn.round6_cells import TP_KERNELS, Cell
from capsim_kernels.bench.gdn.round7_cells import (
    COV_HEADS,
    COV_REPLAY,
    CELLS7,
    cov_cells,
    kc7_cells,
    measured_points,
    point_key,
    unmeasured,
)
from capsim_kernels.bench.gdn.shapes import gdn_shape
from capsim_kernels.gdn_verify.tree import TreeSpec


def test_plan_r7_measures_the_step_operators_first_and_ends_inside_the_budget():
    plan = round6.PLANS["r7"]
    assert plan["order"][0] == "step_ops" and plan["phases"].startswith("warm,step_ops")
    ends = [plan["end"][p] for p in ("warm", *plan["order"])]
    assert ends == sorted(ends) and ends[-1] <= 0.98
    assert set(plan["order"]) - {"step_ops"} == set(CELLS7)
    assert round6.PLANS["r6"]["order"] == round6.PHASE_ORDER  # round 6 unchanged


def test_unmeasured_drops_measured_points_and_kernels_that_do_not_apply():
    shp = gdn_shape("qwen3.5-35b-a3b", 8)
    cells = [Cell(shp, "float32", TreeSpec.chain(t), 256, TP_KERNELS, "x") for t in (1, 4)]
    done = frozenset({point_key(cells[1], "replay")} | {point_key(cells[0], k) for k in TP_KERNELS})
    got = unmeasured(cells, done)
    assert len(got) == 1 and got[0].tree.num_nodes == 4  # T = 1: every kernel measured
    assert "replay" not in got[0].kernels and "vllm_decode" not in got[0].kernels  # T=1 only
    assert set(got[0].kernels) == set(TP_KERNELS) - {"replay", "vllm_decode"}


def test_coverage_cells_close_what_the_step_model_refuses():
    """35B TP2: replay at every T = 2..9 (the other kernels have all of them, so none is
    left to interpolate) at two batch sizes; 35B TP8: a curve (B = 1 and 256) at T = 1, 2,
    4, 9 for every step-model kernel, then B = 64. Nothing already in the table."""
    cells = cov_cells(False)
    done = measured_points()
    rep = gdn_shape(*COV_REPLAY).heads_key
    heads = gdn_shape(*COV_HEADS).heads_key
    replay = {(c.tree.num_nodes, c.batch) for c in cells if c.shape.heads_key == rep}
    have = {(k[6], k[8]) for k in done if k[0] == "replay" and k[1:5] == rep and k[5] == "float32"}
    assert replay | have >= {(t, b) for t in range(2, 10) for b in (1, 256)}
    for t in (1, 2, 4, 9):
        for b in (1, 256):
            for k in TP_KERNELS:
                if k == "vllm_decode" and t != 1:
                    continue
                cell = Cell(gdn_shape(*COV_HEADS), "float32", TreeSpec.chain(t), b, (k,), "x")
                assert point_key(cell, k) in done or any(
                    c.shape.heads_key == heads and c.tree.num_nodes == t and c.batch == b
                    and k in c.kernels for c in cells)  # fmt: skip
    assert all(point_key(c, k) not in done for c in cells for k in c.kernels)


def test_kcode_cells_time_vllms_store_all_in_the_same_cell():
    for c in kc7_cells(False):
        assert "vllm_storeall" in c.kernels and "deferred" in c.kernels


def test_warm_up_follows_the_plans_phases(monkeypatch):
    from capsim_kernels.bench.gdn import round7_cells

    monkeypatch.setenv("R6_PLAN", "r7")
    # the table before round 7's call (its coverage points are measured since round 8)
    monkeypatch.setattr(round7_cells, "measured_points", lambda: frozenset())
    warm = round6.warm_cells(False, tuple(CELLS7))
    first = warm[0]
    assert first.shape.heads_key == gdn_shape(*COV_REPLAY).heads_key  # gdn_cov first
    assert any("@" in k for c in warm for k in c.kernels)  # kcode's variants compiled too


def test_step_jobs_order_and_fp8_shapes_that_vllm_can_load():
    from capsim_kernels.bench.step.round6_ops import fp8_refusal
    from capsim_kernels.bench.step.round7_ops import jobs, skip_classes

    got = jobs(False)
    kinds = [k for k, _ in got]
    assert got[0][0] == "bf16" and got[0][1].key == "qwen3.5-35b-a3b/tp4"
    assert kinds.index("fp8_check") < kinds.index("fp8")
    assert [s.key for k, s in got[-2:]] == ["qwen3-next-80b-a3b/tp8", "qwen3.5-35b-a3b/tp8"]
    assert all(fp8_refusal(s) is None for k, s in got if k == "fp8")
    from capsim_kernels.bench.step.round7_ops import MIN_CLASS_ROWS, _class_counts

    skip, counts = skip_classes(), _class_counts()
    assert ("moe", "e256_k8_i512_s512_h2048") in skip
    # a committed class with one point is no curve: measured again whole (round 7 did so
    # for the 80B / 35B TP4 GDN prefill class, which had one 256-token point)
    assert all(counts[c] >= MIN_CLASS_ROWS for c in skip)
    assert counts[("gdn_prefill", "hv8_hk4_dk128_dv128")] >= 3


def test_writer_appends_on_resume(tmp_path):
    from capsim_kernels.bench.step.measure import Writer

    path = tmp_path / "rows.csv"
    w = Writer(path, ("a", "b"))
    w.write({"a": 1, "b": 2})
    w.close()
    w = Writer(path, ("a", "b"), append=True)
    w.write({"a": 3, "b": 4})
    w.close()
    assert path.read_text().splitlines() == ["a,b", "1,2", "3,4"]


def test_phase_end_overrides_are_checked():
    got = round6.parse_shares("warm=0.2,gdn_kc=0.8", round6.PHASE_END_R7)
    assert got == {"warm": 0.2, "gdn_kc": 0.8}
    for bad in ("gdn_main=0.5", "warm=0", "warm=1.5", "warm=x"):
        with pytest.raises(SystemExit, match="--phase-end"):
            round6.parse_shares(bad, round6.PHASE_END_R7)
