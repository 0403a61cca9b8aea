"""``checks._check_fla`` with a stand-in ``fla`` package (the real one is not installed
here): the exact calls it makes, the figures it records, and what an import or run error
leaves behind (the figures before it, then ``fla_error``)."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest
import torch
from capsim_kernels.bench.gdn import checks

COMMON = {"initial_state": "s0", "output_final_state": True,
          "use_qk_l2norm_in_kernel": True, "state_v_first": True}  # fmt: skip


def _case():  # type: ignore[no-untyped-def]
    o_ref = torch.ones(2, 3)
    st_ref = torch.ones(2, 4, 5)
    c = SimpleNamespace(log_gate="g", beta="b")
    return c, ("q", "k", "v", "extra"), o_ref, st_ref


def _fake_fla(monkeypatch, calls: list, chunk_raises: bool = False) -> None:  # type: ignore[no-untyped-def]
    def recurrent(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(("recurrent", args, kwargs))
        return torch.full((2, 3), 1.5), torch.full((2, 5), 0.5)

    def chunk(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(("chunk", args, kwargs))
        if chunk_raises:
            raise RuntimeError("boom")
        return torch.full((2, 3), 1.25), torch.full((2, 5), 2.0)

    mod = types.ModuleType("fla.ops.gated_delta_rule")
    mod.fused_recurrent_gated_delta_rule = recurrent  # type: ignore[attr-defined]
    mod.chunk_gated_delta_rule = chunk  # type: ignore[attr-defined]
    for name in ("fla", "fla.ops"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "fla.ops.gated_delta_rule", mod)


def test_calls_and_figures(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    calls: list = []
    _fake_fla(monkeypatch, calls)
    c, args, o_ref, st_ref = _case()
    res = checks._check_fla(c, "s0", args, o_ref, st_ref)
    assert calls == [
        ("recurrent", ("q", "k", "v"), {"g": "g", "beta": "b", **COMMON}),
        ("chunk", ("q", "k", "v", "g", "b"), COMMON),
    ]
    assert list(res) == ["fla_recurrent_o", "fla_recurrent_state", "fla_chunk_o", "fla_chunk_state"]
    assert res["fla_recurrent_o"] == pytest.approx(0.5)
    assert res["fla_recurrent_state"] == pytest.approx(0.5)
    assert res["fla_chunk_o"] == pytest.approx(0.25)
    assert res["fla_chunk_state"] == pytest.approx(1.0)


def test_a_run_error_keeps_the_figures_before_it(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    _fake_fla(monkeypatch, [], chunk_raises=True)
    c, args, o_ref, st_ref = _case()
    res = checks._check_fla(c, "s0", args, o_ref, st_ref)
    assert list(res) == ["fla_recurrent_o", "fla_recurrent_state", "fla_error"]
    assert res["fla_error"] == "RuntimeError('boom')"


def test_no_fla_is_one_error(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setitem(sys.modules, "fla", None)
    c, args, o_ref, st_ref = _case()
    res = checks._check_fla(c, "s0", args, o_ref, st_ref)
    assert list(res) == ["fla_error"]
    assert res["fla_error"].startswith("ModuleNotFoundError(")
