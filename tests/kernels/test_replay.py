"""Replay commit mode (gdn_verify/replay.py): checkpoint + ring against float64.

Several consecutive steps per case, each a fresh window and a random accepted node per
request; the float64 truth follows the per-node recurrence along the accepted paths. Per
step: every window output, and the state the ring stands for (checkpoint + ring,
reference.replay_state_reference) per (request, value head) within the fp32 contract
(1e-6, tf32 emulated); the checkpoint is written exactly on the flush steps.
"""

from __future__ import annotations

import os

import pytest
import torch
from capsim_kernels.gdn_verify import (
    LaunchPolicy,
    ReplayRing,
    TreeSpec,
    recurrence_reference,
    replay_append,
    replay_memory_bytes,
    replay_state_reference,
    replay_step_bytes,
    replay_verify,
)
from gdn_testing import make_window
from tf32_emulation import emulate_tf32

pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="tf32 emulation needs the interpreter"
)
FP32_CONTRACT = 1e-6
TWO_LAUNCH = LaunchPolicy(single_launch=False)


def head_rel(ref: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """[B, Hv] relative error of [B, Hv, ...] tensors."""
    ref, out = ref.double(), out.double()
    return (out - ref).flatten(2).norm(dim=2) / ref.flatten(2).norm(dim=2)


def run_steps(tree: TreeSpec, capacity: int, steps: int, policy=None, batch: int = 3):
    """Yields (step, output error, state error, flushed [B], checkpoint changed [B])."""
    gen = torch.Generator().manual_seed(11)
    win = make_window(parent=tree.parent, batch=batch, num_k_heads=1, num_v_heads=2,
                      gate_range=(0.3, 1.0), seed=3)  # fmt: skip
    pool, slot = win.pool, win.slot
    truth = win.state0.double()
    ring = ReplayRing.empty(win.k, win.v, win.parent, capacity)
    w = tree.num_nodes
    for step in range(steps):
        cur = make_window(parent=tree.parent, batch=batch, num_k_heads=1, num_v_heads=2,
                          gate_range=(0.3, 1.0), seed=100 + step)  # fmt: skip
        accepted = torch.randint(0, w, (batch,), generator=gen, dtype=torch.int32)
        o_ref, states = recurrence_reference(
            cur.q, cur.k, cur.v, cur.log_gate, cur.beta, truth, tree.parent
        )
        flushed = ring.flush_mask().bool()
        before = pool[slot.long()].clone()
        with emulate_tf32():
            o, vt = replay_verify(
                cur.q, cur.k, cur.v, cur.log_gate, cur.beta, pool, slot, cur.parent, ring,
                policy=policy,
            )  # fmt: skip
            replay_append(ring, cur.k, vt, cur.log_gate, cur.parent, accepted)
        truth = states[torch.arange(batch), accepted.long()].double()
        changed = (pool[slot.long()] != before).flatten(1).any(dim=1)
        have = replay_state_reference(
            pool[slot.long()], ring.k, ring.vt, ring.log_gate, ring.length
        )
        o_err = float(head_rel(o_ref.transpose(1, 2), o.transpose(1, 2)).max())
        yield step, o_err, float(head_rel(truth, have).max()), flushed, changed, ring


@pytest.mark.parametrize(
    ("tree", "capacity", "policy"),
    [
        (TreeSpec.chain(4), 8, None),  # single-launch kernel (B * Hv < 512)
        (TreeSpec.chain(4), 8, TWO_LAUNCH),  # prep + stream kernels
        (TreeSpec((2, 2, 1)), 6, TWO_LAUNCH),  # a tree: max path 4, W = 10
        (TreeSpec.chain(1), 3, None),  # T = 1: plain decode, flush every 3 steps
    ],
    ids=["chain4-1launch", "chain4-2launch", "tree221", "T1"],
)
def test_replay_steps_match_float64(tree, capacity, policy):
    n_flush = 0
    for step, o_err, s_err, flushed, changed, ring in run_steps(tree, capacity, 6, policy):
        assert o_err <= 1e-2, f"step {step}: outputs {o_err:.2e} (bf16 o, as test_kernels)"
        assert s_err <= FP32_CONTRACT, f"step {step}: checkpoint + ring state {s_err:.2e}"
        assert torch.equal(changed, flushed), f"step {step}: written {changed} != flushed {flushed}"
        assert int(ring.length.max()) <= ring.capacity
        n_flush += int(flushed.sum())
    assert n_flush > 0, "no flush in 6 steps: the test would not see the checkpoint write"


def test_memory_bytes_match_the_allocation():
    tree = TreeSpec((2, 2, 1))
    win = make_window(parent=tree.parent, batch=2, num_k_heads=2, num_v_heads=4, dk=32, dv=16)
    ring = ReplayRing.empty(win.k, win.v, win.parent, 7)
    mem = replay_memory_bytes(
        num_v_heads=4, num_k_heads=2, dk=32, dv=16, capacity=7, state_bytes=4, qk_bytes=2
    )
    held = sum(t[0].numel() * t.element_size() for t in (ring.k, ring.vt, ring.log_gate))
    assert mem["ring_bytes"] == held + ring.length.element_size()
    assert mem["checkpoint_bytes"] == win.pool[0].numel() * win.pool.element_size()
    assert ring.max_path == 4


def test_step_bytes_flush_rate_and_35b_numbers():
    kw = {"num_v_heads": 32, "num_k_heads": 16, "dk": 128, "dv": 128, "state_bytes": 4}
    mem = replay_memory_bytes(capacity=16, **kw)
    assert mem["ring_bytes"] == 329_732 and mem["checkpoint_bytes"] == 2_097_152
    step = replay_step_bytes(window_tok=4, capacity=16, max_path=4, accepted_path_tok=3, **kw)
    assert step["steps_per_flush"] == 5  # n = 0, 3, 6, 9, 12: the verify at 12 flushes
    # writes: a fifth of a checkpoint, o (bf16) + vt (fp32) of 4 tokens, 3 ring entries
    window_out = 4 * 32 * 128 * (2 + 4)
    assert step["write_bytes"] == pytest.approx(2_097_152 / 5 + window_out + 3 * 20_608)
    with pytest.raises(ValueError, match="accepted_path_tok"):
        replay_step_bytes(window_tok=4, capacity=16, max_path=4, accepted_path_tok=5, **kw)


def test_ring_must_hold_the_longest_path():
    win = make_window(parent=TreeSpec.chain(4).parent, batch=1)
    with pytest.raises(ValueError, match="capacity"):
        ReplayRing.empty(win.k, win.v, win.parent, 3)
