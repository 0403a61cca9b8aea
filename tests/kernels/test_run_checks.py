"""``checks.run_checks`` (the float64 accuracy checks the H200 run writes into meta.json)
on tiny shapes in the interpreter: every kernel it checks is within its tolerance, and
each row names the cell and carries every figure (the same code path as on the GPU)."""

from __future__ import annotations

import os

import pytest
from capsim_kernels.bench.gdn import checks
from capsim_kernels.bench.gdn.shapes import ModelShape
from capsim_kernels.gdn_verify.tree import TreeSpec

pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 (CPU)"
)
TINY = ModelShape("tiny", num_v_heads=2, num_k_heads=1, dk=16, dv=16)
FIGURES = {
    "storeall_o", "storeall_states", "treewy_o", "treewy_vt", "treewy_commit_state",
    "fused_o", "fused_state", "deferred_state", "deferred_o",
}  # fmt: skip


def test_every_kernel_checks_out_on_tiny_cells(capsys) -> None:  # type: ignore[no-untyped-def]
    windows = (TreeSpec.chain(3), TreeSpec((2, 1)))
    rows = checks.run_checks(
        batch=2, shapes=(TINY,), state_dtypes=("float32", "bfloat16"), windows=windows,
        device="cpu",
    )  # fmt: skip
    assert len(rows) == 4
    cells = [(r["model_shape"], r["state_dtype"], r["tree"], r["T"]) for r in rows]
    assert cells == [
        ("tiny", sd, t.label, t.num_nodes) for sd in ("float32", "bfloat16") for t in windows
    ]
    for r in rows:
        assert set(r) >= FIGURES, r
        assert r["ok"], r
        # fla's kernels are not installed here: the chain rows say so instead of a figure
        if r["tree"] == windows[0].label:
            assert "fla_error" in r or "fla_recurrent_o" in r
    printed = capsys.readouterr().out.splitlines()
    assert len([ln for ln in printed if ln.startswith("check tiny")]) == 4
