"""Round 13's no-math state streams (bench/gdn/stream_kernels.py) and their bench
(bench/gdn/stream_ceiling.py) on the CPU interpreter at small shapes.

The read kernels' per-program sums equal a numpy sum over the same tiles (the program of
tile t is t mod P, the tile's rows are its request's pool slot), exactly: the inputs are
small integers. A pool of ones counts every element once. The read-read-write kernel leaves
exactly the rank-1 reference in every slot. The table writer, the atomic outputs and the
--budget-s guard run with the timing stubbed.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch
from capsim_kernels.bench.gdn import stream_ceiling as sc
from capsim_kernels.bench.gdn.shapes import ModelShape
from capsim_kernels.bench.gdn.stream_kernels import (
    ONE_PER_TILE,
    StreamSpec,
    make_inputs,
    prepare,
    rw_reference,
)

TINY = ModelShape("tiny", num_v_heads=4, num_k_heads=2, dk=32, dv=32)
READS = [
    StreamSpec("tile_read", 16, 16, 1, 2),
    StreamSpec("tile_read", 8, 32, 1, 3, ctas_per_sm=1),
    StreamSpec("tile_read", 16, 16, 2, 1, ctas_per_sm=ONE_PER_TILE),
    StreamSpec("tile_read", 16, 16, 1, 2, tma=True),
    StreamSpec("tile_read", 32, 16, 1, 2, slot=False, mask=False),
    StreamSpec("tile_read", 64, 16, 1, 2, pick_bv=True),  # halved to 16 at B * Hv = 12
]


def numpy_tile_sums(pool: np.ndarray, slot: np.ndarray, bv: int, programs: int,
                    use_slot: bool = True) -> np.ndarray:  # fmt: skip
    """Per program p, the sum of tiles p, p + P, ... (tile = (b * Hv + h) * NV + dv tile)."""
    nb, hv, dv, _ = pool.shape
    nv = dv // bv
    out = np.zeros(programs)
    for t in range(nb * hv * nv):
        i_v, bh = t % nv, t // nv
        b, h = bh // hv, bh % hv
        s = slot[b] if use_slot else b
        out[t % programs] += pool[s, h, i_v * bv:(i_v + 1) * bv, :].sum()
    return out


@pytest.mark.parametrize("spec", READS, ids=lambda s: s.label())
def test_tile_read_sums_equal_numpy_over_the_same_tiles(spec):
    inp = make_inputs(TINY, 3, device="cpu", integer=True)
    launch = prepare(spec, inp)
    assert launch.check() == (True, 0.0)
    bv = 16 if spec.pick_bv else spec.bv
    assert launch.bv == bv
    want = numpy_tile_sums(inp.pool.numpy(), inp.slot.numpy(), bv, launch.programs, spec.slot)
    np.testing.assert_array_equal(launch.out.double().numpy(), want)
    assert launch.bytes_read == inp.pool.numel() * 4 and launch.bytes_written == 0
    ntiles = 3 * TINY.num_v_heads * (TINY.dv // bv)
    assert launch.programs == (ntiles if spec.ctas_per_sm == ONE_PER_TILE
                               else min(ntiles, (spec.ctas_per_sm or 4) * inp.sms))  # fmt: skip


def test_a_pool_of_ones_is_counted_once_per_element():
    inp = make_inputs(TINY, 5, device="cpu")
    inp.pool.fill_(1.0)
    for spec in READS[:3]:
        launch = prepare(spec, inp)
        launch.fn()
        assert float(launch.out.double().sum()) == inp.pool.numel()
    flat = prepare(StreamSpec("flat_read", num_warps=1, stages=2, block=256), inp)
    flat.fn()
    assert float(flat.out.double().sum()) == inp.pool.numel()


@pytest.mark.parametrize("spec", [
    StreamSpec("tile_rw", 16, 16, 1, 3, tma=True),
    StreamSpec("tile_rw", 8, 32, 1, 2),
    StreamSpec("tile_rw", 16, 16, 2, 1, ctas_per_sm=ONE_PER_TILE),
    StreamSpec("tile_rw", 16, 16, 1, 2, pending=False),
], ids=lambda s: s.label())  # fmt: skip
def test_tile_rw_writes_the_rank1_reference_in_every_slot(spec):
    inp = make_inputs(TINY, 3, device="cpu", integer=True)
    before = inp.pool.clone()
    launch = prepare(spec, inp)
    launch.fn()
    want = rw_reference(inp, before, spec.pending)
    torch.testing.assert_close(inp.pool, want, rtol=0, atol=0)
    if spec.pending:  # the reference is not the identity: pending rows were read
        assert not torch.equal(want, before)
    assert launch.check()[0]
    pend = inp.pk.numel() * 2 + inp.pvt.numel() * 4 if spec.pending else 0
    assert launch.bytes_read == inp.pool.numel() * 4 + pend
    assert launch.bytes_written == inp.pool.numel() * 4


def test_flat_and_torch_launches_count_their_bytes():
    inp = make_inputs(TINY, 2, device="cpu", integer=True)
    n = inp.pool.numel() * 4
    for spec, rw in ((StreamSpec("flat_read", block=512, stages=1, ctas_per_sm=ONE_PER_TILE), 0),
                     (StreamSpec("flat_rw", block=512, stages=2), n),
                     (StreamSpec("torch_copy"), n), (StreamSpec("torch_sum"), 0),
                     (StreamSpec("torch_add"), n)):  # fmt: skip
        launch = prepare(spec, inp)
        assert launch.check()[0], spec.label()
        assert (launch.bytes_read, launch.bytes_written) == (n, rw)
    with pytest.raises(ValueError):
        prepare(StreamSpec("flat_read", block=3000), inp)
    with pytest.raises(ValueError):
        prepare(StreamSpec("tile_read", 64, 32), inp)  # dv = 32 < 64


def test_the_plan_starts_with_the_target_cells_matched_launches():
    plan = sc.static_plan()
    assert plan[0].cell == ("qwen3.5-35b-a3b", 1, 256)
    assert [it.group for it in plan[:10]] == ["matched"] * 10
    assert {it.group for it in plan} == {"matched", "sweep_read", "sweep_rw", "sweep_flat"}
    tags = {it.spec.tag for it in plan if it.group == "matched"}
    assert tags == {"", "pipe_r", "pipe_re", "pipe_zw1p"}
    labels = [(it.group, it.cell, it.spec.label()) for it in plan]
    assert len(labels) == len(set(labels))
    assert sc.PIPE_ZW1P.tma and sc.PIPE_ZW1P.num_warps == 1 and sc.PIPE_R.ctas_per_sm == 5
    assert 0 < len(sc.warm_items(plan)) < len(plan)


def _row(group, variant, gbps, shape="s", b=256, family="tile_read"):
    return dict.fromkeys(sc.COLUMNS, "") | {"group": group, "variant": variant, "gbps": gbps,
                                         "model_shape": shape, "B": b, "family": family,
                                         "bytes": 1000}  # fmt: skip


def test_best_items_take_the_fastest_sweep_launches_to_the_other_cells():
    plan = sc.static_plan()
    reads = [it.spec.label() for it in plan if it.group == "sweep_read"]
    rws = [it.spec.label() for it in plan if it.group == "sweep_rw"]
    rows = [_row("sweep_read", reads[i], str(100 + i)) for i in range(6)]
    rows += [_row("sweep_rw", rws[0], "50", family="tile_rw"), _row("sweep_rw", rws[1], "")]
    best = sc.best_items(rows, plan)
    cells = {it.cell for it in best}
    assert cells == {("qwen3.5-397b-a17b", 8, 256), ("qwen3.5-35b-a3b", 1, 64)}
    got = [it.spec.label() for it in best if it.cell == ("qwen3.5-35b-a3b", 1, 64)]
    assert got == [reads[5], reads[4], reads[3], reads[2], rws[0]]


def test_table_writer_best_rows_and_atomic_outputs(tmp_path):
    rows = [_row("matched", "a", "10.0"), _row("matched", "b", "30.0"),
            _row("matched", "c", "", family="tile_rw") | {"note": "skipped: dv"},
            _row("matched", "d", "5.0", family="tile_rw", b=64)]  # fmt: skip
    assert [r["variant"] for r in sc.best_rows(rows)] == ["b", "d"]
    text = sc.render_table(rows, 4250.0)
    assert "4250.0 GB/s" in text and "skipped: dv" in text
    assert text.count("| group | variant |") == 2
    meta = {"copy_gbps": 4250.0}
    sc.save_outputs(tmp_path, rows, meta)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "round13_stream_ceiling.csv", "round13_stream_meta.json", "round13_stream_table.md"]
    with (tmp_path / "round13_stream_ceiling.csv").open() as f:
        got = list(csv.DictReader(f))
    assert list(got[0]) == list(sc.COLUMNS) and len(got) == 4
    saved = json.loads((tmp_path / "round13_stream_meta.json").read_text())
    assert saved["num_rows"] == 4 and saved["num_timed"] == 0


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_budget_guard_stops_before_a_launch_that_would_end_past_it(monkeypatch):
    clock = FakeClock()
    budget = sc.Budget(10.0, 0.0, clock, first_estimate_s=1.0)
    saves = []

    def fake_measure(item, inp, timer, copy_gbps, copy_same):
        clock.t += 3.0 if item.spec.family == "torch_copy" else 2.0
        return _row(item.group, item.spec.label(), "1.0", family=item.spec.family)

    monkeypatch.setattr(sc, "measure", fake_measure)
    monkeypatch.setattr(sc, "make_inputs", lambda *a, **k: object())
    runner = sc.Runner("cpu", None, 1.0, budget, lambda rows: saves.append(len(rows)))
    items = sc.static_plan(sc.CELLS)[:8]
    runner.run(items)
    # 3 (copy) + 2 + 2 = 7 s; then 7 + max(3, 2, 2) = 10 <= 10: a 4th; 9 + 3 > 10: stop
    assert [r["variant"] for r in runner.rows] == [it.spec.label() for it in items[:4]]
    assert saves == [1, 2, 3, 4]
    assert len(runner.not_reached) == 4 and "matched" in runner.not_reached[0]
    assert runner.copy_same[items[0].cell] == 1.0
    assert runner.rows[0]["frac_copy_same"] == "1.000"


def test_dry_run_end_to_end(tmp_path, monkeypatch):
    monkeypatch.setattr(sc, "DRY_CELLS", (("qwen3.5-397b-a17b", 8, 1),))
    assert sc.main(["--out", str(tmp_path), "--dry-run", "--workers", "0", "--groups",
                    "matched", "--budget-s", "120"]) == 0  # fmt: skip
    meta = json.loads((tmp_path / "round13_stream_meta.json").read_text())
    assert meta["checks_ok"] and meta["num_timed"] == meta["num_rows"] == 10
    assert not meta["stopped_by_budget"]
    rows = list(csv.DictReader((tmp_path / "round13_stream_ceiling.csv").open()))
    assert {r["check_ok"] for r in rows} == {"True"}
    pipe_r = next(r for r in rows if r["tag"] == "pipe_r")
    assert pipe_r["bv"] == "16" and pipe_r["ctas_per_sm"] == "5"  # B * Hv = 8: 64 halved
