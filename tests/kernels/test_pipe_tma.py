"""The session-5 pipelined-stream options (treewy_pipe.py): the state tile through a
host tensor descriptor (``tma``) and each tile's pool slot loaded one tile early
(``slot_ahead``). Outputs vs float64 over every request, pseudo-values vs the round-5
verify; the descriptor is built exactly where a [block_v, bkc] box cannot straddle two
heads; a pool whose slots are out of order is read through the right slot."""

from __future__ import annotations

import os

import pytest
import torch
from capsim_kernels import LaunchPolicy, recurrence_reference, treewy_verify
from capsim_kernels.gdn_verify.policy import PipeConfig
from capsim_kernels.gdn_verify.tree import TreeSpec
from capsim_kernels.gdn_verify.treewy_pipe import state_descriptor
from gdn_testing import assert_close, make_window, nan_like
from tf32_emulation import emulate_tf32

pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="tf32 emulation needs the interpreter"
)


def test_descriptor_only_where_a_box_stays_inside_one_head():
    pool = torch.zeros(3, 2, 32, 32)
    desc = state_descriptor(pool, 16, 16)
    assert desc is not None and list(desc.shape) == [3 * 2 * 32, 32]
    assert list(desc.block_shape) == [16, 16]
    assert state_descriptor(torch.zeros(3, 2, 24, 32), 16, 16) is None  # dv % block_v
    assert state_descriptor(torch.zeros(3, 2, 32, 32).transpose(2, 3), 16, 16) is None
    assert state_descriptor(torch.zeros(3, 2, 32, 2), 16, 2) is None  # 8-byte rows


@pytest.mark.parametrize(
    "pipe",
    [PipeConfig(3, 16, 2, 16, ctas_per_sm=1, tma=True, slot_ahead=True, pack_qk=True),
     PipeConfig(3, 16, 2, 16, ctas_per_sm=1, slot_ahead=True),
     PipeConfig(2, 16, 2, 16, ctas_per_sm=1, tma=True)],
    ids=["tma-ahead-packed", "ahead", "tma"],
)  # fmt: skip
@pytest.mark.parametrize("tree", [TreeSpec.chain(4), TreeSpec((2, 2, 2))], ids=lambda t: t.label)
def test_tma_and_slot_ahead_verify_match_float64(pipe, tree):
    win = make_window(parent=tree.parent, batch=4, num_k_heads=1, num_v_heads=2,
                      gate_range=(0.3, 1.0), seed=47, extra_slots=3)  # fmt: skip
    # slots out of order (the next tile's slot is not this one's + 1)
    slot = torch.tensor([5, 0, 3, 1], dtype=win.slot.dtype)
    pool = torch.full_like(win.pool, float("nan"))
    pool[slot.long()] = win.state0
    args = (win.q, win.k, win.v, win.log_gate, win.beta, pool, slot, win.parent)
    o_ref, _ = recurrence_reference(win.q, win.k, win.v, win.log_gate, win.beta, win.state0,
                                    tree.parent)  # fmt: skip
    with emulate_tf32():
        o, vt = treewy_verify(*args, policy=LaunchPolicy(single_launch=False, pipe_verify=pipe),
                              out=nan_like(win.v))  # fmt: skip
        _, vt_ref = treewy_verify(*args, policy=LaunchPolicy(single_launch=False))
    for b in range(o.shape[0]):
        assert_close(f"o request {b}", o_ref[b], o[b], 2e-2)
    assert_close("vt vs the two-launch verify", vt_ref, vt, 1e-6)
