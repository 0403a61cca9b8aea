"""Drift of the committed fp32 state over many speculative steps (interpreter, tiny
heads): the error against the float64 recurrence must not grow faster than linearly in
the number of steps, for TreeWY (default math, deferred) and store-all, on a chain and
a tree. (The H200 run: 2,000 steps at the 35B head shape, kernels/BENCHMARKS.md.)"""

from __future__ import annotations

import pytest
from capsim_kernels.bench.gdn.drift import run_drift
from capsim_kernels.bench.gdn.shapes import ModelShape
from capsim_kernels.gdn_verify.tree import TreeSpec

TINY = ModelShape("tiny", num_v_heads=2, num_k_heads=1, dk=16, dv=16)
STEPS = 32


@pytest.mark.parametrize("tree", [TreeSpec.chain(4), TreeSpec((2, 1))], ids=lambda t: t.label)
def test_error_grows_at_most_linearly(tree, device):
    rows = run_drift(
        TINY, "float32", tree, steps=STEPS, batch=2, seed=1, device=device,
        kernels=("treewy", "treewy_deferred", "storeall"), checkpoints=(4, 8, 16, STEPS),
    )  # fmt: skip
    by = {}
    for r in rows:
        by.setdefault(r["kernel"], {})[r["step"]] = float(r["max_err_so_far"])
    assert set(by) == {"treewy", "treewy_deferred", "storeall"}
    for name, errs in by.items():
        early, late = errs[8], errs[STEPS]
        # linear growth gives late <= (STEPS / 8) * early; allow 2x for noise, and a floor
        # at fp32 rounding so that a zero early error does not make the bound vacuous
        assert late <= 2 * (STEPS / 8) * max(early, 1e-7), (name, errs)
        assert late <= 1e-5, (name, errs)  # and fp32-grade after STEPS steps
