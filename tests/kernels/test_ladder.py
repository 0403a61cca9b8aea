"""Round 14's verify / deferred ladder (bench/gdn/ladder_kernels.py, bench/gdn/ladder.py) on
the CPU interpreter at a tiny shape (Hv = 4, Hk = 2, dk = dv = 32, B = 3, T = 4 chain).

Every rung's check passes on correct inputs and fails when the rung is broken (an input
changed after its reference was taken, or the stage-1 scratch the recorded stream reads
zeroed); the real rungs are the launches treewy_verify / treewy_deferred_verify make
(recorded, one prep and one stream each); the runner's columns (x v0, us over the rung
below) and the budget guard run with the timing stubbed.
"""

from __future__ import annotations

import csv
import json

import pytest
import torch
from capsim_kernels.bench.gdn import ladder as ld
from capsim_kernels.bench.gdn import ladder_kernels as lk
from capsim_kernels.bench.gdn.stream_ceiling import Budget

CELL = ("tiny", 1, 3)
POL = ld._policies()


def _cell() -> lk.LadderCell:
    return ld.make_cell(CELL, "cpu")


@pytest.fixture(scope="module")
def cell() -> lk.LadderCell:
    return _cell()


RUNGS = [("v0", None), ("v1", None), ("v1a", None), ("v2", None), ("v2b", "pipe_r"),
         ("v3", "pipe_r"),
         ("prep", "pipe_r"), ("v4", "pipe_r"), ("v3", "pipe_re"), ("d0", None),
         ("d3", "pipe_zw1p"), ("dprep", "pipe_zw1p"), ("d4", "pipe_zw1p"),
         ("v3", "cand_w8s1")]  # fmt: skip


@pytest.mark.parametrize("rung,policy", RUNGS, ids=lambda x: str(x))
def test_every_rung_passes_its_check(cell, rung, policy):
    rl = lk.rung_launch(cell, rung, POL.get(policy))
    ok, err = rl.launch.check()
    assert ok, (rung, policy, err)
    assert rl.launch.bytes_read > 0 and rl.launch.programs >= 1


def test_v1_sums_every_state_and_row_element_once():
    c = _cell()
    rl = lk.rung_launch(c, "v1")
    assert rl.launch.check()[0]
    c.case.pool[0, 0, 0, 0] += 1.0  # after the reference: the sum is off by one element
    assert not rl.launch.check()[0]


def test_v2_products_against_float64_and_a_changed_key_fails():
    c = _cell()
    rl = lk.rung_launch(c, "v2")
    ok, err = rl.launch.check()
    assert ok and err < 1e-2
    ks, qs = lk.verify_reference(c.case)
    assert ks.shape == qs.shape == c.case.v.shape
    c.case.k[:, 1] = -c.case.k[:, 1]  # the kernel now reads other keys than the reference's
    assert not rl.launch.check()[0]


def test_v2b_epilogue_against_float64_and_a_changed_scale_fails():
    c = _cell()
    rl = lk.rung_launch(c, "v2b", POL["pipe_r"])
    assert rl.launch.check()[0]
    ck = lk._record(c, POL["pipe_r"], False)["stream"][1][8]
    ck.mul_(2.0)  # stage 1's key scales changed after the reference was taken
    assert not rl.launch.check()[0]
    with pytest.raises(ValueError, match="policy"):
        lk.rung_launch(c, "v2b")


def test_real_rungs_are_one_prep_and_one_pipe_launch(cell):
    rec = lk._record(cell, POL["pipe_r"], False)
    kwargs = rec["stream"][2]
    assert kwargs["PACK"] and not kwargs["EARLY_ROWS"] and kwargs["NUM_STAGES"] == 2
    assert kwargs["BKC"] == 32 and kwargs["num_warps"] == 4
    rec_e = lk._record(cell, POL["pipe_re"], False)
    assert rec_e["stream"][2]["EARLY_ROWS"]
    rec_d = lk._record(cell, POL["pipe_zw1p"], True)
    assert rec_d["stream"][2]["PENDING"] and rec_d["stream"][2]["TMA"]


def test_broken_real_rungs_fail():
    c = _cell()
    v3 = lk.rung_launch(c, "v3", POL["pipe_r"])
    prep = lk.rung_launch(c, "prep", POL["pipe_r"])
    d3 = lk.rung_launch(c, "d3", POL["pipe_zw1p"])
    assert v3.launch.check()[0] and prep.launch.check()[0] and d3.launch.check()[0]
    rec = lk._record(c, POL["pipe_r"], False)
    m1 = rec["stream"][1][6]
    m1.zero_()  # the stream alone reads stage 1's scratch: Vt = 0 now
    assert not v3.launch.check()[0]
    c.case.beta.mul_(0.5)  # stage 1 alone now writes other scratch than the recorded call
    assert not prep.launch.check()[0]
    rec_d = lk._record(c, POL["pipe_zw1p"], True)
    rec_d["pool0"].add_(1e-3)  # the deferred stream starts from another state
    assert not d3.launch.check()[0]


def test_plan_order_and_groups():
    plan = ld.static_plan()
    assert plan[0].cell == ld.CELLS[0] and plan[0].rung == "v0"
    assert {it.cell for it in plan if it.group == "candidate"} == {ld.CELLS[0]}
    first_other = next(n for n, it in enumerate(plan) if it.cell != ld.CELLS[0])
    assert all(it.cell == ld.CELLS[0] for it in plan[:first_other])
    assert len(plan) == 3 * (len(ld.VERIFY_RUNGS) + len(ld.DEFERRED_RUNGS)) + len(ld.CANDIDATES)
    assert all(it.policy in POL for it in plan if it.policy)
    assert ld.reference_rung(plan[3]) == "v2@" and ld.reference_rung(plan[4]) == "v2b@pipe_r"
    assert ld.reference_rung(plan[6]) == "v3@pipe_r"


def test_runner_columns_and_budget(tmp_path):
    items = [it for it in ld.static_plan((CELL,))
             if it.label().split(":")[0] in ("v0", "v1", "v2", "v2b@pipe_r", "v3@pipe_r",
                                             "v4@pipe_r")]  # fmt: skip
    times = {"v0": 100.0, "v1": 110.0, "v2": 130.0, "v2b": 140.0, "v3": 160.0, "v4": 200.0}
    order = iter(it.rung for it in items)

    def timer(fn):
        us = times[next(order)]
        return us - 1, us, us + 1

    meta = {"copy_gbps": 1000.0, "notes": []}
    budget = Budget(1e9, 0.0, clock=lambda: 0.0)
    runner = ld.Runner("cpu", timer, 1000.0, budget,
                       lambda rows: ld.save_outputs(tmp_path, rows, meta))  # fmt: skip
    runner.run(items)
    with (tmp_path / "round14_ladder.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["rung"] for r in rows] == ["v0", "v1", "v2", "v2b", "v3", "v4"]
    assert [r["us_over_ref"] for r in rows] == ["", "10.00", "20.00", "10.00", "20.00", "40.00"]
    assert rows[-1]["x_v0"] == "2.000" and rows[-1]["ref"] == "v3@pipe_r"
    assert all(r["check_ok"] == "True" for r in rows)
    assert json.loads((tmp_path / "round14_ladder_meta.json").read_text())["checks_ok"]
    assert "| verify | v4@pipe_r" in (tmp_path / "round14_ladder_table.md").read_text()
    # a budget already spent: nothing more runs, everything is listed as not reached
    spent = ld.Runner("cpu", timer, 1000.0, Budget(1.0, 0.0, clock=lambda: 5.0), lambda r: None)
    spent.run(items)
    assert spent.rows == [] and len(spent.not_reached) == len(items)


def test_failed_check_is_not_timed(monkeypatch):
    c = _cell()
    item = ld.Item("verify", CELL, "v1", None, "v1")
    rl = lk.rung_launch(c, "v1")
    monkeypatch.setattr(lk, "rung_launch", lambda *a, **k: lk.RungLaunch(
        lk.Launch(rl.launch.fn, lambda: (False, 1.0), 1, 0), 16, 4, 2))  # fmt: skip

    def timer(fn):
        raise AssertionError("a failed check was timed")

    row = ld.measure(item, c, POL, timer, 1000.0, {})
    assert row["check_ok"] is False and row["p50_us"] == "" and "not timed" in row["note"]
    assert torch.isfinite(c.case.pool).all()
