"""Triton device helpers shared by the GDN verify kernels (no launches here).

Conventions: ``b_`` register values, ``o_`` offsets, ``m_`` masks, ``p_`` pointers.
BW is the window padded to a power of two >= 16 (``tl.dot`` needs 16); padded rows are
their own only ancestor, carry zero inputs and are never stored.
"""

from __future__ import annotations

import triton
import triton.language as tl

L2_EPS = 1e-6


@triton.jit
def ancestor_mask(p_parent, W: tl.constexpr, BW: tl.constexpr, LOG2_BW: tl.constexpr):
    """Bool [BW, BW]: A[t, i] = i is an ancestor of t or t itself.

    Built from the one-hot parent matrix P as sum_j P^j by doubling
    (S_2m = S_m + P^m S_m) with ``tl.dot``: every power of P has 0/1 entries and the
    ranges of path lengths never overlap, so fp16 products are exact. No serial walk
    of dependent loads, so the cost is log2(BW) tiny tensor-core products.
    """
    o_w = tl.arange(0, BW)
    b_par = tl.load(p_parent + o_w, mask=o_w < W, other=-1)
    b_p = (b_par[:, None] == o_w[None, :]).to(tl.float16)  # [BW, BW] one-hot
    b_s = b_p + (o_w[:, None] == o_w[None, :]).to(tl.float16)  # I + P
    b_q = b_p
    for _ in tl.static_range(LOG2_BW - 1):
        b_q = tl.dot(b_q, b_q).to(tl.float16)
        b_s = (b_s.to(tl.float32) + tl.dot(b_q, b_s)).to(tl.float16)
    return b_s > 0.5


def pad_window(num_nodes: int) -> tuple[int, int]:
    """(BW, log2 BW): the window padded to a power of two, at least 16."""
    bw = max(16, triton.next_power_of_2(num_nodes))
    return bw, bw.bit_length() - 1


@triton.jit
def path_scale(p_parent, p_g, i_a, W: tl.constexpr, BW: tl.constexpr, STRIDE_G):
    """(coef [BW], log gamma_a) for accepted node ``i_a`` without a [BW, BW] mask.

    Walks parent pointers from ``i_a`` to the root (depth <= W scalar loads from L1),
    then L_i = cumsum of the path's log gates (DFS preorder: every path node before i
    is an ancestor of i). coef_i = exp(L_a - L_i) on the path, 0 elsewhere; i_a outside
    [0, W) (``-1``: nothing to apply) gives coef = 0 and L_a = 0. ``p_g`` points at the
    gate of node 0 of this (request, head); node t's gate is at p_g + t * STRIDE_G.
    """
    o_w = tl.arange(0, BW)
    ok = (i_a >= 0) & (i_a < W)
    i_cur = tl.where(ok, i_a, -1)
    n_path = tl.where(o_w == i_cur, 1, 0)
    while i_cur > 0:
        i_cur = tl.load(p_parent + i_cur)
        n_path += tl.where(o_w == i_cur, 1, 0)
    m_path = n_path > 0
    b_g = tl.load(p_g + o_w * STRIDE_G, mask=m_path & (o_w < W), other=0.0).to(tl.float32)
    b_lg = tl.cumsum(b_g, 0)
    b_la = tl.sum(b_g, 0)
    b_coef = tl.where(m_path, tl.exp(tl.where(m_path, b_la - b_lg, 0.0)), 0.0)
    return b_coef, b_la


@triton.jit
def unit_lower_inverse_t(p_n, W: tl.constexpr, BW: tl.constexpr):
    """Transposed (I + N)^-1 for N strictly lower triangular, read row by row from memory.

    ``p_n`` points at N as a row-major [W, W] fp32 matrix this program has written
    (behind a barrier). Forward substitution T[t, :] = e_t - N[t, :t] T[:t, :] on the
    transpose Tt = T^T: step t is Tt[:, t] -= Tt @ N[t, :], a reduction along the
    second axis (within a warp) with N's row loaded straight into that axis' layout, so
    no cross-warp reduction or layout change in the W - 1 serial steps.
    """
    o_w = tl.arange(0, BW)
    b_tt = (o_w[:, None] == o_w[None, :]).to(tl.float32)
    for t in range(1, W):
        b_nrow = tl.load(p_n + t * W + o_w, mask=o_w < t, other=0.0)  # N[t, i]
        b_new = tl.sum(b_tt * b_nrow[None, :], 1)  # [BW] over j
        b_tt = tl.where(o_w[None, :] == t, b_tt - b_new[:, None], b_tt)
    return b_tt
