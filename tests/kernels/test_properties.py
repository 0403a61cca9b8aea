"""Property tests: random DFS trees up to W = 40, gates and betas near 0 and 1.

The kernels must never produce NaN or Inf and must stay within tolerance of the float64
recurrence. Shapes are tiny (one request, two value heads, d = 16) so the interpreter
stays fast; hypothesis runs derandomized so CI is reproducible.
"""

from __future__ import annotations

import torch
from capsim_kernels import (
    recurrence_reference,
    storeall_verify,
    treewy_commit,
    treewy_verify,
)
from capsim_kernels.gdn_verify.tree import TreeSpec, validate_parent
from gdn_testing import assert_close, make_window, nan_like
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

GATES = {
    "near0": (1e-6, 1e-3),  # a = exp(gate): 40 deep, L passes -500 (fp32 exp underflows)
    "near1": (0.999, 1.0),
    "mixed": (1e-6, 1.0),
}
BETAS = {"near0": (1e-6, 1e-4), "near1": (1.0 - 1e-4, 1.0 - 1e-6), "mixed": (1e-6, 1.0 - 1e-6)}


@st.composite
def dfs_trees(draw, max_nodes: int = 40):
    """Any DFS-preorder tree: each new node hangs off a node on the previous node's path."""
    num_nodes = draw(st.integers(1, max_nodes))
    parent, path = [-1], [0]
    for t in range(1, num_nodes):
        depth = draw(st.integers(0, len(path) - 1))
        del path[depth + 1 :]
        parent.append(path[-1])
        path.append(t)
    return tuple(parent)


SETTINGS = settings(
    max_examples=20,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@SETTINGS
@given(
    parent=dfs_trees(),
    gates=st.sampled_from(sorted(GATES)),
    betas=st.sampled_from(sorted(BETAS)),
    data=st.data(),
)
@example(parent=TreeSpec.chain(40).parent, gates="near0", betas="near1", data=None)
@example(parent=TreeSpec((3, 3, 3)).parent, gates="near1", betas="near0", data=None)
@example(parent=TreeSpec((3, 3, 3)).parent, gates="near0", betas="mixed", data=None)
def test_treewy_is_finite_and_exact_on_random_trees(parent, gates, betas, data, device):
    validate_parent(parent)
    win = make_window(
        parent=parent,
        batch=1,
        num_k_heads=1,
        num_v_heads=2,
        dk=16,
        dv=16,
        gate_range=GATES[gates],
        beta_range=BETAS[betas],
        device=device,
        seed=len(parent),
    )
    o_ref, states = recurrence_reference(
        win.q, win.k, win.v, win.log_gate, win.beta, win.state0, parent
    )
    o, vt = treewy_verify(
        win.q, win.k, win.v, win.log_gate, win.beta, win.pool, win.slot, win.parent,
        out=nan_like(win.v), vt=nan_like(win.v, torch.float32),
    )  # fmt: skip
    assert torch.isfinite(vt).all()
    assert_close("o", o_ref, o, 1e-2)
    a = len(parent) - 1 if data is None else data.draw(st.integers(0, len(parent) - 1))
    acc = torch.tensor([a], dtype=torch.int32, device=device)
    treewy_commit(win.pool, win.slot, win.k, vt, win.log_gate, win.parent, acc)
    assert_close("S_a", states[:, a], win.pool[win.slot.long()], 5e-3 if device == "cuda" else 1e-4)


@SETTINGS
@given(parent=dfs_trees(max_nodes=40), gates=st.sampled_from(sorted(GATES)))
@example(parent=TreeSpec((3, 3, 3)).parent, gates="near0")
def test_storeall_is_finite_on_random_trees(parent, gates, device):
    w = len(parent)
    win = make_window(
        parent=parent,
        batch=1,
        num_k_heads=1,
        num_v_heads=2,
        dk=16,
        dv=16,
        gate_range=GATES[gates],
        beta_range=BETAS["mixed"],
        extra_slots=w,
        device=device,
        seed=w,
    )
    free = [s for s in range(win.pool.shape[0]) if s != int(win.slot[0])]
    slots = torch.tensor(free[:w], dtype=torch.int32, device=device)[None]
    o_ref, states = recurrence_reference(
        win.q, win.k, win.v, win.log_gate, win.beta, win.state0, parent
    )
    o = storeall_verify(
        win.q, win.k, win.v, win.log_gate, win.beta, win.pool, win.slot, slots, win.parent,
        out=nan_like(win.v),
    )  # fmt: skip
    assert_close("o", o_ref, o, 1e-2)
    assert_close("states", states, win.pool[slots.long()], 5e-3 if device == "cuda" else 1e-4)
