"""Round 11's variants (bench/gdn/variants.py, session 6; kernels/gdn_verify/NOTES.md
section 16) run as registered, one program per "SM" (several tiles per program), against
float64: pipe_zw1 (pipe_zw2 at 16-row tiles, 1 warp), pipe_zw1s2 (the same at 2 stages),
pipe_zw2s4 (pipe_zw2 at 4 stages); the deferred commit only.

dk = dv = 64 so each tile takes two 32-key chunks (the variants' bkc); pipe_zw2s4's 32-row
box is halved to 16 rows at these batch sizes (_jit.pick_block_v), so its 32-row box first
runs on the device, in the round-11 plan's own float64 checks.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
from capsim_kernels.bench.gdn.variants import VARIANTS
from capsim_kernels.gdn_verify.tree import TreeSpec
from test_accuracy_depth import FAST, FP32_CONTRACT, per_request_error
from test_pipe_pending import test_pipe_deferred_two_steps_meets_the_contract as two_steps
from test_round10_variants import _one_per_sm

pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="tf32 emulation needs the interpreter"
)
DEFERRED = ("pipe_zw1", "pipe_zw1s2", "pipe_zw2s4")


def test_the_round11_variants_are_the_declared_launches():
    zw2 = VARIANTS["pipe_zw2"].pipe_deferred
    assert VARIANTS["pipe_zw1"].pipe_deferred == dataclasses.replace(zw2, block_v=16, num_warps=1)
    assert VARIANTS["pipe_zw1s2"].pipe_deferred == dataclasses.replace(
        zw2, block_v=16, num_warps=1, stages=2)  # fmt: skip
    assert VARIANTS["pipe_zw2s4"].pipe_deferred == dataclasses.replace(zw2, stages=4)
    for n in DEFERRED:
        d = VARIANTS[n].pipe_deferred
        assert VARIANTS[n].pipe_verify is None and d.tma and d.pending_in_stage1
        assert not d.slot_ahead and d.maxnreg == 0


@pytest.mark.parametrize("name", DEFERRED)
@pytest.mark.parametrize("tree", [TreeSpec.chain(4), TreeSpec.chain(9), TreeSpec((2, 2, 2))],
                         ids=lambda t: t.label)  # fmt: skip
def test_round11_contract_per_request_at_every_depth(name, tree):
    """Request b accepts node b: every depth's committed state within 1e-6 (per head)."""
    err = per_request_error(tree, "deferred", FAST, dim=64, policy=_one_per_sm(name))
    assert float(err.max()) <= FP32_CONTRACT, f"{name} W={tree.num_nodes}: {err.tolist()}"


@pytest.mark.parametrize("name", DEFERRED)
@pytest.mark.parametrize(
    ("tree1", "tree2"),
    [(TreeSpec.chain(4), TreeSpec((2, 2, 2))), (TreeSpec.chain(3), TreeSpec.chain(9))],
    ids=lambda t: t.label,
)
def test_round11_deferred_two_steps_meets_the_contract(name, tree1, tree2):
    """test_pipe_pending's two-step deferred (a pending window of another size, a request
    with nothing pending, hand-on buffers, pseudo-values vs the default deferred): outputs
    and committed state against float64."""
    two_steps(_one_per_sm(name).pipe_deferred, tree1, tree2)
