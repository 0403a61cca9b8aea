"""TreeWY verification and commit kernels (SPEC.md section 2, variants of section 3).

``treewy_verify`` computes every window output in closed form from the committed state
S_0 and writes only the pseudo-values ``vt`` (W x dv per head, not W states);
``treewy_commit`` rebuilds the accepted node's state in place::

    A        = ancestor-or-self mask of the tree               [BW, BW]  (tl.dot doubling)
    L        = A @ log_gate      (log gamma along the path, never a division)
    N[t, i]  = b_t exp(L_t - L_i) (k_t . k_i),  i strict ancestor of t
    Vt       = (I + N)^-1 (b * (v - exp(L) * (K S_0^T)))      [BW, BV]
    O        = exp(L) * (Q S_0^T) + (A * exp(L_t - L_i) * Q K^T) @ Vt
    S_a      = exp(L_a) S_0 + sum_{i <= a} exp(L_a - L_i) vt_i k_i^T

Verify is two launches (second GPU round, kernels/BENCHMARKS.md): the window math of one
(request, value head) runs once in ``treewy_prep_kernel`` (ancestor mask, forward
substitution, blocked on 16 x 16 tiles for 16 < W <= 64 since round 3, decay-weighted
products; [W, W] fp32 results, tiny next to a state), and
``treewy_stream_kernel`` does only the state-sized work per (request, value head, dv
tile): K S^T and Q S^T on raw bf16 q, k (the l2-norms become per-row scales), two
[W, W] x [W, BV] products and the stores, BKC keys at a time (<= ~140 registers).
``treewy_commit_kernel`` walks the accepted node's path (no [W, W] mask) and streams
the state the same way.

Bytes per (request, value head): verify reads S_0 (dv*dk*s), q/k (W*dk*2 each, shared by
Hv/Hk heads), v (W*dv*2), gates and betas (W*4 each) and writes o (W*dv*2) and vt
(W*dv*4), plus 2*W*W*4 scratch written once and read per dv tile (from L2); commit
reads S_0, k, vt and gates and writes one state.

The streaming kernel, with compile-time flags, also gives the fused verify+commit and
the deferred-commit variants (``treewy_fused.py``). Nothing runs at import.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._jit import (
    ancestor_mask,
    dot_precision,
    grid_chunks,
    pad_window,
    path_scale,
    pick_block_v,
    unit_lower_inverse_blocked,
    unit_lower_inverse_t,
    xdot,
)
from .policy import DEFAULT_POLICY, LaunchPolicy
from .tree import validate_parent
from .treewy_small import launch_small

__all__ = ["treewy_commit", "treewy_verify"]

# Accuracy contract (round 5, _jit.dot_precision): with an fp32 state, S_0 q, S_0 k and
# the commit's Vt^T K run as three exact bf16 products against the raw bf16 q/k
# ("bf16x3"), the [W, W] x [W, BV] products in "tf32x3"; ``state_math="tf32"`` is the
# opt-in tf32 mode of rounds 1-4 (fp32 states 5e-4 to 1e-3 off float64, round-4 run 4).
# The per-head K K^T and Q K^T take raw bf16 operands, exact in tf32 (fp32 sums).
# key-dimension chunk of the per-head window kernel
PREP_BLOCK_K = 32
# Launch configurations (warps, tiles, key chunks, the single-launch policy): policy.py,
# passed as ``policy=`` (default DEFAULT_POLICY).


@triton.jit
def treewy_prep_kernel(
    q,
    k,
    g,
    beta,
    parent,
    m1,
    pm,
    ck,
    cq,
    scale,
    H: tl.constexpr,
    HV: tl.constexpr,
    W: tl.constexpr,
    K: tl.constexpr,
    BW: tl.constexpr,
    LOG2_BW: tl.constexpr,
    BK: tl.constexpr,
    BKC: tl.constexpr,
    PREC: tl.constexpr,
    BLOCKED: tl.constexpr,
):
    """The window's [W, W] quantities of one (request, value head), once per head.

    m1 = (I + N)^-1 diag(beta), pm = decay-masked Q_n K_n^T (scale included), ck =
    gamma / |k| and cq = gamma * scale / |q| (the l2-norm as a per-row scale of the raw
    products K S^T and Q S^T that the streaming kernel computes). The raw q, k are bf16,
    exact in tf32, so K K^T and Q K^T are fp32-accurate on tensor cores.
    """
    i_bh = tl.program_id(0)
    i_b, i_h = i_bh // HV, i_bh % HV
    i_hk = i_h // (HV // H)
    o_w = tl.arange(0, BW)
    m_w = o_w < W
    o_row = ((i_b * W + o_w[:, None]).to(tl.int64) * H + i_hk) * K
    o_wh = (i_b * W + o_w).to(tl.int64) * HV + i_h
    b_g = tl.load(g + o_wh, mask=m_w, other=0.0).to(tl.float32)
    b_anc = ancestor_mask(parent, W, BW, LOG2_BW)  # [BW, BW] bool
    b_lg = tl.sum(tl.where(b_anc, b_g[None, :], 0.0), 1)  # L_t
    b_dec = tl.where(b_anc, tl.exp(tl.where(b_anc, b_lg[:, None] - b_lg[None, :], 0.0)), 0.0)
    o_ww = i_bh.to(tl.int64) * W * W + o_w[:, None] * W + o_w[None, :]
    m_ww = m_w[:, None] & m_w[None, :]

    # pass 1 over the keys: Q K^T and both norms (one [BW, BW] accumulator live)
    b_qk = tl.zeros([BW, BW], dtype=tl.float32)
    b_k2 = tl.zeros([BW], dtype=tl.float32)
    b_q2 = tl.zeros([BW], dtype=tl.float32)
    for i_kc in range(0, BK, BKC):
        o_k = i_kc + tl.arange(0, BKC)
        m_wk = m_w[:, None] & (o_k < K)[None, :]
        b_k = tl.load(k + o_row + o_k[None, :], mask=m_wk, other=0.0).to(tl.float32)
        b_q = tl.load(q + o_row + o_k[None, :], mask=m_wk, other=0.0).to(tl.float32)
        b_k2 += tl.sum(b_k * b_k, 1)
        b_q2 += tl.sum(b_q * b_q, 1)
        b_qk += tl.dot(b_q, tl.trans(b_k), input_precision=PREC)
    b_rk = tl.rsqrt(b_k2 + 1e-6)
    b_rq = tl.rsqrt(b_q2 + 1e-6) * scale
    tl.store(pm + o_ww, b_rq[:, None] * b_dec * b_qk * b_rk[None, :], mask=m_ww)
    b_gam = tl.exp(b_lg)
    o_bw = i_bh.to(tl.int64) * W + o_w
    tl.store(ck + o_bw, b_gam * b_rk, mask=m_w)
    tl.store(cq + o_bw, b_gam * b_rq, mask=m_w)

    # pass 2: K K^T (q/k rows are L1/L2-resident now)
    b_kk = tl.zeros([BW, BW], dtype=tl.float32)
    for i_kc in range(0, BK, BKC):
        o_k = i_kc + tl.arange(0, BKC)
        m_wk = m_w[:, None] & (o_k < K)[None, :]
        b_k = tl.load(k + o_row + o_k[None, :], mask=m_wk, other=0.0).to(tl.float32)
        b_kk += tl.dot(b_k, tl.trans(b_k), input_precision=PREC)
    b_beta = tl.load(beta + o_wh, mask=m_w, other=0.0).to(tl.float32)
    m_strict = b_anc & (o_w[:, None] != o_w[None, :])
    b_n = tl.where(m_strict, (b_beta * b_rk)[:, None] * b_dec * b_kk * b_rk[None, :], 0.0)
    # N goes through m1's buffer (L1-resident), read back one row per substitution step
    tl.store(m1 + o_ww, b_n, mask=m_ww)
    tl.debug_barrier()
    if BLOCKED and BW >= 32 and BW <= 64:
        # blocked solve: 15 serial steps on four 16 x 16 tiles, then ten block products
        unit_lower_inverse_blocked(m1 + i_bh.to(tl.int64) * W * W, beta + i_b * W * HV + i_h, W, HV)
    else:
        b_tt = unit_lower_inverse_t(m1 + i_bh.to(tl.int64) * W * W, W, BW)  # [j, i] = T[i, j]
        tl.debug_barrier()
        o_wwt = i_bh.to(tl.int64) * W * W + o_w[None, :] * W + o_w[:, None]
        tl.store(m1 + o_wwt, b_tt * b_beta[:, None], mask=m_ww)  # m1[i, j] = T[i, j] beta_j


@triton.jit
def treewy_stream_kernel(
    q,
    k,
    v,
    g,
    state,
    state_slot,
    parent,
    m1,
    pm,
    ck,
    cq,
    o,
    vt,
    accepted,
    pk,
    pvt,
    pg,
    pparent,
    paccepted,
    k_out,
    g_out,
    H: tl.constexpr,
    HV: tl.constexpr,
    W: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BW: tl.constexpr,
    BK: tl.constexpr,
    BKC: tl.constexpr,
    BV: tl.constexpr,
    WP: tl.constexpr,
    BWP: tl.constexpr,
    STORE_VT: tl.constexpr,
    COMMIT: tl.constexpr,
    PENDING: tl.constexpr,
    STATE_PREC: tl.constexpr,
    SMALL_PREC: tl.constexpr,
    NATIVE: tl.constexpr,
    BH0,
):
    """One (request, value head, dv tile): the state-sized work only, BKC keys at a time.

    Vt = m1 (v - ck * (K S^T)), O = cq * (Q S^T) + pm Vt with raw (bf16) q and k;
    optionally the pending path applied first (deferred) or the accepted node's state
    written after (fused).
    """
    i_v, i_bh = tl.program_id(0), tl.program_id(1) + BH0
    i_b, i_h = i_bh // HV, i_bh % HV
    i_hk = i_h // (HV // H)
    o_w = tl.arange(0, BW)
    o_v = i_v * BV + tl.arange(0, BV)
    m_w, m_v = o_w < W, o_v < V
    m_wv = m_w[:, None] & m_v[None, :]

    i_slot = tl.load(state_slot + i_b).to(tl.int64)
    p_s = state + ((i_slot * HV + i_h) * V + o_v[:, None]) * K
    o_row = ((i_b * W + o_w[:, None]).to(tl.int64) * H + i_hk) * K

    if PENDING:
        o_p = tl.arange(0, BWP)
        m_p = o_p < WP
        o_prow = ((i_b * WP + o_p[:, None]).to(tl.int64) * H + i_hk) * K
        b_pvt = tl.load(
            pvt + ((i_b * WP + o_p[:, None]).to(tl.int64) * HV + i_h) * V + o_v[None, :],
            mask=m_p[:, None] & m_v[None, :],
            other=0.0,
        )
        i_pa = tl.load(paccepted + i_b)  # -1: nothing pending
        b_pcoef, b_pla = path_scale(pparent, pg + i_b * WP * HV + i_h, i_pa, WP, BWP, HV)
        m_ppath = b_pcoef != 0.0
        b_pk2 = tl.zeros([BWP], dtype=tl.float32)
        for i_kc in tl.static_range(0, BK, BKC):
            o_k = i_kc + tl.arange(0, BKC)
            b_pk = tl.load(
                pk + o_prow + o_k[None, :], mask=m_ppath[:, None] & (o_k < K)[None, :], other=0.0
            ).to(tl.float32)
            b_pk2 += tl.sum(b_pk * b_pk, 1)
        b_pvt = b_pvt * (b_pcoef * tl.rsqrt(b_pk2 + 1e-6))[:, None]
        # hand this window's keys and gates to the next step (one writer per element):
        # the first dv tile of the first value head of a group writes k, tile 0 the gates
        i_writer = i_v + i_h % (HV // H)
        o_wh = (i_b * W + o_w).to(tl.int64) * HV + i_h
        b_g = tl.load(g + o_wh, mask=m_w, other=0.0)
        tl.store(g_out + o_wh, b_g, mask=(o_w + i_v * BW) < W)

    b_sk = tl.zeros([BW, BV], dtype=tl.float32)
    b_sq = tl.zeros([BW, BV], dtype=tl.float32)
    b_k2 = tl.zeros([BW], dtype=tl.float32)  # |k|^2, for the fused commit
    for i_kc in tl.static_range(0, BK, BKC):
        o_k = i_kc + tl.arange(0, BKC)
        m_k = o_k < K
        m_vk = m_v[:, None] & m_k[None, :]
        b_s = tl.load(p_s + o_k[None, :], mask=m_vk, other=0.0).to(tl.float32)  # [BV, BKC]
        b_kraw = tl.load(k + o_row + o_k[None, :], mask=m_w[:, None] & m_k[None, :], other=0.0)
        if PENDING:
            b_pk = tl.load(
                pk + o_prow + o_k[None, :], mask=m_ppath[:, None] & m_k[None, :], other=0.0
            )
            b_s = xdot(tl.trans(b_pvt), b_pk, tl.exp(b_pla) * b_s, STATE_PREC, False, NATIVE)
            b_s_st = b_s.to(p_s.dtype.element_ty)
            tl.store(p_s + o_k[None, :], b_s_st, mask=m_vk)
            b_s = b_s_st.to(tl.float32)
            m_kout = ((o_w + i_writer * BW) < W)[:, None] & m_k[None, :]
            tl.store(k_out + o_row + o_k[None, :], b_kraw, mask=m_kout)
        b_q = tl.load(q + o_row + o_k[None, :], mask=m_w[:, None] & m_k[None, :], other=0.0)
        if COMMIT:
            b_kf = b_kraw.to(tl.float32)
            b_k2 += tl.sum(b_kf * b_kf, 1)
        b_sk = xdot(b_kraw, tl.trans(b_s), b_sk, STATE_PREC, True, NATIVE)
        b_sq = xdot(b_q, tl.trans(b_s), b_sq, STATE_PREC, True, NATIVE)

    o_ww = i_bh.to(tl.int64) * W * W + o_w[:, None] * W + o_w[None, :]
    m_ww = m_w[:, None] & m_w[None, :]
    o_bw = i_bh.to(tl.int64) * W + o_w
    b_ck = tl.load(ck + o_bw, mask=m_w, other=0.0)
    o_wv = ((i_b * W + o_w[:, None]).to(tl.int64) * HV + i_h) * V + o_v[None, :]
    b_v = tl.load(v + o_wv, mask=m_wv, other=0.0).to(tl.float32)
    b_m1 = tl.load(m1 + o_ww, mask=m_ww, other=0.0)
    b_vt = tl.dot(b_m1, b_v - b_ck[:, None] * b_sk, input_precision=SMALL_PREC)
    b_cq = tl.load(cq + o_bw, mask=m_w, other=0.0)
    b_pm = tl.load(pm + o_ww, mask=m_ww, other=0.0)
    b_o = b_cq[:, None] * b_sq + tl.dot(b_pm, b_vt, input_precision=SMALL_PREC)
    tl.store(o + o_wv, b_o.to(o.dtype.element_ty), mask=m_wv)
    if STORE_VT:
        tl.store(vt + o_wv, b_vt, mask=m_wv)

    if COMMIT:
        # second pass over S (L2-resident: this program read it just now)
        i_a = tl.load(accepted + i_b)
        b_coef, b_la = path_scale(parent, g + i_b * W * HV + i_h, i_a, W, BW, HV)
        b_vt = b_vt * (b_coef * tl.rsqrt(b_k2 + 1e-6))[:, None]
        for i_kc in tl.static_range(0, BK, BKC):
            o_k = i_kc + tl.arange(0, BKC)
            m_k = o_k < K
            m_vk = m_v[:, None] & m_k[None, :]
            b_s = tl.load(p_s + o_k[None, :], mask=m_vk, other=0.0).to(tl.float32)
            b_kc = tl.load(k + o_row + o_k[None, :], mask=m_w[:, None] & m_k[None, :], other=0.0)
            b_sa = xdot(tl.trans(b_vt), b_kc, b_s * tl.exp(b_la), STATE_PREC, False, NATIVE)
            tl.store(p_s + o_k[None, :], b_sa.to(p_s.dtype.element_ty), mask=m_vk)


@triton.jit
def treewy_commit_kernel(
    state,
    state_slot,
    k,
    vt,
    g,
    parent,
    accepted,
    H: tl.constexpr,
    HV: tl.constexpr,
    W: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BW: tl.constexpr,
    BK: tl.constexpr,
    BKC: tl.constexpr,
    BV: tl.constexpr,
    PREC: tl.constexpr,
    NATIVE: tl.constexpr,
    BH0,
):
    """S_a = gamma_a S_0 + sum over the path of exp(L_a - L_i) vt_i k_i^T / |k_i|.

    BKC = BK (round 4): the whole [BV, dk] state tile is loaded first, so its DRAM latency
    overlaps the parent walk and the key loads; one product, one store. BKC < BK (rounds
    2-3): key norms first, then the state BKC keys at a time (fewer registers).
    """
    i_v, i_bh = tl.program_id(0), tl.program_id(1) + BH0
    i_b, i_h = i_bh // HV, i_bh % HV
    i_hk = i_h // (HV // H)
    o_w = tl.arange(0, BW)
    o_v = i_v * BV + tl.arange(0, BV)
    m_v = o_v < V
    i_slot = tl.load(state_slot + i_b).to(tl.int64)
    p_s = state + ((i_slot * HV + i_h) * V + o_v[:, None]) * K
    o_row = ((i_b * W + o_w).to(tl.int64) * H + i_hk) * K
    p_vt = vt + ((i_b * W + o_w).to(tl.int64) * HV + i_h)[:, None] * V + o_v[None, :]
    i_a = tl.load(accepted + i_b)

    if BKC == BK:
        o_k = tl.arange(0, BK)
        m_k = o_k < K
        m_vk = m_v[:, None] & m_k[None, :]
        b_s = tl.load(p_s + o_k[None, :], mask=m_vk, other=0.0).to(tl.float32)
        b_coef, b_la = path_scale(parent, g + i_b * W * HV + i_h, i_a, W, BW, HV)
        m_path = b_coef != 0.0
        b_k = tl.load(
            k + o_row[:, None] + o_k[None, :], mask=m_path[:, None] & m_k[None, :], other=0.0
        )
        b_kf = b_k.to(tl.float32)
        b_vt = tl.load(p_vt, mask=m_path[:, None] & m_v[None, :], other=0.0)
        b_vt = b_vt * (b_coef * tl.rsqrt(tl.sum(b_kf * b_kf, 1) + 1e-6))[:, None]
        b_sa = xdot(tl.trans(b_vt), b_k, tl.exp(b_la) * b_s, PREC, False, NATIVE)
        tl.store(p_s + o_k[None, :], b_sa.to(p_s.dtype.element_ty), mask=m_vk)
    else:
        b_coef, b_la = path_scale(parent, g + i_b * W * HV + i_h, i_a, W, BW, HV)
        m_path = b_coef != 0.0
        b_k2 = tl.zeros([BW], dtype=tl.float32)
        for i_kc in tl.static_range(0, BK, BKC):
            o_k = i_kc + tl.arange(0, BKC)
            b_k = tl.load(
                k + o_row[:, None] + o_k[None, :],
                mask=m_path[:, None] & (o_k < K)[None, :],
                other=0.0,
            ).to(tl.float32)
            b_k2 += tl.sum(b_k * b_k, 1)
        b_vt = tl.load(p_vt, mask=m_path[:, None] & m_v[None, :], other=0.0)
        b_vt = b_vt * (b_coef * tl.rsqrt(b_k2 + 1e-6))[:, None]
        b_ga = tl.exp(b_la)
        for i_kc in tl.static_range(0, BK, BKC):
            o_k = i_kc + tl.arange(0, BKC)
            m_k = o_k < K
            m_vk = m_v[:, None] & m_k[None, :]
            b_s = tl.load(p_s + o_k[None, :], mask=m_vk, other=0.0).to(tl.float32)
            b_k = tl.load(
                k + o_row[:, None] + o_k[None, :], mask=m_path[:, None] & m_k[None, :], other=0.0
            )
            b_sa = xdot(tl.trans(b_vt), b_k, b_ga * b_s, PREC, False, NATIVE)
            tl.store(p_s + o_k[None, :], b_sa.to(p_s.dtype.element_ty), mask=m_vk)


def check_inputs(q, k, v, log_gate, beta, state_pool, parent) -> tuple[int, int, int, int, int]:
    """Validate shapes and dtypes; return (B, W, Hk, Hv, dk, dv)-style dims (B, W, Hk, Hv, dv)."""
    if q.dim() != 4 or k.shape != q.shape:
        raise ValueError(f"q and k must be [B, W, Hk, dk] and equal, got {q.shape}, {k.shape}")
    bsz, w, hk, dk = q.shape
    if v.dim() != 4 or v.shape[:2] != (bsz, w):
        raise ValueError(f"v must be [B={bsz}, W={w}, Hv, dv], got {tuple(v.shape)}")
    hv, dv = v.shape[2], v.shape[3]
    if hv % hk != 0:
        raise ValueError(f"Hv ({hv}) must be a multiple of Hk ({hk})")
    for name, t in (("log_gate", log_gate), ("beta", beta)):
        if t.shape != (bsz, w, hv):
            raise ValueError(f"{name} must be [B, W, Hv] = {(bsz, w, hv)}, got {tuple(t.shape)}")
        if t.dtype != torch.float32:
            raise ValueError(f"{name} must be float32, got {t.dtype}")
    if state_pool.dim() != 4 or tuple(state_pool.shape[1:]) != (hv, dv, dk):
        raise ValueError(
            f"state_pool must be [num_slots, Hv, dv, dk] = [*, {hv}, {dv}, {dk}], "
            f"got {tuple(state_pool.shape)}"
        )
    if state_pool.dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"state_pool dtype must be float32 or bfloat16, got {state_pool.dtype}")
    check_parent(parent, w)
    for name, t in (("q", q), ("k", k), ("v", v), ("state_pool", state_pool)):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous")
    return bsz, w, hk, hv, dv


def check_parent(parent: torch.Tensor, num_nodes: int) -> None:
    """parent must be an int32 [W] DFS-preorder tree (tree.validate_parent: no cycles, no
    parent >= its index, none out of range), checked on the host before any launch.
    Under CUDA-graph capture the values cannot be read (the check is skipped; the
    kernels' parent walks stop after W steps whatever the values)."""
    if parent.shape != (num_nodes,) or parent.dtype != torch.int32:
        raise ValueError(
            f"parent must be int32 [W={num_nodes}], got {parent.dtype} {tuple(parent.shape)}"
        )
    if parent.is_cuda and torch.cuda.is_current_stream_capturing():
        return
    try:
        validate_parent(parent.tolist())
    except ValueError as e:
        raise ValueError(f"parent: {e}") from None


def launch_split(kernel, num_v_tiles: int, num_heads_total: int, *args, **kwargs) -> None:
    """``kernel[(num_v_tiles, B * Hv)]``, split along axis 1 into pieces of at most
    MAX_GRID_Y programs (each told its first head by ``BH0``)."""
    for bh0, count in grid_chunks(num_heads_total):
        kernel[(num_v_tiles, count)](*args, BH0=bh0, **kwargs)


def launch_prep(
    q,
    k,
    log_gate,
    beta,
    parent,
    *,
    scale,
    num_heads,
    num_warps=None,
    blocked=None,
    gram_precision: str = "tf32",
    policy: LaunchPolicy | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch the per-head window kernel alone (also timed alone by ``bench/run.py``).

    Returns (mats [2, B*Hv, W, W] = m1, pm; cols [2, B*Hv, W] = ck, cq), fp32 scratch.
    ``num_warps`` / ``blocked`` override the policy's ``prep_warps`` / ``prep_blocked``.
    """
    policy = DEFAULT_POLICY if policy is None else policy
    hk, hv = num_heads
    bsz, w, _, dk = q.shape
    bw, log2_bw = pad_window(w)
    bk = triton.next_power_of_2(dk)
    # per (request, value head) window matrices: tiny next to the state
    mats = torch.empty((2, bsz * hv, w, w), dtype=torch.float32, device=q.device)
    cols = torch.empty((2, bsz * hv, w), dtype=torch.float32, device=q.device)
    treewy_prep_kernel[(bsz * hv,)](
        q,
        k,
        log_gate,
        beta,
        parent,
        mats[0],
        mats[1],
        cols[0],
        cols[1],
        scale,
        H=hk,
        HV=hv,
        W=w,
        K=dk,
        BW=bw,
        LOG2_BW=log2_bw,
        BK=bk,
        BKC=min(bk, PREP_BLOCK_K),
        PREC=gram_precision,
        BLOCKED=policy.prep_blocked if blocked is None else blocked,
        num_warps=policy.prep_warps(bw, bsz * hv) if num_warps is None else num_warps,
    )
    return mats, cols


def launch_window(
    q,
    k,
    v,
    log_gate,
    beta,
    state_pool,
    state_slot,
    parent,
    *,
    scale,
    store_vt,
    accepted=None,
    pending=None,
    k_out=None,
    g_out=None,
    vt=None,
    out=None,
    state_math=None,
    policy: LaunchPolicy | None = None,
):
    """Launch the per-head window kernel, then the streaming kernel; returns (o, vt or
    None). Shared by all variants."""
    policy = DEFAULT_POLICY if policy is None else policy
    bsz, w, hk, hv, dv = check_inputs(q, k, v, log_gate, beta, state_pool, parent)
    if pending is not None:
        check_parent(pending[3], pending[0].shape[1])
    prec = dot_precision(state_pool.dtype, q.dtype, state_math, q.device.type)
    dk = q.shape[3]
    if scale is None:
        scale = dk**-0.5
    bw, _ = pad_window(w)
    bk = triton.next_power_of_2(dk)
    cfg = policy.stream_config(bw, "deferred" if pending is not None else "verify")
    bv = pick_block_v(bsz * hv, dv, widest=cfg["block_v"])
    o = torch.empty_like(v) if out is None else out
    if store_vt and vt is None:
        vt = torch.empty(v.shape, dtype=torch.float32, device=v.device)
    if policy.use_single_launch(w, bsz * hv, fused=accepted is not None):
        launch_small(
            q, k, v, log_gate, beta, state_pool, state_slot, parent,
            num_heads=(hk, hv), scale=scale, o=o, vt=vt if store_vt else None,
            accepted=accepted, pending=pending, k_out=k_out, g_out=g_out, prec=prec,
            policy=policy,
        )  # fmt: skip
        return o, vt
    if pending is not None:
        pk, pvt, pg, pparent, paccepted = pending
        wp = pk.shape[1]
        bwp, _ = pad_window(wp)
    else:
        pk, pvt, pg, pparent, paccepted = k, o, log_gate, parent, state_slot
        wp, bwp = w, bw
    mats, cols = launch_prep(
        q, k, log_gate, beta, parent, scale=scale, num_heads=(hk, hv),
        gram_precision=prec.gram, policy=policy,
    )  # fmt: skip
    launch_split(
        treewy_stream_kernel,
        triton.cdiv(dv, bv),
        bsz * hv,
        q,
        k,
        v,
        log_gate,
        state_pool,
        state_slot,
        parent,
        mats[0],
        mats[1],
        cols[0],
        cols[1],
        o,
        vt if vt is not None else o,
        accepted if accepted is not None else state_slot,
        pk,
        pvt,
        pg,
        pparent,
        paccepted,
        k_out if k_out is not None else k,
        g_out if g_out is not None else log_gate,
        H=hk,
        HV=hv,
        W=w,
        K=dk,
        V=dv,
        BW=bw,
        BK=bk,
        BKC=min(bk, cfg["bkc"]),
        BV=bv,
        WP=wp,
        BWP=bwp,
        STORE_VT=store_vt,
        COMMIT=accepted is not None,
        PENDING=pending is not None,
        STATE_PREC=prec.state,
        SMALL_PREC=prec.small,
        NATIVE=prec.native,
        num_warps=cfg["num_warps"],
    )
    return o, vt


def treewy_verify(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_gate: torch.Tensor,
    beta: torch.Tensor,
    state_pool: torch.Tensor,
    state_slot: torch.Tensor,
    parent: torch.Tensor,
    scale: float | None = None,
    *,
    out: torch.Tensor | None = None,
    vt: torch.Tensor | None = None,
    state_math: str | None = None,
    policy: LaunchPolicy | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Outputs and pseudo-values of a draft window, reading S_0 = state_pool[state_slot[b]].

    Args: q, k [B, W, Hk, dk] and v [B, W, Hv, dv] (bf16 or fp32); log_gate, beta
    [B, W, Hv] fp32; state_pool [num_slots, Hv, dv, dk] fp32 or bf16 (not modified);
    state_slot [B] int32; parent [W] int32 (DFS preorder, parent[0] = -1).
    Returns o [B, W, Hv, dv] in v's dtype and vt [B, W, Hv, dv] fp32 (written into
    ``out`` / ``vt`` when given). CUDA-graph capturable (no host synchronisation; the
    parent array is validated on the host outside capture). ``state_math``: None (the
    contract of _jit.dot_precision: fp32-grade for an fp32 state) or "fp32" / "tf32".
    ``policy``: launch configurations (policy.py; None: DEFAULT_POLICY).
    """
    return launch_window(
        q,
        k,
        v,
        log_gate,
        beta,
        state_pool,
        state_slot,
        parent,
        scale=scale,
        store_vt=True,
        out=out,
        vt=vt,
        state_math=state_math,
        policy=policy,
    )


def treewy_commit(
    state_pool: torch.Tensor,
    state_slot: torch.Tensor,
    k: torch.Tensor,
    vt: torch.Tensor,
    log_gate: torch.Tensor,
    parent: torch.Tensor,
    accepted: torch.Tensor,
    *,
    state_math: str | None = None,
    policy: LaunchPolicy | None = None,
) -> None:
    """Rebuild the accepted node's state in place: state_pool[state_slot[b]] <- S_a.

    ``accepted`` [B] int32 holds node indices in [0, W). k, vt and log_gate are the
    verify call's; ``state_math`` and ``policy`` as for ``treewy_verify``. CUDA-graph
    capturable.
    """
    bsz, w, hk, dk = k.shape
    hv, dv = vt.shape[2], vt.shape[3]
    if vt.shape[:2] != (bsz, w) or vt.dtype != torch.float32:
        raise ValueError(f"vt must be float32 [B={bsz}, W={w}, Hv, dv], got {vt.dtype} {vt.shape}")
    if log_gate.shape != (bsz, w, hv):
        raise ValueError(f"log_gate must be [B, W, Hv] = {(bsz, w, hv)}, got {log_gate.shape}")
    if tuple(state_pool.shape[1:]) != (hv, dv, dk):
        raise ValueError(f"state_pool must be [*, {hv}, {dv}, {dk}], got {state_pool.shape}")
    if accepted.shape != (bsz,) or accepted.dtype != torch.int32:
        raise ValueError(f"accepted must be int32 [B={bsz}], got {accepted.dtype} {accepted.shape}")
    check_parent(parent, w)
    prec = dot_precision(state_pool.dtype, k.dtype, state_math, k.device.type)
    bw, _ = pad_window(w)
    bk = triton.next_power_of_2(dk)
    cfg = (DEFAULT_POLICY if policy is None else policy).commit_config(bw, state_pool.dtype)
    bv = pick_block_v(bsz * hv, dv, widest=cfg["block_v"])
    launch_split(
        treewy_commit_kernel,
        triton.cdiv(dv, bv),
        bsz * hv,
        state_pool,
        state_slot,
        k,
        vt,
        log_gate,
        parent,
        accepted,
        H=hk,
        HV=hv,
        W=w,
        K=dk,
        V=dv,
        BW=bw,
        BK=bk,
        BKC=min(bk, cfg["bkc"]),
        BV=bv,
        PREC=prec.state,
        NATIVE=prec.native,
        num_warps=cfg["num_warps"],
    )
