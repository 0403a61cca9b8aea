"""Round 8's device plan (round6.py --plan r8): the owed coverage cells first under their
own deadline, kcode's deferred variants next to the incumbents and vLLM's store-all in
every cell, the fill phases last and outside the compile warm-up (no kernel launched)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from capsim_kernels.bench.gdn import round6
from capsim_kernels.bench.gdn.round6_cells import TP_KERNELS, Cell
from capsim_kernels.bench.gdn.round7_cells import COV_HEADS, COV_REPLAY, point_key
from capsim_kernels.bench.gdn.round8_cells import (
    CELLS8,
    KC8_BASELINES,
    WARM8,
    cov8_cells,
    kc8_cells,
    kc8_kernels,
)
from capsim_kernels.bench.gdn.shapes import gdn_shape
from capsim_kernels.gdn_verify.tree import TreeSpec


def test_plan_r8_puts_coverage_first_and_ends_inside_the_budget():
    plan = round6.PLANS["r8"]
    assert plan["order"][:2] == ("gdn_cov", "gdn_kc") and plan["prefix"] == "round8"
    ends = [plan["end"][p] for p in ("warm", *plan["order"])]
    assert ends == sorted(ends) and ends[-1] <= 0.95
    assert set(plan["order"]) == set(CELLS8) and "step_ops" not in plan["phases"]
    assert round6.warm_phases("r8") == WARM8 == ("gdn_cov", "gdn_kc")
    assert round6.warm_phases("r7") == round6.cell_phases("r7")  # round 7 unchanged


@pytest.fixture
def before_round8(monkeypatch):
    """The packaged GDN table as the call found it: its rows less round 8's (the plan
    drops measured points, and round 8's own rows are in the table since its ingest)."""
    import csv
    from pathlib import Path

    import capsim.calibration as calibration
    from capsim_kernels.bench.gdn import round7_cells

    path = Path(calibration.__file__).parent / "data" / "h200_gdn_verify.csv"
    with path.open(newline="") as fh:
        done = frozenset(
            (r["kernel"], int(r["Hv"]), int(r["Hk"]), int(r["dk"]), int(r["dv"]),
             r["state_dtype"].removeprefix("torch."), int(r["T"]), r["tree"], int(r["B"]))
            for r in csv.DictReader(fh) if not r["source"].startswith("round8_"))  # fmt: skip
    monkeypatch.setattr(round7_cells, "measured_points", lambda: done)
    return done


def _curve_ends(cells, done, heads, kernels, windows):
    """Every (kernel, T) of ``windows`` at two batch sizes, measured or in ``cells``."""
    for k in kernels:
        for t in windows:
            have = {kk[8] for kk in done if kk[0] == k and kk[1:5] == heads
                    and kk[5] == "float32" and kk[6] == t and kk[7] == "chain"}  # fmt: skip
            have |= {c.batch for c in cells if c.shape.heads_key == heads
                     and c.tree.num_nodes == t and k in c.kernels}  # fmt: skip
            assert len(have) >= 2, (k, t, have)


def test_the_first_six_cells_give_curves_at_both_ends_of_every_depth(before_round8):
    """T = 1 and 9 at the TP8 heads (every step kernel), T = 2 and 9 for replay at the TP2
    heads, each at two batch sizes, within the first six cells: the rest only sharpens."""
    cells = cov8_cells(False)
    done = before_round8
    assert len(cells) == 22  # what the call was planned with
    first = cells[:6]
    heads, rep = gdn_shape(*COV_HEADS).heads_key, gdn_shape(*COV_REPLAY).heads_key
    step = tuple(k for k in TP_KERNELS if k != "vllm_decode")
    _curve_ends(first, done, heads, step, (1, 9))
    _curve_ends(first, done, heads, ("vllm_decode",), (1,))
    _curve_ends(first, done, rep, ("replay",), (2, 9))
    _curve_ends(cells, done, rep, ("replay",), tuple(range(2, 10)))  # all of T = 2..9
    _curve_ends(cells, done, heads, step, (1, 2, 4, 9))
    assert all(point_key(c, k) not in done for c in cells for k in c.kernels)


def test_kc_cells_time_every_incumbent_and_vllm_next_to_the_variants(monkeypatch):
    cells = kc8_cells(False)
    assert [(c.tree.num_nodes, c.batch) for c in cells[:3]] == [(4, 256), (4, 64), (4, 1)]
    assert {c.tree.num_nodes for c in cells} == {2, 4, 9}
    assert all(set(KC8_BASELINES) <= set(c.kernels) for c in cells)
    assert all(c.shape.name == "qwen3.5-35b-a3b-tp1" and c.state_dtype == "float32"
               for c in cells)  # fmt: skip
    monkeypatch.setenv("R6_KC_KERNELS", "deferred@pipe_e")
    assert kc8_kernels()[0] == "deferred@pipe_e" and "vllm_storeall" in kc8_kernels()
    monkeypatch.setenv("R6_KC_KERNELS", "deferred@nope")
    with pytest.raises(ValueError, match="nope"):
        kc8_kernels()


def test_warm_up_covers_coverage_and_kc_only(monkeypatch, before_round8):
    monkeypatch.setenv("R6_PLAN", "r8")
    warm = round6.warm_cells(False, round6.warm_phases("r8"))
    assert warm[0].shape.heads_key == gdn_shape(*COV_HEADS).heads_key  # gdn_cov first
    shapes = {c.shape.heads_key for c in warm}
    assert shapes == {gdn_shape(*COV_HEADS).heads_key, gdn_shape(*COV_REPLAY).heads_key,
                      gdn_shape("qwen3.5-35b-a3b", 1).heads_key}  # fmt: skip
    assert any("@" in k for c in warm for k in c.kernels)


def test_dry_cells_exist_for_every_phase():
    for phase, fn in CELLS8.items():
        cells = fn(True)
        assert cells, phase
        assert all(isinstance(c, Cell) and isinstance(c.tree, TreeSpec) for c in cells)


def test_held_out_checks_read_only_their_shape_and_predict_from_the_fit_lines(tmp_path):
    """report8's declared checks: the line through B = 1 and 256 at the TP8 heads predicts
    the round-8 B = 64 row; a row of another shape is not checked by it."""
    import csv

    from capsim_kernels.bench.gdn.report7 import held_out
    from capsim_kernels.bench.gdn.report8 import HELD_OUT8, RUN_FILES8

    cols = ("kernel", "model_shape", "Hv", "Hk", "dk", "dv", "state_dtype", "T", "tree", "B",
            "p50_us", "phase", "gate_floor")  # fmt: skip

    def row(shape, hv, hk, b, us):
        return dict(zip(cols, ("deferred", shape, hv, hk, 128, 128, "float32", 4, "chain", b,
                               us, "gdn_cov", 0.3)))  # fmt: skip

    tp8, tp2 = "qwen3.5-35b-a3b-tp8", "qwen3.5-35b-a3b-tp2"
    for name, rows in (("round7_gdn_cov.csv", [row(tp8, 4, 2, 1, 10.0), row(tp2, 16, 8, 1, 20.0)]),
                       ("round8_gdn_cov.csv", [row(tp8, 4, 2, 256, 65.5), row(tp8, 4, 2, 64, 25.0),
                                               row(tp2, 16, 8, 256, 80.0),
                                               row(tp2, 16, 8, 64, 30.0)])):  # fmt: skip
        with (tmp_path / name).open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=cols)
            w.writeheader()
            w.writerows(rows)
    got = held_out(tmp_path, HELD_OUT8, "round8_gdn_*.csv", RUN_FILES8)
    assert [(c["model_shape"], c["B"]) for c in got] == [(tp8, 64)]  # tp2 is no TP8 row
    assert got[0]["predicted_us"] == pytest.approx(10.0 + 55.5 * 63 / 255, abs=0.01)
    assert got[0]["error"] == pytest.approx(got[0]["predicted_us"] / 25.0 - 1, abs=1e-4)
