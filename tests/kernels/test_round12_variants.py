"""Round 12's variants (bench/gdn/variants.py, session 13; kernels/gdn_verify/NOTES.md
section 18) run as registered, one program per "SM" (several tiles per program), against
float64: pipe_zw1p (pipe_zw1's deferred with keys and queries packed into one operand),
pipe_zw1e (+ early_rows: the next key chunk's window rows loaded before this chunk's state)
and pipe_re (verify pipe_r + early_rows).

dk = dv = 64 so each tile takes two 32-key chunks (chunk 0's rows before the chunk loop,
chunk 1's fetched during chunk 0); early_rows applies where the window packs (2 W <= BW:
W <= 8 here), so the two-step pairs below end on such windows (a pending window of 3, 9
and 15 nodes) but one, and the W = 9 / 15 cells take the unpacked kernel.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
from capsim_kernels.bench.gdn.variants import VARIANTS
from capsim_kernels.gdn_verify.policy import PipeConfig
from capsim_kernels.gdn_verify.tree import TreeSpec
from test_accuracy_depth import FAST, FP32_CONTRACT, per_request_error
from test_pipe_pending import test_pipe_deferred_two_steps_meets_the_contract as two_steps
from test_round10_variants import _one_per_sm
from test_round10_variants import test_round10_verify_matches_float64_over_every_request as v64

DEFERRED = ("pipe_zw1p", "pipe_zw1e")
_interp = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="tf32 emulation needs the interpreter"
)
_TREES = [TreeSpec.chain(4), TreeSpec.chain(2), TreeSpec.chain(9), TreeSpec((2, 2, 2))]


def _w(t: TreeSpec) -> str:
    return f"W{t.num_nodes}"


def test_the_round12_variants_are_the_declared_launches():
    zw1 = VARIANTS["pipe_zw1"].pipe_deferred
    p = dataclasses.replace(zw1, pack_qk=True)
    assert VARIANTS["pipe_zw1p"].pipe_deferred == p
    assert VARIANTS["pipe_zw1e"].pipe_deferred == dataclasses.replace(p, early_rows=True)
    for n in DEFERRED:
        d = VARIANTS[n].pipe_deferred
        assert VARIANTS[n].pipe_verify is None and d.tma and d.pending_in_stage1
        assert not d.slot_ahead and (d.block_v, d.num_warps, d.stages, d.bkc) == (16, 1, 3, 32)
    r = VARIANTS["pipe_r"].pipe_verify
    assert VARIANTS["pipe_re"].pipe_verify == dataclasses.replace(r, early_rows=True)
    assert VARIANTS["pipe_re"].pipe_deferred is None
    assert "early-rows" in VARIANTS["pipe_zw1e"].pipe_deferred.label()


def test_early_rows_needs_the_packed_operand_and_no_slot_ahead():
    with pytest.raises(ValueError, match="early_rows"):
        PipeConfig(early_rows=True)
    with pytest.raises(ValueError, match="early_rows"):
        PipeConfig(early_rows=True, pack_qk=True, slot_ahead=True)


@_interp
@pytest.mark.parametrize(
    ("name", "variant"),
    [*((n, "deferred") for n in DEFERRED), ("pipe_re", "verify+commit")],
)
@pytest.mark.parametrize("tree", _TREES, ids=_w)
def test_round12_contract_per_request_at_every_depth(name, variant, tree):
    """Request b accepts node b: every depth's committed state within 1e-6 (per head)."""
    err = per_request_error(tree, variant, FAST, dim=64, policy=_one_per_sm(name))
    assert float(err.max()) <= FP32_CONTRACT, f"{name} W={tree.num_nodes}: {err.tolist()}"


@_interp
@pytest.mark.parametrize("tree", [TreeSpec.chain(4), TreeSpec.chain(2), TreeSpec((2, 2, 2))],
                         ids=_w)  # fmt: skip
def test_round12_verify_matches_float64_over_every_request(tree):
    """Round 10's verify check (slots out of order, NaN elsewhere in the pool, every output
    row written and within 2e-2 of float64 per request, vt within 1e-6 of the default)."""
    v64("pipe_re", tree)


@_interp
@pytest.mark.parametrize("name", DEFERRED)
@pytest.mark.parametrize(
    ("tree1", "tree2"),
    [
        (TreeSpec.chain(9), TreeSpec.chain(4)),
        (TreeSpec((2, 2, 2)), TreeSpec.chain(3)),
        (TreeSpec.chain(3), TreeSpec.chain(2)),
        (TreeSpec.chain(4), TreeSpec((2, 2, 2))),
    ],
    ids=_w,
)
def test_round12_deferred_two_steps_meets_the_contract(name, tree1, tree2):
    """test_pipe_pending's two-step deferred (a pending window of another size, a request
    with nothing pending, hand-on buffers, pseudo-values vs the default deferred): outputs
    and committed state against float64, step 2 on packed windows (early rows) but one."""
    two_steps(_one_per_sm(name).pipe_deferred, tree1, tree2)
