"""``step.points.measure_shapes``'s bookkeeping with the builds and timing stubbed: which
points are timed (graph first, eager when the capture fails), which are skipped (done,
not in ``only``, a class in ``skip``, past the deadline), the rows handed to the writer,
the decode-attention KV buffer (made once per (model, tp), torch or vLLM layout), and the
compile warm-up mode."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest
import torch
from capsim_kernels.bench.step import points

SHP = SimpleNamespace(attn_key="a1", attn_hkv=2, head_dim=4)
GRID = {"max_kv_tok": 6, "batch": [1, 2]}


def _pt(tag, op, key="x", fail=(), n=8, k=4):  # type: ignore[no-untyped-def]
    def make():  # type: ignore[no-untyped-def]
        return (
            ([f"call-{tag}"], 10.0, 20.0, "e3") if op == "attn_decode" else ([tag, tag], 1.0, 2.0)
        )

    dims = {"n": n, "k": k} if op == "gemm" else {"m_tok": 3}
    return points.OpPoint(tag=(tag,), op=op, key=key, make=make, dims=dims,
                          impl=f"impl-{tag}{{extra}}"), fail  # fmt: skip


PTS = [
    _pt("g1", "gemm"), _pt("g2", "gemm", fail=(True,)), _pt("g3", "gemm", fail=(True, False)),
    _pt("done", "gemm"), _pt("moe1", "moe"), _pt("skipcls", "gemm", n=16, k=32),
    _pt("a1", "attn_decode", key="kk"),
]  # fmt: skip


@pytest.fixture
def run(monkeypatch):  # type: ignore[no-untyped-def]
    log: list = []

    def operator_points(shp, grid, dev, gen, kv=None):  # type: ignore[no-untyped-def]
        log.append(("operator_points", None if kv is None else [tuple(t.shape) for t in kv]))
        return [p for p, _ in PTS]

    def time_calls(calls, replays, graph):  # type: ignore[no-untyped-def]
        tag = next(p.tag for p, _ in PTS if p.make()[0] == calls)
        log.append(("time", tag, replays, graph))
        if graph in {p.tag: f for p, f in PTS}[tag]:
            raise RuntimeError(f"no {graph}")
        return ("graph" if graph else "eager"), {"p50_us": 1.0}

    def row(*args, **kwargs):  # type: ignore[no-untyped-def]
        return (args, kwargs)

    monkeypatch.setattr(points, "operator_points", operator_points)
    monkeypatch.setattr(points, "time_calls", time_calls)
    monkeypatch.setattr(points, "_row", row)
    monkeypatch.setattr(points, "_run_once", lambda pt, ops_: log.append(("once", pt.tag)))

    def go(**kw):  # type: ignore[no-untyped-def]
        out = SimpleNamespace(rows=[])
        out.write = out.rows.append
        done = {("done",)}
        args = {"only": frozenset(), "skip": frozenset({("gemm", 16, 32)})} | kw
        deadline = args.pop("deadline", float("inf"))
        points.measure_shapes(SHP, GRID, out, done, "cpu", torch.Generator(), 3, deadline,
                              **args)  # fmt: skip
        return log, out.rows, done

    return go


def test_times_graph_then_eager_and_skips(run, capsys) -> None:  # type: ignore[no-untyped-def]
    log, rows, done = run()
    assert log == [
        ("operator_points", [(6, 2, 4), (6, 2, 4)]),
        ("time", ("g1",), 3, True),
        ("time", ("g2",), 3, True), ("time", ("g2",), 3, False),
        ("time", ("g3",), 3, True), ("time", ("g3",), 3, False),
        ("time", ("moe1",), 3, True),
        ("time", ("a1",), 3, True),
    ]  # fmt: skip
    common = {"flops": 1.0, "bytes_": 2.0, "copies": 2}
    assert rows == [
        (("gemm", "x", "graph", {"p50_us": 1.0}), {**common, "impl": "impl-g1", "n": 8, "k": 4}),
        (("gemm", "x", "eager", {"p50_us": 1.0}), {**common, "impl": "impl-g2", "n": 8, "k": 4}),
        (("moe", "x", "graph", {"p50_us": 1.0}), {**common, "impl": "impl-moe1", "m_tok": 3}),
        (("attn_decode", "kk", "graph", {"p50_us": 1.0}),
         {"flops": 10.0, "bytes_": 20.0, "copies": 1, "impl": "impl-a1e3", "m_tok": 3}),
    ]  # fmt: skip
    assert done == {("done",), ("g1",), ("g2",), ("g3",), ("moe1",), ("a1",), ("attn_buf", "a1")}
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "FAILED ('g2',) graph=True: RuntimeError: no True",
        "FAILED ('g3',) graph=True: RuntimeError: no True",
        "FAILED ('g3',) graph=False: RuntimeError: no False",
    ]


def test_only_and_no_kv_without_decode_attention(run) -> None:  # type: ignore[no-untyped-def]
    log, rows, done = run(only=frozenset({"moe"}))
    assert log == [("operator_points", None), ("time", ("moe1",), 3, True)]
    assert [r[1]["impl"] for r in rows] == ["impl-moe1"]
    assert ("attn_buf", "a1") not in done


def test_past_the_deadline_nothing_runs(run) -> None:  # type: ignore[no-untyped-def]
    log, rows, done = run(deadline=0.0)
    assert log == [("operator_points", None)] and rows == [] and done == {("done",)}


def test_warm_up_runs_each_point_once(run) -> None:  # type: ignore[no-untyped-def]
    log, rows, done = run(warm_ops=frozenset({"gemm"}))
    assert log[1:] == [("once", (t,)) for t in ("g1", "g2", "g3", "moe1", "a1")]
    assert rows == []
    assert ("attn_buf", "a1") in done


def test_vllm_kernels_replace_the_torch_classes(run, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    fake = types.ModuleType("capsim_kernels.bench.step.vllm_ops")
    fake.hybrid_block_size = lambda shp: 4  # type: ignore[attr-defined]
    fake.kv_cache = lambda nblk, block, hkv, hd, dev, gen: ("kv", nblk, block, hkv, hd)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, fake.__name__, fake)
    monkeypatch.setattr(sys.modules["capsim_kernels.bench.step"], "vllm_ops", fake, raising=False)
    seen = []
    vp, _ = _pt("v1", "moe", key="vk")

    def vllm_points(shp, grid, dev, gen, kv):  # type: ignore[no-untyped-def]
        seen.append(kv)
        return [vp]

    monkeypatch.setattr(points, "vllm_operator_points", vllm_points)
    PTS.append((vp, ()))
    try:
        log, rows, _ = run(kernels="vllm")
    finally:
        PTS.pop()
    # nblk = ceil(6 / 4) + max(batch) + 2 = 6
    assert seen == [("kv", 6, 4, 2, 4)]
    assert log[0] == ("operator_points", None)
    assert [r[1]["impl"] for r in rows] == ["impl-g1", "impl-g2", "impl-a1e3", "impl-v1"]
