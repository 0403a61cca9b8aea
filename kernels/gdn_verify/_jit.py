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
def l2norm_rows(b_x):
    """Rows of [R, K] divided by sqrt(|row|^2 + 1e-6)."""
    return b_x * tl.rsqrt(tl.sum(b_x * b_x, 1) + 1e-6)[:, None]


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


@triton.jit
def unit_lower_inverse(b_n, W: tl.constexpr, BW: tl.constexpr):
    """(I + N)^-1 for N [BW, BW] strictly lower triangular, by forward substitution.

    Row t of the inverse is e_t - sum_{i<t} N[t, i] T[i, :]; W - 1 serial steps of
    O(BW^2) register work (exact fp32, no cancellation-prone power series).
    """
    o_w = tl.arange(0, BW)
    b_t = (o_w[:, None] == o_w[None, :]).to(tl.float32)
    for t in range(1, W):
        m_row = o_w[:, None] == t
        b_nrow = tl.sum(tl.where(m_row, b_n, 0.0), 0)  # [BW] over i: N[t, i]
        b_new = tl.sum(b_nrow[:, None] * b_t, 0)  # [BW] over j: sum_i N[t, i] T[i, j]
        b_t = tl.where(m_row, b_t - b_new[None, :], b_t)
    return b_t


@triton.jit
def path_coefficients(b_anc, b_lg, i_a, BW: tl.constexpr):
    """For accepted node a: (coef [BW], log gamma_a) with coef_i = exp(L_a - L_i) on the
    path root..a and 0 elsewhere. ``b_lg`` [BW] holds the cumulative log gates L."""
    o_w = tl.arange(0, BW)
    m_a = o_w == i_a
    b_la = tl.sum(tl.where(m_a, b_lg, 0.0), 0)
    m_path = tl.sum(tl.where(m_a[:, None] & b_anc, 1, 0), 0) > 0  # [BW] over i
    b_coef = tl.where(m_path, tl.exp(tl.where(m_path, b_la - b_lg, 0.0)), 0.0)
    return b_coef, b_la


def pad_window(num_nodes: int) -> tuple[int, int]:
    """(BW, log2 BW): the window padded to a power of two, at least 16."""
    bw = max(16, triton.next_power_of_2(num_nodes))
    return bw, bw.bit_length() - 1


@triton.jit
def path_update(
    b_vt,
    b_k,
    b_coef,
    W: tl.constexpr,
    BW: tl.constexpr,
    BV: tl.constexpr,
    BK: tl.constexpr,
    SMALL_PREC: tl.constexpr,
):
    """sum_i coef_i vt_i k_i^T as [BV, BK] (vt [BW, BV], k [BW, BK], coef [BW]).

    Windows of 16 use one ``tl.dot``. Larger windows add rank-1 updates for the nodes on
    the path only (coef != 0): a [BV, BW] x [BW, BK] product beside the verify's own
    products needs more shared memory than an H200 block has (270 KB seen at BW = 64).
    """
    if BW <= 16:
        b_acc = tl.dot(tl.trans(b_vt * b_coef[:, None]), b_k, input_precision=SMALL_PREC)
    else:
        o_w = tl.arange(0, BW)
        b_acc = tl.zeros([BV, BK], dtype=tl.float32)
        for i in range(W):
            m_i = o_w == i
            b_ci = tl.sum(tl.where(m_i, b_coef, 0.0), 0)
            if b_ci != 0.0:
                b_vti = tl.sum(tl.where(m_i[:, None], b_vt, 0.0), 0)  # [BV]
                b_ki = tl.sum(tl.where(m_i[:, None], b_k, 0.0), 0)  # [BK]
                b_acc += (b_ci * b_vti)[:, None] * b_ki[None, :]
    return b_acc
