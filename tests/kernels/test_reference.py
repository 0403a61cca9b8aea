"""The float64 references agree with each other and with independent oracles."""

from __future__ import annotations

import pytest
import torch
from capsim_kernels.gdn_verify.reference import (
    commit_reference,
    conv_state_commit_reference,
    conv_tree_reference,
    l2norm,
    recurrence_reference,
    treewy_reference,
)
from capsim_kernels.gdn_verify.tree import TreeSpec, ancestors, chain_parent
from gdn_testing import make_window

TREES = [TreeSpec((1, 1, 1)), TreeSpec((2, 2, 1)), TreeSpec((2, 2, 2)), TreeSpec((3, 1, 2))]


@pytest.mark.parametrize("tree", TREES, ids=lambda t: t.label)
def test_treewy_closed_form_matches_recurrence(tree):
    win = make_window(parent=tree.parent, in_dtype=torch.float64, seed=1)
    s0 = win.state0.double()
    o_rec, states = recurrence_reference(
        win.q, win.k, win.v, win.log_gate, win.beta, s0, tree.parent
    )
    o_wy, vt = treewy_reference(win.q, win.k, win.v, win.log_gate, win.beta, s0, tree.parent)
    torch.testing.assert_close(o_wy, o_rec, rtol=1e-12, atol=1e-12)
    # vt_t is the recurrence's own update vector: S_t - a_t S_p = vt_t k_t^T
    group = win.v.shape[2] // win.k.shape[2]
    kn = l2norm(win.k.double()).repeat_interleave(group, dim=2)
    par = tree.parent
    for t in range(tree.num_nodes):
        s_p = s0 if par[t] < 0 else states[:, par[t]]
        a_t = torch.exp(win.log_gate[:, t].double())[..., None, None]
        upd = states[:, t] - a_t * s_p
        vt_rec = torch.einsum("bhvk,bhk->bhv", upd, kn[:, t]) / (kn[:, t] ** 2).sum(-1)[..., None]
        torch.testing.assert_close(vt[:, t], vt_rec, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("tree", TREES, ids=lambda t: t.label)
def test_commit_rebuilds_every_node_state(tree):
    win = make_window(parent=tree.parent, in_dtype=torch.float64, batch=1, seed=2)
    s0 = win.state0.double()
    _, states = recurrence_reference(win.q, win.k, win.v, win.log_gate, win.beta, s0, tree.parent)
    _, vt = treewy_reference(win.q, win.k, win.v, win.log_gate, win.beta, s0, tree.parent)
    for a in range(tree.num_nodes):
        s_a = commit_reference(s0, win.k, vt, win.log_gate, tree.parent, [a])
        torch.testing.assert_close(s_a[0], states[0, a], rtol=1e-12, atol=1e-12)


def test_decay_follows_the_ancestor_path_not_dfs_order():
    """A cumsum of log gates over DFS positions would give sibling 4 the decay of nodes
    1..3; the reference must use only the path 0 -> 4."""
    tree = TreeSpec((2, 2))
    win = make_window(parent=tree.parent, in_dtype=torch.float64, batch=1, seed=3)
    s0 = win.state0.double()
    g = win.log_gate.clone()
    g[:, 1:4] = -30.0  # kill everything under node 1; node 4's branch must not notice
    o1, _ = treewy_reference(win.q, win.k, win.v, win.log_gate, win.beta, s0, tree.parent)
    o2, _ = treewy_reference(win.q, win.k, win.v, g, win.beta, s0, tree.parent)
    for t in (0, 4, 5, 6):
        assert ancestors(tree.parent, t)[1:2] != (1,)
        torch.testing.assert_close(o2[:, t], o1[:, t], rtol=1e-13, atol=1e-13)
    assert (o2[:, 2] - o1[:, 2]).abs().max() > 1e-3


def test_deep_chain_with_strong_decay_stays_finite():
    w = 40
    win = make_window(parent=chain_parent(w), in_dtype=torch.float64, gate_range=(1e-4, 1e-3))
    s0 = win.state0.double()
    o, vt = treewy_reference(win.q, win.k, win.v, win.log_gate, win.beta, s0, chain_parent(w))
    o_rec, _ = recurrence_reference(
        win.q, win.k, win.v, win.log_gate, win.beta, s0, chain_parent(w)
    )
    assert torch.isfinite(o).all() and torch.isfinite(vt).all()
    torch.testing.assert_close(o, o_rec, rtol=1e-10, atol=1e-12)


def test_conv_chain_matches_torch_conv1d():
    gen = torch.Generator().manual_seed(4)
    bsz, w, c, kw = 2, 6, 8, 4
    x = torch.randn(bsz, w, c, generator=gen, dtype=torch.float64)
    state = torch.randn(bsz, c, kw - 1, generator=gen, dtype=torch.float64)
    weight = torch.randn(c, kw, generator=gen, dtype=torch.float64)
    bias = torch.randn(c, generator=gen, dtype=torch.float64)
    y = conv_tree_reference(x, state, weight, bias, chain_parent(w), activation=None)
    seq = torch.cat([state, x.transpose(1, 2)], dim=2)  # [B, C, K-1+W]
    y_ref = torch.nn.functional.conv1d(seq, weight[:, None, :], bias, groups=c).transpose(1, 2)
    torch.testing.assert_close(y, y_ref, rtol=1e-12, atol=1e-12)
    new_state = conv_state_commit_reference(x, state, chain_parent(w), [w - 1, 1])
    torch.testing.assert_close(new_state[0], seq[0, :, -(kw - 1) :])
    torch.testing.assert_close(new_state[1], seq[1, :, 2 : 2 + kw - 1])


def test_conv_tree_node_sees_only_its_path():
    tree = TreeSpec((2, 2))
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(1, tree.num_nodes, 4, generator=gen, dtype=torch.float64)
    state = torch.randn(1, 4, 3, generator=gen, dtype=torch.float64)
    weight = torch.randn(4, 4, generator=gen, dtype=torch.float64)
    y = conv_tree_reference(x, state, weight, None, tree.parent)
    for leaf in (2, 3, 5, 6):
        path = list(ancestors(tree.parent, leaf))
        y_chain = conv_tree_reference(x[:, path], state, weight, None, chain_parent(len(path)))
        torch.testing.assert_close(y[:, path], y_chain)
