"""Triton device helpers shared by the GDN verify kernels (no launches here).

Conventions: ``b_`` register values, ``o_`` offsets, ``m_`` masks, ``p_`` pointers.
BW is the window padded to a power of two >= 16 (``tl.dot`` needs 16); padded rows are
their own only ancestor, carry zero inputs and are never stored.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

L2_EPS = 1e-6
# CUDA grids take at most 65,535 programs on axes 1 and 2: launches split along axis 1
MAX_GRID_Y = 65535
STATE_MATH_MODES = ("fp32", "tf32")


@dataclass(frozen=True, slots=True)
class DotPrecision:
    """``tl.dot`` input precisions of the TreeWY kernels (the accuracy contract).

    state: products with the state or the pseudo-values on one side (K S^T, Q S^T, the
    commit's Vt^T K); small: the [W, W] x [W, dv] products (both operands fp32); gram:
    products of raw q/k rows (K K^T, Q K^T). "bf16x3" splits the fp32 operand into three
    bf16 pieces (24 mantissa bits) against an operand that is exact in bf16 (raw bf16
    q/k): three exact bf16 tensor-core products with fp32 sums, fp32-grade. "tf32x3" is
    Triton's three-product split of both operands, "tf32" one product on operands rounded
    to 10 mantissa bits (~5e-4 relative per product).
    """

    state: str
    small: str
    gram: str
    native: bool  # bf16 tensor-core products run natively (False in the CPU interpreter)


def dot_precision(
    state_dtype: torch.dtype, qk_dtype: torch.dtype, state_math: str | None, device_type: str
) -> DotPrecision:
    """The contract per state dtype: an fp32 state gets fp32-grade products (``"fp32"``,
    the default); ``state_math="tf32"`` is the opt-in tf32 mode (the round-1 to round-4
    kernels). A bf16 state defaults to "tf32": its products are exact or below the
    state's own bf16 rounding (2^-9)."""
    if state_math is None:
        state_math = "fp32" if state_dtype == torch.float32 else "tf32"
    if state_math not in STATE_MATH_MODES:
        raise ValueError(f"state_math must be one of {STATE_MATH_MODES}, got {state_math!r}")
    native = device_type == "cuda"
    exact_tf32 = qk_dtype in (torch.bfloat16, torch.float16)  # <= 10 mantissa bits
    if state_math == "tf32":
        return DotPrecision("tf32", "tf32", "tf32" if exact_tf32 else "tf32x3", native)
    state = "bf16x3" if qk_dtype == torch.bfloat16 else "tf32x3"
    return DotPrecision(state, "tf32x3", "tf32" if exact_tf32 else "tf32x3", native)


def grid_chunks(num_programs: int, max_y: int = MAX_GRID_Y) -> list[tuple[int, int]]:
    """(offset, count) pieces of a grid axis of ``num_programs`` programs, each <= max_y."""
    if num_programs < 1:
        raise ValueError(f"num_programs must be >= 1, got {num_programs}")
    return [(o, min(max_y, num_programs - o)) for o in range(0, num_programs, max_y)]


@triton.jit
def _split3(x):
    """fp32 x = hi + mid + lo, three bf16 pieces (each residual is exact in fp32)."""
    hi = x.to(tl.bfloat16)
    r = x - hi.to(tl.float32)
    mid = r.to(tl.bfloat16)
    lo = (r - mid.to(tl.float32)).to(tl.bfloat16)
    return hi, mid, lo


@triton.jit
def xdot(a, b, acc, PREC: tl.constexpr, EXACT_A: tl.constexpr, NATIVE: tl.constexpr):
    """acc + a @ b in fp32 at precision PREC (DotPrecision).

    "bf16x3": the operand that is not exact in bf16 (b if EXACT_A, else a) is split into
    three bf16 pieces; the three products are exact (bf16 x bf16 in fp32) and summed in
    fp32, smallest first. Off the GPU (NATIVE False) the pieces are multiplied as fp32
    ("ieee"), the same numbers: the interpreter's bf16 products are wrong.
    """
    if PREC == "bf16x3":
        if EXACT_A:
            x = a.to(tl.bfloat16)
            p1, p2, p3 = _split3(b.to(tl.float32))
            if NATIVE:
                acc = tl.dot(x, p3, acc)
                acc = tl.dot(x, p2, acc)
                acc = tl.dot(x, p1, acc)
            else:
                xf = x.to(tl.float32)
                acc = tl.dot(xf, p3.to(tl.float32), acc, input_precision="ieee")
                acc = tl.dot(xf, p2.to(tl.float32), acc, input_precision="ieee")
                acc = tl.dot(xf, p1.to(tl.float32), acc, input_precision="ieee")
        else:
            y = b.to(tl.bfloat16)
            p1, p2, p3 = _split3(a.to(tl.float32))
            if NATIVE:
                acc = tl.dot(p3, y, acc)
                acc = tl.dot(p2, y, acc)
                acc = tl.dot(p1, y, acc)
            else:
                yf = y.to(tl.float32)
                acc = tl.dot(p3.to(tl.float32), yf, acc, input_precision="ieee")
                acc = tl.dot(p2.to(tl.float32), yf, acc, input_precision="ieee")
                acc = tl.dot(p1.to(tl.float32), yf, acc, input_precision="ieee")
    else:
        acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision=PREC)
    return acc


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
def tile_coords(tile, NV: tl.constexpr, HV: tl.constexpr, H: tl.constexpr, BV: tl.constexpr,
                V: tl.constexpr):  # fmt: skip
    """(i_v, i_bh, i_b, i_h, i_hk, o_v, m_v) of a persistent kernel's tile =
    (request * HV + value head) * NV + dv tile (``tile`` a tensor, also in the interpreter)."""
    i_v, i_bh = tile % NV, tile // NV
    i_b, i_h = i_bh // HV, i_bh % HV
    o_v = i_v * BV + tl.arange(0, BV)
    return i_v, i_bh, i_b, i_h, i_h // (HV // H), o_v, o_v < V


@triton.jit
def packed_rows(P: tl.constexpr, HALF: tl.constexpr, W: tl.constexpr):
    """(o_p, is_k, node, m_node) of the single-launch kernels' packed [P = 2 * HALF] rows:
    rows < HALF hold the keys of nodes 0.., rows >= HALF the queries of the same nodes."""
    o_p = tl.arange(0, P)
    is_k = o_p < HALF
    node = tl.where(is_k, o_p, o_p - HALF)
    return o_p, is_k, node, node < W


def pick_block_v(num_heads_total: int, dv: int, widest: int = 32) -> int:
    """dv tile of the streaming, commit and single-launch kernels: ``widest`` rows, halved
    (down to 16) while B * Hv heads times the dv tiles leave fewer than ~512 programs."""
    bv = min(widest, triton.next_power_of_2(dv))
    while bv > 16 and num_heads_total * triton.cdiv(dv, bv) < 512:
        bv //= 2
    return bv


def pad_window(num_nodes: int) -> tuple[int, int]:
    """(BW, log2 BW): the window padded to a power of two, at least 16."""
    bw = max(16, triton.next_power_of_2(num_nodes))
    return bw, bw.bit_length() - 1


@triton.jit
def path_scale(p_parent, p_g, i_a, W: tl.constexpr, BW: tl.constexpr, STRIDE_G):
    """(coef [BW], log gamma_a) for accepted node ``i_a`` without a [BW, BW] mask.

    Walks parent pointers from ``i_a`` to the root (depth <= W scalar loads from L1),
    then L_a - L_i = the sum of the path's log gates after i (DFS preorder: every path
    node after i is a descendant of i). coef_i = exp(L_a - L_i) on the path, 0
    elsewhere; i_a outside [0, W) (``-1``: nothing to apply) gives coef = 0, L_a = 0.
    ``p_g`` points at the gate of node 0 of this (request, head); node t's gate is at
    p_g + t * STRIDE_G.
    """
    o_w = tl.arange(0, BW)
    ok = (i_a >= 0) & (i_a < W)
    i_cur = tl.where(ok, i_a, -1)
    n_path = tl.where(o_w == i_cur, 1, 0)
    # at most W - 1 steps, each to a smaller index in [0, W): a malformed parent array
    # (rejected on the host, tree.validate_parent) cannot make this loop run forever
    n_step = 0
    while (i_cur > 0) & (n_step < W):
        i_nxt = tl.load(p_parent + i_cur)
        i_cur = tl.where((i_nxt >= 0) & (i_nxt < i_cur), i_nxt, -1)
        n_path += tl.where(o_w == i_cur, 1, 0)
        n_step += 1
    m_path = n_path > 0
    b_g = tl.load(p_g + o_w * STRIDE_G, mask=m_path & (o_w < W), other=0.0).to(tl.float32)
    b_la = tl.sum(b_g, 0)
    # L_a - L_i as the sum of the path's gates after i (a [BW, BW] masked row sum), not a
    # difference of two cumsums: that difference carries eps * |L_a| of absolute error in
    # the exponent, which grew with the depth (round 5: 3e-6 at depth 39, gates 0.3-1)
    b_seg = tl.sum(tl.where(o_w[None, :] > o_w[:, None], b_g[None, :], 0.0), 1)
    b_coef = tl.where(m_path, tl.exp(b_seg), 0.0)
    return b_coef, b_la


@triton.jit
def chain_scale(p_g, i_a, W: tl.constexpr, BW: tl.constexpr, STRIDE_G):
    """``path_scale`` for a chain (entries 0..i_a, e.g. a replay ring): no parent walk.

    coef_i = exp(sum of the gates after i up to i_a) for i <= min(i_a, W - 1), 0
    elsewhere; i_a = -1 (empty ring) gives coef = 0 and L_a = 0.
    """
    o_w = tl.arange(0, BW)
    m_path = (o_w <= i_a) & (o_w < W)
    b_g = tl.load(p_g + o_w * STRIDE_G, mask=m_path, other=0.0).to(tl.float32)
    b_la = tl.sum(b_g, 0)
    b_seg = tl.sum(tl.where(o_w[None, :] > o_w[:, None], b_g[None, :], 0.0), 1)
    b_coef = tl.where(m_path, tl.exp(b_seg), 0.0)
    return b_coef, b_la


@triton.jit
def path_mask(p_parent, i_a, W: tl.constexpr, BW: tl.constexpr):
    """Bool [BW]: node i is on the root-to-``i_a`` path (none if i_a is outside [0, W)).
    At most W - 1 parent loads, each to a smaller index (a malformed array cannot loop)."""
    o_w = tl.arange(0, BW)
    ok = (i_a >= 0) & (i_a < W)
    i_cur = tl.where(ok, i_a, -1)
    n_path = tl.where(o_w == i_cur, 1, 0)
    n_step = 0
    while (i_cur > 0) & (n_step < W):
        i_nxt = tl.load(p_parent + i_cur)
        i_cur = tl.where((i_nxt >= 0) & (i_nxt < i_cur), i_nxt, -1)
        n_path += tl.where(o_w == i_cur, 1, 0)
        n_step += 1
    return n_path > 0


@triton.jit
def segment_log_decay(m_anc, b_g, NATIVE: tl.constexpr):
    """D[t, i] = L_t - L_i, summed over the path (i, t] only, for ancestor-or-self pairs.

    ``m_anc`` [P, P] bool (row t, column i: i is an ancestor of or is t), ``b_g`` [P] the
    log gate of column node j (0 for columns that are not nodes). D = A @ G with
    G[j, i] = g_j where j is not an ancestor-or-self of i: the sum runs over the gates
    strictly between i and t on t's path, so its rounding is relative to that segment,
    not to |L_t| (forming L_t - L_i from two path sums loses eps * |L_t| absolute in the
    exponent, i.e. relative error growing with depth for fast-decaying gates). A is 0/1
    (exact in bf16), G is split into three bf16 pieces ("bf16x3", exact products, fp32
    sums). Entries off the ancestor pairs are meaningless (callers mask them).
    """
    b_af = m_anc.to(tl.float32)
    b_rhs = tl.where(tl.trans(b_af) > 0.5, 0.0, b_g[:, None])  # [j, i]
    return xdot(b_af, b_rhs, tl.zeros_like(b_af), "bf16x3", True, NATIVE)


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


@triton.jit
def _n_block(p_n, r0, c0, W: tl.constexpr):
    """[16, 16] block of the row-major [W, W] matrix at ``p_n`` (rows r0.., cols c0..)."""
    o = tl.arange(0, 16)
    m = ((r0 + o) < W)[:, None] & ((c0 + o) < W)[None, :]
    return tl.load(p_n + (r0 + o)[:, None] * W + (c0 + o)[None, :], mask=m, other=0.0)


@triton.jit
def _diag_step_t(b_dt, p_n, r0, i, W: tl.constexpr):
    """Step i of the transposed substitution for the diagonal block at r0 (Dt = D^T):
    Dt[:, i] = e_i - Dt @ N[i, :i], a reduction along the second axis (within a warp)."""
    o = tl.arange(0, 16)
    o_c = o[None, :] + 0 * o[:, None]  # [16, 16] column index: no 1-D layout to convert
    m = (o_c < i) & ((r0 + o_c) < W) & (r0 + i < W)
    # N[r0 + i, r0 + m] loaded straight into every row of the tile (L1 broadcast)
    b_a = tl.load(p_n + (r0 + i) * W + r0 + o_c, mask=m, other=0.0)
    b_new = tl.sum(b_dt * b_a, 1)
    return tl.where(o_c == i, b_dt - b_new[:, None], b_dt)


@triton.jit
def _store_block(p_n, b_x, p_beta, r0, c0, W: tl.constexpr, STRIDE_B):
    o = tl.arange(0, 16)
    m_c = (c0 + o) < W
    b_beta = tl.load(p_beta + (c0 + o) * STRIDE_B, mask=m_c, other=0.0)
    m = ((r0 + o) < W)[:, None] & m_c[None, :]
    tl.store(p_n + (r0 + o)[:, None] * W + (c0 + o)[None, :], b_x * b_beta[None, :], mask=m)


@triton.jit
def unit_lower_inverse_blocked(p_n, p_beta, W: tl.constexpr, STRIDE_B):
    """(I + N)^-1 diag(beta) in place of N, for N strictly lower triangular, W <= 64.

    ``p_n`` holds N as a row-major [W, W] fp32 matrix this program has written (behind a
    barrier; zero on and above the diagonal). Blocked forward substitution on 16 x 16
    blocks: the four diagonal blocks are inverted together by a 15-step substitution (a
    transposed [16, 16] tile each, reduced within a warp, N's row loaded straight into
    the tile's layout), then the off-diagonal blocks of T = (I + N)^-1 follow exactly,
    X_rc = -D_r sum_{c <= m < r} N_rm X_mc (ten fp32 16 x 16 products in
    "ieee" precision: the same arithmetic as a serial substitution, no Neumann series).
    T[i, j] beta_j is written over N (upper blocks stay zero); beta of node j is at
    p_beta + j * STRIDE_B. Blocks past W are masked (identity, never stored).
    """
    o = tl.arange(0, 16)
    b_eye = (o[:, None] == o[None, :]).to(tl.float32)
    b_d1 = b_eye
    b_d2 = b_eye
    b_d3 = b_eye
    b_d4 = b_eye
    for i in range(1, 16):
        b_d1 = _diag_step_t(b_d1, p_n, 0, i, W)
        b_d2 = _diag_step_t(b_d2, p_n, 16, i, W)
        b_d3 = _diag_step_t(b_d3, p_n, 32, i, W)
        b_d4 = _diag_step_t(b_d4, p_n, 48, i, W)
    b_d1 = tl.trans(b_d1)
    b_d2 = tl.trans(b_d2)
    b_d3 = tl.trans(b_d3)
    b_d4 = tl.trans(b_d4)
    b_n21 = _n_block(p_n, 16, 0, W)
    b_n31 = _n_block(p_n, 32, 0, W)
    b_n32 = _n_block(p_n, 32, 16, W)
    b_n41 = _n_block(p_n, 48, 0, W)
    b_n42 = _n_block(p_n, 48, 16, W)
    b_n43 = _n_block(p_n, 48, 32, W)
    b_x21 = -tl.dot(b_d2, tl.dot(b_n21, b_d1, input_precision="ieee"), input_precision="ieee")
    b_x32 = -tl.dot(b_d3, tl.dot(b_n32, b_d2, input_precision="ieee"), input_precision="ieee")
    b_x43 = -tl.dot(b_d4, tl.dot(b_n43, b_d3, input_precision="ieee"), input_precision="ieee")
    b_y31 = tl.dot(b_n31, b_d1, input_precision="ieee")
    b_y31 = tl.dot(b_n32, b_x21, b_y31, input_precision="ieee")
    b_x31 = -tl.dot(b_d3, b_y31, input_precision="ieee")
    b_y42 = tl.dot(b_n42, b_d2, input_precision="ieee")
    b_y42 = tl.dot(b_n43, b_x32, b_y42, input_precision="ieee")
    b_x42 = -tl.dot(b_d4, b_y42, input_precision="ieee")
    b_y41 = tl.dot(b_n41, b_d1, input_precision="ieee")
    b_y41 = tl.dot(b_n42, b_x21, b_y41, input_precision="ieee")
    b_y41 = tl.dot(b_n43, b_x31, b_y41, input_precision="ieee")
    b_x41 = -tl.dot(b_d4, b_y41, input_precision="ieee")
    tl.debug_barrier()  # every read of N is done before T overwrites it
    _store_block(p_n, b_d1, p_beta, 0, 0, W, STRIDE_B)
    _store_block(p_n, b_d2, p_beta, 16, 16, W, STRIDE_B)
    _store_block(p_n, b_d3, p_beta, 32, 32, W, STRIDE_B)
    _store_block(p_n, b_d4, p_beta, 48, 48, W, STRIDE_B)
    _store_block(p_n, b_x21, p_beta, 16, 0, W, STRIDE_B)
    _store_block(p_n, b_x31, p_beta, 32, 0, W, STRIDE_B)
    _store_block(p_n, b_x32, p_beta, 32, 16, W, STRIDE_B)
    _store_block(p_n, b_x41, p_beta, 48, 0, W, STRIDE_B)
    _store_block(p_n, b_x42, p_beta, 48, 16, W, STRIDE_B)
    _store_block(p_n, b_x43, p_beta, 48, 32, W, STRIDE_B)
