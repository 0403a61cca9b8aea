"""Short causal conv1d (kernel 4) over a draft tree: each node's window is its ancestor path.

GDN layers run a depthwise causal conv over the q/k/v channels before the recurrence.
In a tree the K-1 inputs that precede node t are its ancestors (nearest first), not the
preceding DFS indices; when the path is shorter than K-1 the rest comes from the
request's conv state, which holds the last K-1 committed inputs (oldest in column 0).

Layouts: x [B, W, C]; conv_state pool [num_slots, C, K-1]; weight [C, K] (column K-1
multiplies the newest input); bias [C] or None. Bytes: x read and y written (W*C*2
each), conv state read (C*(K-1)*s), weights read; ``conv_tree_commit`` writes the K-1
inputs of the accepted path back into the conv state.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["conv_tree_commit", "conv_tree_update"]


@triton.jit
def _path_input(x, conv_state, parent, i_b, i_slot, o_c, m_c, node, n_hist, W, C, KS):
    """Input at the current point of the walk up the path and the walk's next position."""
    # scalar conditions are broadcast over the channel block before entering a mask
    b_node = o_c * 0 + node  # [BC]
    b_col = o_c * 0 + (KS - 1 - n_hist)  # newest unused history column
    valid = node >= 0
    i_node = tl.maximum(node, 0)
    b_x = tl.load(
        x + (i_b * W + i_node).to(tl.int64) * C + o_c, mask=m_c & (b_node >= 0), other=0.0
    )
    b_h = tl.load(
        conv_state + (i_slot * C + o_c) * KS + tl.maximum(b_col, 0),
        mask=m_c & (b_node < 0) & (b_col >= 0),
        other=0.0,
    )
    b_val = tl.where(valid, b_x.to(tl.float32), b_h.to(tl.float32))
    i_next = tl.load(parent + i_node)
    node = tl.where(valid, i_next, -1)
    n_hist = tl.where(valid, n_hist, n_hist + 1)
    return b_val, node, n_hist


@triton.jit
def conv_tree_update_kernel(
    x,
    conv_state,
    state_slot,
    weight,
    bias,
    parent,
    y,
    W: tl.constexpr,
    C: tl.constexpr,
    KW: tl.constexpr,
    BC: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    SILU: tl.constexpr,
):
    i_c, i_b = tl.program_id(0), tl.program_id(1)
    o_c = i_c * BC + tl.arange(0, BC)
    m_c = o_c < C
    i_slot = tl.load(state_slot + i_b).to(tl.int64)
    for t in range(W):
        b_acc = tl.zeros([BC], dtype=tl.float32)
        if HAS_BIAS:
            b_acc += tl.load(bias + o_c, mask=m_c, other=0.0).to(tl.float32)
        node = t
        n_hist = 0
        for j in tl.static_range(KW):  # j = 0 is the newest input (node t itself)
            b_val, node, n_hist = _path_input(
                x, conv_state, parent, i_b, i_slot, o_c, m_c, node, n_hist, W, C, KW - 1
            )
            b_w = tl.load(weight + o_c * KW + (KW - 1 - j), mask=m_c, other=0.0).to(tl.float32)
            b_acc += b_w * b_val
        if SILU:
            b_acc = b_acc * tl.sigmoid(b_acc)
        tl.store(y + (i_b * W + t).to(tl.int64) * C + o_c, b_acc.to(y.dtype.element_ty), mask=m_c)


@triton.jit
def conv_tree_commit_kernel(
    x,
    conv_state,
    state_slot,
    parent,
    accepted,
    W: tl.constexpr,
    C: tl.constexpr,
    KS: tl.constexpr,
    BKS: tl.constexpr,
    BC: tl.constexpr,
):
    i_c, i_b = tl.program_id(0), tl.program_id(1)
    o_c = i_c * BC + tl.arange(0, BC)
    m_c = o_c < C
    o_j = tl.arange(0, BKS)
    i_slot = tl.load(state_slot + i_b).to(tl.int64)
    node = tl.load(accepted + i_b)
    n_hist = 0
    b_new = tl.zeros([BC, BKS], dtype=tl.float32)
    for j in tl.static_range(KS):  # fill columns newest (KS-1) to oldest (0)
        b_val, node, n_hist = _path_input(
            x, conv_state, parent, i_b, i_slot, o_c, m_c, node, n_hist, W, C, KS
        )
        b_new = tl.where(o_j[None, :] == KS - 1 - j, b_val[:, None], b_new)
    # every read above happens before this in-place write
    p_st = conv_state + (i_slot * C + o_c[:, None]) * KS + o_j[None, :]
    tl.store(p_st, b_new.to(conv_state.dtype.element_ty), mask=m_c[:, None] & (o_j[None, :] < KS))


def _check(x, conv_state, state_slot, parent):
    if x.dim() != 3:
        raise ValueError(f"x must be [B, W, C], got {tuple(x.shape)}")
    bsz, w, c = x.shape
    if conv_state.dim() != 3 or conv_state.shape[1] != c or conv_state.shape[2] < 1:
        raise ValueError(f"conv_state must be [num_slots, C={c}, K-1], got {conv_state.shape}")
    if state_slot.shape != (bsz,) or state_slot.dtype != torch.int32:
        raise ValueError(f"state_slot must be int32 [B={bsz}], got {state_slot.shape}")
    if parent.shape != (w,) or parent.dtype != torch.int32:
        raise ValueError(f"parent must be int32 [W={w}], got {parent.dtype} {parent.shape}")
    return bsz, w, c


def conv_tree_update(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    state_slot: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    parent: torch.Tensor,
    activation: str | None = "silu",
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Tree conv1d over a window; conv_state is read, not modified. Returns y like x."""
    bsz, w, c = _check(x, conv_state, state_slot, parent)
    kw = conv_state.shape[2] + 1
    if weight.shape != (c, kw):
        raise ValueError(f"weight must be [C={c}, K={kw}], got {tuple(weight.shape)}")
    if bias is not None and bias.shape != (c,):
        raise ValueError(f"bias must be [C={c}], got {tuple(bias.shape)}")
    if activation not in (None, "silu"):
        raise ValueError(f"activation must be None or 'silu', got {activation!r}")
    y = torch.empty_like(x) if out is None else out
    bc = min(256, triton.next_power_of_2(c))
    conv_tree_update_kernel[(triton.cdiv(c, bc), bsz)](
        x,
        conv_state,
        state_slot,
        weight,
        bias if bias is not None else weight,
        parent,
        y,
        W=w,
        C=c,
        KW=kw,
        BC=bc,
        HAS_BIAS=bias is not None,
        SILU=activation == "silu",
    )
    return y


def conv_tree_commit(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    state_slot: torch.Tensor,
    parent: torch.Tensor,
    accepted: torch.Tensor,
) -> None:
    """In place: conv_state[state_slot[b]] <- the last K-1 inputs of accepted[b]'s path."""
    bsz, w, c = _check(x, conv_state, state_slot, parent)
    if accepted.shape != (bsz,) or accepted.dtype != torch.int32:
        raise ValueError(f"accepted must be int32 [B={bsz}], got {accepted.shape}")
    ks = conv_state.shape[2]
    bc = min(256, triton.next_power_of_2(c))
    conv_tree_commit_kernel[(triton.cdiv(c, bc), bsz)](
        x,
        conv_state,
        state_slot,
        parent,
        accepted,
        W=w,
        C=c,
        KS=ks,
        BKS=triton.next_power_of_2(ks),
        BC=bc,
    )
