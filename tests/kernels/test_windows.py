"""Every window the step model needs, for every capsim variant, in the interpreter.

T = 1 (plain decode, no speculation) and chains T = 2..9 for store-all, TreeWY
verify+commit, fused, deferred and replay; the per-GPU GDN head counts of TP 1/2/4/8 of
every preset (capsim/models.py: Hk 16, Hv 32 or 64) at one window. W = 15 and 40 and the
shipped trees are in test_kernels.py / test_accuracy_depth.py. Small head dims (16).
Each variant's committed state (request 0 accepts the last node, request 1 the root)
against the float64 recurrence, outputs within bf16 rounding.
"""

from __future__ import annotations

import pytest
import torch
from capsim_kernels.gdn_verify import (
    PendingCommit,
    ReplayRing,
    TreeSpec,
    recurrence_reference,
    replay_append,
    replay_state_reference,
    replay_verify,
    storeall_verify,
    treewy_commit,
    treewy_deferred_verify,
    treewy_fused_verify_commit,
    treewy_verify,
)
from gdn_testing import assert_close, make_window

STATE_TOL = 1e-5  # fp32 state, interpreter (exact fp32 products)
BF16_TOL = 1e-2
VARIANTS = ("storeall", "verify+commit", "fused", "deferred", "replay")


def committed(variant: str, win, accepted: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(outputs, committed state [B, Hv, dv, dk]) of ``variant`` for window ``win``."""
    args = (win.q, win.k, win.v, win.log_gate, win.beta, win.pool, win.slot, win.parent)
    bsz, w = win.q.shape[:2]
    if variant == "storeall":
        free = [s for s in range(win.pool.shape[0]) if s not in win.slot.tolist()]
        slots = torch.tensor(free[: bsz * w], dtype=torch.int32).view(bsz, w)
        o = storeall_verify(*args[:7], slots, win.parent)
        return o, win.pool[slots[torch.arange(bsz), accepted.long()].long()]
    if variant == "verify+commit":
        o, vt = treewy_verify(*args)
        treewy_commit(win.pool, win.slot, win.k, vt, win.log_gate, win.parent, accepted)
    elif variant == "fused":
        o = treewy_fused_verify_commit(*args, accepted)
    elif variant == "deferred":
        o, vt = treewy_verify(*args)
        ping = PendingCommit(
            k=win.k, vt=vt, log_gate=win.log_gate, parent=win.parent, accepted=accepted
        )
        treewy_deferred_verify(*args, ping, PendingCommit.empty(win.k, win.v, win.parent))
    else:
        ring = ReplayRing.empty(win.k, win.v, win.parent, capacity=w + 2)
        o, vt = replay_verify(*args, ring)
        replay_append(ring, win.k, vt, win.log_gate, win.parent, accepted)
        state = replay_state_reference(
            win.pool[win.slot.long()], ring.k, ring.vt, ring.log_gate, ring.length
        )
        return o, state
    return o, win.pool[win.slot.long()]


def check(variant: str, tree: TreeSpec, hk: int, hv: int, batch: int = 2) -> None:
    w = tree.num_nodes
    win = make_window(
        parent=tree.parent, batch=batch, num_k_heads=hk, num_v_heads=hv, dk=16, dv=16,
        extra_slots=batch * w, seed=w + hv,
    )  # fmt: skip
    accepted = torch.tensor([w - 1, 0, w // 2][:batch], dtype=torch.int32)
    o_ref, states = recurrence_reference(
        win.q, win.k, win.v, win.log_gate, win.beta, win.state0, tree.parent
    )
    o, state = committed(variant, win, accepted)
    label = f"{variant} W={w} Hk={hk} Hv={hv}"
    assert_close(f"{label} o", o_ref, o, BF16_TOL)
    assert_close(f"{label} state", states[torch.arange(batch), accepted.long()], state, STATE_TOL)


@pytest.mark.parametrize("w", range(1, 10))
@pytest.mark.parametrize("variant", VARIANTS)
def test_chain_windows_t1_to_t9(variant, w):
    check(variant, TreeSpec.chain(w), hk=2, hv=4)


# per-GPU (Hk, Hv) of TP 1/2/4/8: 16 key heads, 32 (35B, 80B) or 64 (397B) value heads
TP_HEADS = sorted({(16 // tp, hv // tp) for tp in (1, 2, 4, 8) for hv in (32, 64)})


@pytest.mark.parametrize(("hk", "hv"), TP_HEADS, ids=lambda x: str(x))
@pytest.mark.parametrize("variant", ["storeall", "verify+commit", "fused", "replay"])
def test_tp_head_counts(variant, hk, hv):
    check(variant, TreeSpec.chain(4), hk=hk, hv=hv, batch=1)


@pytest.mark.slow
@pytest.mark.parametrize("tree", [TreeSpec((1, 1, 1)), TreeSpec((2, 2, 1))], ids=lambda t: t.label)
@pytest.mark.parametrize("variant", VARIANTS)
def test_shipped_trees_every_variant(variant, tree):
    check(variant, tree, hk=2, hv=4)


def test_b1_picks_the_fused_kernel():
    from capsim_kernels.gdn_verify import DEFAULT_POLICY as pol

    assert pol.reconstruct_kernels(4, 1 * 32) == "fused"  # 35B TP1, B = 1, T = 4
    assert pol.reconstruct_kernels(4, 256 * 32) == "verify+commit"
    assert pol.reconstruct_kernels(15, 1 * 32) == "verify+commit"  # two-launch window
