"""Round 10's variants (bench/gdn/variants.py, session 6; kernels/gdn_verify/NOTES.md
section 14) run as registered, one program per "SM" (several tiles per program), against
float64: pipe_y / pipe_y96 (verify pipe_r + tma; pipe_y96 capped at 96 registers on the
GPU, the same kernel here) and pipe_z / pipe_z2 / pipe_zw2 (pipe_x's TMA deferred at
32-row tiles, 2 stages, 32-row tiles with 2 warps).

dk = dv = 64 so each tile takes two 32-key chunks (the variants' bkc); at these batch
sizes the launch halves the dv tile to 16 rows (_jit.pick_block_v), so the GPU's 32 / 64-row
boxes are only compiled, on the device, by the round-10 plan's float64 checks.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch
from capsim_kernels import LaunchPolicy, recurrence_reference, treewy_verify
from capsim_kernels.bench.gdn.variants import VARIANTS
from capsim_kernels.gdn_verify.tree import TreeSpec
from gdn_testing import assert_close, make_window, nan_like
from test_accuracy_depth import FAST, FP32_CONTRACT, per_request_error
from test_pipe_pending import test_pipe_deferred_two_steps_meets_the_contract as two_steps
from tf32_emulation import emulate_tf32

pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="tf32 emulation needs the interpreter"
)
VERIFY = ("pipe_y", "pipe_y96")
DEFERRED = ("pipe_z", "pipe_z2", "pipe_zw2")


def _one_per_sm(name: str) -> LaunchPolicy:
    pol = VARIANTS[name]
    rep = {f: dataclasses.replace(getattr(pol, f), ctas_per_sm=1)
           for f in ("pipe_verify", "pipe_deferred") if getattr(pol, f) is not None}  # fmt: skip
    return dataclasses.replace(pol, single_launch=False, **rep)


def test_the_round10_variants_are_the_declared_launches():
    y, r = VARIANTS["pipe_y"].pipe_verify, VARIANTS["pipe_r"].pipe_verify
    assert dataclasses.replace(y, tma=False) == r and y.tma and not y.slot_ahead
    assert VARIANTS["pipe_y96"].pipe_verify == dataclasses.replace(y, maxnreg=96)
    x = VARIANTS["pipe_x"].pipe_deferred
    assert VARIANTS["pipe_z"].pipe_deferred == dataclasses.replace(x, block_v=32)
    assert VARIANTS["pipe_z2"].pipe_deferred == dataclasses.replace(x, stages=2)
    assert VARIANTS["pipe_zw2"].pipe_deferred == dataclasses.replace(x, block_v=32, num_warps=2)
    for n in VERIFY:
        assert VARIANTS[n].pipe_deferred is None
    for n in DEFERRED:
        assert VARIANTS[n].pipe_verify is None and not VARIANTS[n].pipe_deferred.slot_ahead


@pytest.mark.parametrize("name", VERIFY)
@pytest.mark.parametrize("tree", [TreeSpec.chain(4), TreeSpec((2, 2, 2))], ids=lambda t: t.label)
def test_round10_verify_matches_float64_over_every_request(name, tree):
    win = make_window(parent=tree.parent, batch=4, num_k_heads=1, num_v_heads=2, dk=64, dv=64,
                      gate_range=(0.3, 1.0), seed=61, extra_slots=3)  # fmt: skip
    slot = torch.tensor([5, 0, 3, 1], dtype=win.slot.dtype)  # out of order
    pool = torch.full_like(win.pool, float("nan"))
    pool[slot.long()] = win.state0
    args = (win.q, win.k, win.v, win.log_gate, win.beta, pool, slot, win.parent)
    o_ref, _ = recurrence_reference(win.q, win.k, win.v, win.log_gate, win.beta, win.state0,
                                    tree.parent)  # fmt: skip
    with emulate_tf32():
        o, vt = treewy_verify(*args, policy=_one_per_sm(name), out=nan_like(win.v))
        _, vt_ref = treewy_verify(*args, policy=LaunchPolicy(single_launch=False))
    assert not torch.isnan(o).any(), "an output row was not written"
    for b in range(o.shape[0]):
        assert_close(f"o request {b}", o_ref[b], o[b], 2e-2)
    assert_close("vt vs the two-launch verify", vt_ref, vt, 1e-6)
    assert torch.isnan(pool[[2, 4, 6]]).all(), "verify wrote the pool"


@pytest.mark.parametrize(
    ("name", "variant"),
    [*((n, "verify+commit") for n in VERIFY), *((n, "deferred") for n in DEFERRED)],
)
@pytest.mark.parametrize("tree", [TreeSpec.chain(4), TreeSpec.chain(9), TreeSpec((2, 2, 2))],
                         ids=lambda t: t.label)  # fmt: skip
def test_round10_contract_per_request_at_every_depth(name, variant, tree):
    """Request b accepts node b: every depth's committed state within 1e-6 (per head)."""
    err = per_request_error(tree, variant, FAST, dim=64, policy=_one_per_sm(name))
    assert float(err.max()) <= FP32_CONTRACT, f"{name} {variant} W={tree.num_nodes}: {err.tolist()}"


@pytest.mark.parametrize("name", DEFERRED)
@pytest.mark.parametrize(
    ("tree1", "tree2"),
    [(TreeSpec.chain(4), TreeSpec((2, 2, 2))), (TreeSpec.chain(3), TreeSpec.chain(9))],
    ids=lambda t: t.label,
)
def test_round10_deferred_two_steps_meets_the_contract(name, tree1, tree2):
    """test_pipe_pending's two-step deferred (a pending window of another size, a request
    with nothing pending, hand-on buffers, pseudo-values vs the default deferred)."""
    two_steps(_one_per_sm(name).pipe_deferred, tree1, tree2)
