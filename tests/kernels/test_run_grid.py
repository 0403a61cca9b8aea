"""``gdn.run.run_grid``'s bookkeeping on CPU with the timing stubbed: the cell order,
the store-all pools it builds per cell, which kernels are timed (chain-only kernels on
chains, only checked kernels when ``checked`` is given), failed timings noted, the rows
and their derived figures, the CSV written after each cell, and the budget stop."""

from __future__ import annotations

import csv
import time

import pytest
import torch
from capsim_kernels.bench.gdn import run
from capsim_kernels.bench.gdn.shapes import ModelShape
from capsim_kernels.gdn_verify.tree import TreeSpec

TINY = ModelShape("tiny", num_v_heads=2, num_k_heads=1, dk=16, dv=16)
CHAIN, TREE = TreeSpec.chain(2), TreeSpec((2, 1))


@pytest.fixture
def grid(monkeypatch, tmp_path):  # type: ignore[no-untyped-def]
    log: list = []
    real_empty, real_arange = torch.empty, torch.arange

    def on_cpu(fn):  # type: ignore[no-untyped-def]
        return lambda *a, **kw: fn(*a, **{**kw, "device": "cpu"})

    monkeypatch.setattr(torch, "empty", on_cpu(real_empty))
    monkeypatch.setattr(torch, "arange", on_cpu(real_arange))
    real_cell = run.Cell
    monkeypatch.setattr(run, "Cell", lambda *a, **kw: real_cell(*a, **kw, device="cpu"))
    monkeypatch.setattr(run, "STATE_DTYPES", ("float32", "bfloat16"))
    monkeypatch.setattr(run, "WINDOWS", (CHAIN, TREE))
    monkeypatch.setattr(run, "BATCHES", (1, 3))
    monkeypatch.setattr(run, "KERNELS", ("ka", "kchain", "kfail"))
    monkeypatch.setattr(run, "CHAIN_ONLY", frozenset({"kchain"}))
    monkeypatch.setattr(run, "bytes_moved", lambda k, s, sd, w, b: 1000 * w * b + len(k))

    def kernel_fn(kernel, c, sa_pool, sa_init, sa_slots, cfg, policy=None):  # type: ignore[no-untyped-def]
        assert torch.equal(sa_pool[: c.batch], c.pool)
        log.append((kernel, c.batch, c.tree.label, tuple(sa_pool.shape), sa_init.tolist(),
                    sa_slots.tolist(), cfg, policy))  # fmt: skip
        return kernel

    def time_graph_us(fn):  # type: ignore[no-untyped-def]
        if fn == "kfail":
            raise RuntimeError("boom")
        return 1.234, 2.345, 3.456

    monkeypatch.setattr(run, "kernel_fn", kernel_fn)
    monkeypatch.setattr(run, "time_graph_us", time_graph_us)

    def go(**kw):  # type: ignore[no-untyped-def]
        notes: list = []
        path = tmp_path / "g.csv"
        args = {"budget_s": float("inf"), "shapes": (TINY,)} | kw
        rows = run.run_grid(100.0, path, False, notes, **args)
        on_disk = list(csv.DictReader(path.open())) if path.exists() else []
        return rows, notes, log, on_disk

    return go


def test_every_cell_and_its_rows(grid, capsys) -> None:  # type: ignore[no-untyped-def]
    rows, notes, log, on_disk = grid(storeall_config={"bfloat16": {"x": 1}}, policy="P")
    cells = [
        (sd, b, t.label) for sd in ("float32", "bfloat16") for b in (1, 3) for t in (CHAIN, TREE)
    ]
    want_log = []
    for sd, b, label in cells:
        w = CHAIN.num_nodes if label == CHAIN.label else TREE.num_nodes
        kernels = ("ka", "kchain", "kfail") if label == CHAIN.label else ("ka", "kfail")
        pool = (b * (w + 1), 2, 16, 16)
        slots = [[b + i * w + j for j in range(w)] for i in range(b)]
        cfg = {"x": 1} if sd == "bfloat16" else None
        want_log += [(k, b, label, pool, list(range(b)), slots, cfg, "P") for k in kernels]
    assert log == want_log
    assert len(notes) == 8 and all(n.startswith("kfail tiny ") and "boom" in n for n in notes)
    assert notes[0] == f"kfail tiny float32 B=1 {CHAIN.label} W=2: RuntimeError('boom')"
    assert [(r["kernel"], r["state_dtype"], r["B"], r["tree"]) for r in rows] == [
        (k, sd, b, label) for sd, b, label in cells
        for k in (("ka", "kchain") if label == CHAIN.label else ("ka",))
    ]  # fmt: skip
    r = rows[1]
    assert r == {
        "kernel": "kchain", "model_shape": "tiny", "state_dtype": "float32", "T": 2,
        "tree": CHAIN.label, "B": 1, "Hv": 2, "Hk": 1, "dk": 16, "dv": 16,
        "p20_us": 1.23, "p50_us": 2.35, "p80_us": 3.46, "bytes_moved": 2006,
        "achieved_gbps": round(2006 / 2.345e-6 / 1e9, 1),
        "floor_us": round(2006 / 100e9 * 1e6, 2), "copy_gbps": 100.0,
    }  # fmt: skip
    assert len(on_disk) == len(rows) and on_disk[1]["kernel"] == "kchain"
    out = capsys.readouterr().out.splitlines()
    assert [ln for ln in out if ln.startswith("grid ")] == [
        f"grid tiny {sd} B={b} done ({n} rows)" for sd, b, n in
        (("float32", 1, 3), ("float32", 3, 6), ("bfloat16", 1, 9), ("bfloat16", 3, 12))
    ]  # fmt: skip


def test_only_checked_kernels_are_timed(grid) -> None:  # type: ignore[no-untyped-def]
    checked = {("tiny", "float32", CHAIN.label): {"kchain"}}
    rows, notes, _log, _ = grid(checked=checked)
    assert [(r["kernel"], r["state_dtype"], r["B"]) for r in rows] == [
        ("kchain", "float32", 1), ("kchain", "float32", 3)
    ]  # fmt: skip
    assert notes[0] == f"not timed (float64 check failed or missing): ka tiny float32 {CHAIN.label}"
    assert len(notes) == 18  # 2 x 2 (fp32 chains) + 2 x 3 (bf16 chains) + 4 x 2 (trees)


def test_the_budget_stops_the_grid(grid, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    ticks = iter(range(100))
    monkeypatch.setattr(time, "monotonic", lambda: float(next(ticks)))
    rows, notes, _log, on_disk = grid(budget_s=2.5)
    # one clock read per cell: cells 0..2 start (t <= 2.5), the 4th (t = 3) does not
    assert notes[-1] == f"time budget spent: grid stopped before tiny float32 B=3 {TREE.label}"
    assert [(r["B"], r["tree"]) for r in rows] == [
        (1, CHAIN.label), (1, CHAIN.label), (1, TREE.label), (3, CHAIN.label), (3, CHAIN.label)
    ]  # fmt: skip
    assert len(on_disk) == 5
