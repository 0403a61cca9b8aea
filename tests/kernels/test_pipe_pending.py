"""The pipelined deferred commit with the pending path hoisted (treewy_pending.py).

The pending coefficients exp(L_a - L_i) / |k_i| and exp(L_a) are computed once per
(request, value head), by their own kernel or inside stage 1, and the pipelined stream
only applies them. Checked against float64: the hoisted vectors themselves, and a
two-step deferred run (a pending window of another size, requests with nothing pending,
several tiles per program, two key chunks per tile) whose committed states must meet the
fp32 contract (<= 1e-6 relative per (request, head)) and whose hand-on buffers must hold
this window's keys and gates exactly.
"""

from __future__ import annotations

import os

import pytest
import torch
from capsim_kernels import (
    LaunchPolicy,
    PendingCommit,
    recurrence_reference,
    treewy_deferred_verify,
    treewy_verify,
)
from capsim_kernels.gdn_verify.policy import PipeConfig
from capsim_kernels.gdn_verify.tree import TreeSpec
from capsim_kernels.gdn_verify.treewy_pending import launch_pending
from gdn_testing import assert_close, make_window, nan_like
from tf32_emulation import emulate_tf32

pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="tf32 emulation needs the interpreter"
)
FP32_CONTRACT = 1e-6
OWN = PipeConfig(stages=2, block_v=16, num_warps=2, bkc=16, ctas_per_sm=1)
IN_STAGE1 = PipeConfig(stages=2, block_v=16, num_warps=2, bkc=16, ctas_per_sm=1,
                       pending_in_stage1=True)  # fmt: skip
GRAM_OWN = PipeConfig(stages=2, block_v=16, num_warps=2, bkc=16, ctas_per_sm=1, pending_gram=True)
FUSED_WINDOW = PipeConfig(stages=2, block_v=16, num_warps=2, bkc=16, ctas_per_sm=1,
                          fused_window=True)  # fmt: skip
GRAM_STAGE1 = PipeConfig(stages=2, block_v=16, num_warps=2, bkc=16, ctas_per_sm=1,
                         pending_in_stage1=True, pending_gram=True)  # fmt: skip
# session 4: keys and queries packed into one operand (W <= 8); ignored at W > 8
PACK_STAGE1 = PipeConfig(stages=2, block_v=16, num_warps=2, bkc=16, ctas_per_sm=1,
                         pending_in_stage1=True, pack_qk=True)  # fmt: skip
PACK_OWN = PipeConfig(stages=2, block_v=16, num_warps=2, bkc=16, ctas_per_sm=1, pack_qk=True)
# session 5: the state tile through a tensor descriptor (TMA) and each tile's pool slot
# loaded one tile early (slot_ahead; every pending row read, the rows off the path zeroed)
TMA_AHEAD = PipeConfig(stages=3, block_v=16, num_warps=2, bkc=16, ctas_per_sm=1,
                       pending_in_stage1=True, tma=True, slot_ahead=True)  # fmt: skip
AHEAD_OWN = PipeConfig(stages=3, block_v=16, num_warps=2, bkc=16, ctas_per_sm=1,
                       slot_ahead=True)  # fmt: skip
TMA_OWN = PipeConfig(stages=2, block_v=16, num_warps=2, bkc=16, ctas_per_sm=1, tma=True)


def _path(parent: tuple[int, ...], a: int) -> list[int]:
    out = []
    while a >= 0:
        out.append(a)
        a = parent[a]
    return out[::-1]


def test_hoisted_coefficients_match_float64():
    tree = TreeSpec((2, 2, 2))
    win = make_window(parent=tree.parent, batch=4, num_k_heads=1, num_v_heads=2,
                      gate_range=(0.3, 1.0), seed=3)  # fmt: skip
    accepted = torch.tensor([-1, 0, 3, tree.num_nodes - 1], dtype=torch.int32)
    k_out, g_out = nan_like(win.k), nan_like(win.log_gate)
    pscale, pgam, pgram = launch_pending(
        win.q, win.k, win.log_gate, (win.k, None, win.log_gate, win.parent, accepted), k_out,
        g_out, num_heads=(1, 2), gram=True,
    )  # fmt: skip
    g64, k64 = win.log_gate.double(), win.k.double()
    want = torch.zeros(4 * 2, tree.num_nodes, dtype=torch.float64)
    want_gam = torch.ones(4 * 2, dtype=torch.float64)
    for b, a in enumerate(accepted.tolist()):
        if a < 0:
            continue
        path = _path(tree.parent, a)
        for h in range(2):
            want_gam[b * 2 + h] = torch.exp(g64[b, path, h].sum())
            for j, i in enumerate(path):
                seg = g64[b, path[j + 1 :], h].sum()
                want[b * 2 + h, i] = torch.exp(seg) / torch.sqrt((k64[b, i, 0] ** 2).sum() + 1e-6)
    assert torch.allclose(pscale.double(), want, rtol=1e-6, atol=0.0), (pscale, want)
    assert torch.allclose(pgam.double(), want_gam, rtol=1e-6, atol=0.0)
    assert torch.equal(k_out, win.k) and torch.equal(g_out, win.log_gate)
    # K PK^T and Q PK^T over the pending path's rows (raw bf16: exact products, fp32 sums)
    on_path = (want != 0).view(4, 2, -1)
    for b in range(4):
        for h in range(2):
            m = on_path[b, h].double()
            kp = (k64[b, :, 0] @ k64[b, :, 0].T) * m[None, :]
            qp = (win.q.double()[b, :, 0] @ k64[b, :, 0].T) * m[None, :]
            got = pgram[b * 2 + h].double()
            assert torch.allclose(got[0], kp, rtol=1e-6, atol=1e-5), (b, h, got[0], kp)
            assert torch.allclose(got[1], qp, rtol=1e-6, atol=1e-5), (b, h, got[1], qp)


@pytest.mark.parametrize(
    "pipe", [OWN, IN_STAGE1, GRAM_OWN, GRAM_STAGE1, FUSED_WINDOW, PACK_STAGE1, PACK_OWN,
             TMA_AHEAD, AHEAD_OWN, TMA_OWN],
    ids=["own-kernel", "in-stage1", "gram-own", "gram-stage1", "fused-window", "pack-stage1",
         "pack-own", "tma-ahead-stage1", "ahead-own", "tma-own"],
)  # fmt: skip
@pytest.mark.parametrize(
    ("tree1", "tree2"),
    [(TreeSpec.chain(4), TreeSpec((2, 2, 2))), (TreeSpec((2, 2, 2)), TreeSpec.chain(4)),
     (TreeSpec.chain(3), TreeSpec.chain(7))],
    ids=lambda t: t.label,
)
def test_pipe_deferred_two_steps_meets_the_contract(pipe, tree1, tree2):
    """Step 1: verify window 1 (W1 nodes) from S_c. Step 2: the pipelined deferred applies
    window 1's accepted path (request 0: nothing pending) inside window 2's verify."""
    bsz, hk, hv = 4, 1, 2
    kw = {"batch": bsz, "num_k_heads": hk, "num_v_heads": hv, "gate_range": (0.3, 1.0)}
    win1 = make_window(parent=tree1.parent, seed=31, **kw)
    win2 = make_window(parent=tree2.parent, seed=32, **kw)
    w1 = tree1.num_nodes
    accepted = torch.tensor([-1, 0, 2, w1 - 1], dtype=torch.int32)
    s_c = win1.state0
    _, states1 = recurrence_reference(win1.q, win1.k, win1.v, win1.log_gate, win1.beta, s_c,
                                      tree1.parent)  # fmt: skip
    s_a = torch.stack([s_c[b].double() if a < 0 else states1[b, a].double()
                       for b, a in enumerate(accepted.tolist())])  # fmt: skip
    o2_ref, _ = recurrence_reference(win2.q, win2.k, win2.v, win2.log_gate, win2.beta,
                                     s_a.float(), tree2.parent)  # fmt: skip
    policy = LaunchPolicy(single_launch=False, pipe_deferred=pipe)
    pool = win2.pool.clone()
    pool[win2.slot.long()] = s_c
    with emulate_tf32():
        _, vt1 = treewy_verify(win1.q, win1.k, win1.v, win1.log_gate, win1.beta, win1.pool,
                               win1.slot, win1.parent)  # fmt: skip
        ping = PendingCommit(k=win1.k, vt=vt1, log_gate=win1.log_gate, parent=win1.parent,
                             accepted=accepted)  # fmt: skip
        pong = PendingCommit.empty(win2.k, win2.v, win2.parent)
        o2 = treewy_deferred_verify(win2.q, win2.k, win2.v, win2.log_gate, win2.beta, pool,
                                    win2.slot, win2.parent, ping, pong, out=nan_like(win2.v),
                                    policy=policy)  # fmt: skip
    got = pool[win2.slot.long()].double()
    rel = (got - s_a).flatten(2).norm(dim=2) / s_a.flatten(2).norm(dim=2)
    assert float(rel.max()) <= FP32_CONTRACT, f"per (request, head): {rel.tolist()}"
    assert_close("o step 2", o2_ref, o2, 2e-2)
    assert torch.equal(pong.k, win2.k) and torch.equal(pong.log_gate, win2.log_gate)
    # the pseudo-values handed on match the default deferred kernel's on the same inputs
    pool_d = win2.pool.clone()
    pool_d[win2.slot.long()] = s_c
    pong_d = PendingCommit.empty(win2.k, win2.v, win2.parent)
    with emulate_tf32():
        treewy_deferred_verify(win2.q, win2.k, win2.v, win2.log_gate, win2.beta, pool_d,
                               win2.slot, win2.parent, ping, pong_d,
                               policy=LaunchPolicy(single_launch=False))  # fmt: skip
    assert_close("vt vs the default deferred", pong_d.vt, pong.vt, 1e-6)


@pytest.mark.parametrize("tree", [TreeSpec.chain(4), TreeSpec((2, 2, 2))], ids=lambda t: t.label)
def test_pipe_fused_window_verify_matches_float64_and_the_two_launch_path(tree):
    """treewy_pipe_small.py: outputs vs float64, pseudo-values vs the two-launch verify
    (several tiles per program, two key chunks per tile)."""
    win = make_window(parent=tree.parent, batch=4, num_k_heads=1, num_v_heads=2,
                      gate_range=(0.3, 1.0), seed=41)  # fmt: skip
    args = (win.q, win.k, win.v, win.log_gate, win.beta, win.pool, win.slot, win.parent)
    o_ref, _ = recurrence_reference(win.q, win.k, win.v, win.log_gate, win.beta, win.state0,
                                    tree.parent)  # fmt: skip
    fused = PipeConfig(stages=2, block_v=16, num_warps=2, bkc=16, ctas_per_sm=1,
                       fused_window=True)  # fmt: skip
    with emulate_tf32():
        o, vt = treewy_verify(*args, policy=LaunchPolicy(single_launch=False, pipe_verify=fused),
                              out=nan_like(win.v))  # fmt: skip
        _, vt_ref = treewy_verify(*args, policy=LaunchPolicy(single_launch=False))
    assert_close("o", o_ref, o, 2e-2)
    assert_close("vt vs the two-launch verify", vt_ref, vt, 1e-6)


@pytest.mark.parametrize("tree", [TreeSpec.chain(2), TreeSpec.chain(4), TreeSpec.chain(7),
                                  TreeSpec((2, 1))], ids=lambda t: t.label)  # fmt: skip
def test_pipe_packed_verify_matches_float64_and_the_two_launch_path(tree):
    """pack_qk (keys rows < W, queries rows W..2W-1 of one operand; W = 3, 5, 8 = BW / 2
    and a branching tree): outputs vs float64 over every request, pseudo-values vs the unpacked
    pipelined verify and the round-5 verify (several tiles per program, two key chunks)."""
    win = make_window(parent=tree.parent, batch=4, num_k_heads=1, num_v_heads=2,
                      gate_range=(0.3, 1.0), seed=43)  # fmt: skip
    args = (win.q, win.k, win.v, win.log_gate, win.beta, win.pool, win.slot, win.parent)
    o_ref, _ = recurrence_reference(win.q, win.k, win.v, win.log_gate, win.beta, win.state0,
                                    tree.parent)  # fmt: skip
    plain = PipeConfig(stages=2, block_v=16, num_warps=2, bkc=16, ctas_per_sm=1)
    with emulate_tf32():
        o, vt = treewy_verify(*args, policy=LaunchPolicy(single_launch=False, pipe_verify=PACK_OWN),
                              out=nan_like(win.v))  # fmt: skip
        o_p, vt_p = treewy_verify(*args, policy=LaunchPolicy(single_launch=False,
                                                             pipe_verify=plain))  # fmt: skip
        _, vt_ref = treewy_verify(*args, policy=LaunchPolicy(single_launch=False))
    assert not torch.isnan(o).any(), "a packed output row was not written"
    for b in range(o.shape[0]):
        assert_close(f"o request {b}", o_ref[b], o[b], 2e-2)
    assert_close("o vs the unpacked pipe", o_p, o, 1e-2)
    assert_close("vt vs the unpacked pipe", vt_p, vt, 1e-6)
    assert_close("vt vs the two-launch verify", vt_ref, vt, 1e-6)


def test_pack_qk_with_gram_is_refused():
    with pytest.raises(ValueError, match="pack_qk"):
        PipeConfig(pack_qk=True, pending_gram=True)
