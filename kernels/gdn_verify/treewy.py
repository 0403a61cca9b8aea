"""TreeWY verification and commit kernels (SPEC.md section 2, variants of section 3).

``treewy_verify`` computes every window output in closed form from the committed state
S_0 and writes only the pseudo-values ``vt`` (W x dv per head, not W states);
``treewy_commit`` rebuilds the accepted node's state in place. One program handles one
(request, value head, dv tile) and the whole key dimension::

    A        = ancestor-or-self mask of the tree               [BW, BW]  (tl.dot doubling)
    L        = A @ log_gate      (log gamma along the path, never a division)
    N[t, i]  = b_t exp(L_t - L_i) (k_t . k_i),  i strict ancestor of t
    Vt       = (I + N)^-1 (b * (v - exp(L) * (K S_0^T)))      [BW, BV]
    O        = exp(L) * (Q S_0^T) + (A * exp(L_t - L_i) * Q K^T) @ Vt
    S_a      = exp(L_a) S_0 + sum_{i <= a} exp(L_a - L_i) vt_i k_i^T

Bytes per (request, value head): verify reads S_0 (dv*dk*s), q/k (W*dk*2 each, shared by
Hv/Hk heads), v (W*dv*2), gates and betas (W*4 each) and writes o (W*dv*2) and vt
(W*dv*4); commit reads S_0, k, vt and gates and writes one state.

The same kernel body, with compile-time flags, also gives the fused verify+commit and the
deferred-commit variants (``treewy_fused.py``). Nothing runs at import.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._jit import (
    ancestor_mask,
    l2norm_rows,
    pad_window,
    path_coefficients,
    path_update,
    unit_lower_inverse,
)

__all__ = ["treewy_commit", "treewy_verify"]

# NOTE: S_0 q and S_0 k are the big products (~21 GFLOP at B=256, W=40): they run on
# tensor cores in tf32 (relative error ~5e-4 on terms that end in bf16 outputs). The small
# solve and commit products use 3xTF32, which is close to fp32 and costs little.
BIG_DOT_PRECISION = "tf32"
SMALL_DOT_PRECISION = "tf32x3"


@triton.jit
def treewy_window_kernel(
    q,
    k,
    v,
    g,
    beta,
    state,
    state_slot,
    parent,
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
    scale,
    H: tl.constexpr,
    HV: tl.constexpr,
    W: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BW: tl.constexpr,
    LOG2_BW: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    WP: tl.constexpr,
    BWP: tl.constexpr,
    LOG2_BWP: tl.constexpr,
    STORE_VT: tl.constexpr,
    COMMIT: tl.constexpr,
    PENDING: tl.constexpr,
    BIG_PREC: tl.constexpr,
    SMALL_PREC: tl.constexpr,
):
    i_v, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // HV, i_bh % HV
    i_hk = i_h // (HV // H)
    o_w = tl.arange(0, BW)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_w, m_k, m_v = o_w < W, o_k < K, o_v < V
    m_wk = m_w[:, None] & m_k[None, :]
    m_wv = m_w[:, None] & m_v[None, :]
    m_vk = m_v[:, None] & m_k[None, :]

    # committed state tile S_0 [BV, BK]: issue the big load first
    i_slot = tl.load(state_slot + i_b).to(tl.int64)
    p_s = state + ((i_slot * HV + i_h) * V + o_v[:, None]) * K + o_k[None, :]
    b_s = tl.load(p_s, mask=m_vk, other=0.0).to(tl.float32)

    # window inputs: q, k [BW, BK]; v [BW, BV]; gates, betas [BW]
    o_qk = ((i_b * W + o_w[:, None]).to(tl.int64) * H + i_hk) * K + o_k[None, :]
    b_kraw = tl.load(k + o_qk, mask=m_wk, other=0.0)
    b_q = l2norm_rows(tl.load(q + o_qk, mask=m_wk, other=0.0).to(tl.float32)) * scale
    b_k = l2norm_rows(b_kraw.to(tl.float32))
    o_wv = ((i_b * W + o_w[:, None]).to(tl.int64) * HV + i_h) * V + o_v[None, :]
    b_v = tl.load(v + o_wv, mask=m_wv, other=0.0).to(tl.float32)
    o_wh = (i_b * W + o_w).to(tl.int64) * HV + i_h
    b_g = tl.load(g + o_wh, mask=m_w, other=0.0).to(tl.float32)
    b_beta = tl.load(beta + o_wh, mask=m_w, other=0.0).to(tl.float32)

    if PENDING:
        # deferred commit: apply the previous window's accepted path to S_c in registers
        o_p = tl.arange(0, BWP)
        m_p = o_p < WP
        b_pk = tl.load(
            pk + ((i_b * WP + o_p[:, None]).to(tl.int64) * H + i_hk) * K + o_k[None, :],
            mask=m_p[:, None] & m_k[None, :],
            other=0.0,
        ).to(tl.float32)
        b_pk = l2norm_rows(b_pk)
        b_pvt = tl.load(
            pvt + ((i_b * WP + o_p[:, None]).to(tl.int64) * HV + i_h) * V + o_v[None, :],
            mask=m_p[:, None] & m_v[None, :],
            other=0.0,
        )
        b_pg = tl.load(pg + (i_b * WP + o_p).to(tl.int64) * HV + i_h, mask=m_p, other=0.0)
        b_panc = ancestor_mask(pparent, WP, BWP, LOG2_BWP)
        b_plg = tl.sum(tl.where(b_panc, b_pg[None, :], 0.0), 1)
        i_pa = tl.load(paccepted + i_b)  # -1: nothing pending
        b_pcoef, b_pla = path_coefficients(b_panc, b_plg, i_pa, BWP)
        b_s = tl.exp(b_pla) * b_s + path_update(b_pvt, b_pk, b_pcoef, WP, BWP, BV, BK, SMALL_PREC)
        # the one state write of this step; verify continues from the stored value
        b_s_st = b_s.to(p_s.dtype.element_ty)
        tl.store(p_s, b_s_st, mask=m_vk)
        b_s = b_s_st.to(tl.float32)
        # hand this window's keys and gates to the next step (one writer per element)
        # one writer per element: the first dv tile of the first value head of a group
        # (the writer test is folded into the row bound: rows past W are never stored)
        i_writer = i_v + i_h % (HV // H)
        m_kout = ((o_w + i_writer * BW) < W)[:, None] & m_k[None, :]
        tl.store(k_out + o_qk, b_kraw, mask=m_kout)
        tl.store(g_out + o_wh, b_g, mask=(o_w + i_v * BW) < W)

    # tree structure and cumulative decay in log space
    b_anc = ancestor_mask(parent, W, BW, LOG2_BW)  # [BW, BW] bool
    b_lg = tl.sum(tl.where(b_anc, b_g[None, :], 0.0), 1)  # L_t
    b_dec = tl.where(b_anc, tl.exp(tl.where(b_anc, b_lg[:, None] - b_lg[None, :], 0.0)), 0.0)
    b_gam = tl.exp(b_lg)

    # triangular system (I + diag(b) G) Vt = R
    b_kk = tl.dot(b_k, tl.trans(b_k), input_precision=SMALL_PREC)  # [BW, BW]
    m_strict = b_anc & (o_w[:, None] != o_w[None, :])
    b_n = tl.where(m_strict, b_beta[:, None] * b_dec * b_kk, 0.0)
    b_tinv = unit_lower_inverse(b_n, W, BW)
    b_sk = tl.dot(b_k, tl.trans(b_s), input_precision=BIG_PREC)  # [BW, BV] = K S_0^T
    b_r = b_beta[:, None] * (b_v - b_gam[:, None] * b_sk)
    b_vt = tl.dot(b_tinv, b_r, input_precision=SMALL_PREC)  # [BW, BV]

    # outputs
    b_sq = tl.dot(b_q, tl.trans(b_s), input_precision=BIG_PREC)  # [BW, BV] = Q S_0^T
    b_qk = tl.dot(b_q, tl.trans(b_k), input_precision=SMALL_PREC)
    b_o = b_gam[:, None] * b_sq + tl.dot(b_dec * b_qk, b_vt, input_precision=SMALL_PREC)
    tl.store(o + o_wv, b_o.to(o.dtype.element_ty), mask=m_wv)
    if STORE_VT:
        tl.store(vt + o_wv, b_vt, mask=m_wv)

    if COMMIT:
        i_a = tl.load(accepted + i_b)
        b_coef, b_la = path_coefficients(b_anc, b_lg, i_a, BW)
        b_sa = tl.exp(b_la) * b_s + path_update(b_vt, b_k, b_coef, W, BW, BV, BK, SMALL_PREC)
        tl.store(p_s, b_sa.to(p_s.dtype.element_ty), mask=m_vk)


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
    LOG2_BW: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    SMALL_PREC: tl.constexpr,
):
    i_v, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // HV, i_bh % HV
    i_hk = i_h // (HV // H)
    o_w = tl.arange(0, BW)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_w, m_k, m_v = o_w < W, o_k < K, o_v < V
    m_vk = m_v[:, None] & m_k[None, :]

    i_slot = tl.load(state_slot + i_b).to(tl.int64)
    p_s = state + ((i_slot * HV + i_h) * V + o_v[:, None]) * K + o_k[None, :]
    b_s = tl.load(p_s, mask=m_vk, other=0.0).to(tl.float32)  # [BV, BK]

    b_k = tl.load(
        k + ((i_b * W + o_w[:, None]).to(tl.int64) * H + i_hk) * K + o_k[None, :],
        mask=m_w[:, None] & m_k[None, :],
        other=0.0,
    ).to(tl.float32)
    b_k = l2norm_rows(b_k)
    b_vt = tl.load(
        vt + ((i_b * W + o_w[:, None]).to(tl.int64) * HV + i_h) * V + o_v[None, :],
        mask=m_w[:, None] & m_v[None, :],
        other=0.0,
    )
    b_g = tl.load(g + (i_b * W + o_w).to(tl.int64) * HV + i_h, mask=m_w, other=0.0)
    b_anc = ancestor_mask(parent, W, BW, LOG2_BW)
    b_lg = tl.sum(tl.where(b_anc, b_g[None, :], 0.0), 1)
    i_a = tl.load(accepted + i_b)
    b_coef, b_la = path_coefficients(b_anc, b_lg, i_a, BW)
    b_sa = tl.exp(b_la) * b_s + tl.dot(
        tl.trans(b_vt * b_coef[:, None]), b_k, input_precision=SMALL_PREC
    )
    tl.store(p_s, b_sa.to(p_s.dtype.element_ty), mask=m_vk)


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
    if parent.shape != (w,) or parent.dtype != torch.int32:
        raise ValueError(f"parent must be int32 [W={w}], got {parent.dtype} {tuple(parent.shape)}")
    for name, t in (("q", q), ("k", k), ("v", v), ("state_pool", state_pool)):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous")
    return bsz, w, hk, hv, dv


def pick_block_v(num_programs_per_tile: int, dv: int, bw: int) -> int:
    """dv tile: 64 (32 for windows past 32) unless that leaves fewer than ~512 programs."""
    bv = min(64 if bw <= 32 else 32, triton.next_power_of_2(dv))
    while bv > 16 and num_programs_per_tile * triton.cdiv(dv, bv) < 512:
        bv //= 2
    return bv


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
):
    """Launch ``treewy_window_kernel``; returns (o, vt or None). Shared by all variants."""
    bsz, w, hk, hv, dv = check_inputs(q, k, v, log_gate, beta, state_pool, parent)
    dk = q.shape[3]
    if scale is None:
        scale = dk**-0.5
    bw, log2_bw = pad_window(w)
    bk = triton.next_power_of_2(dk)
    bv = pick_block_v(bsz * hv, dv, bw)
    o = torch.empty_like(v) if out is None else out
    if store_vt and vt is None:
        vt = torch.empty(v.shape, dtype=torch.float32, device=v.device)
    if pending is not None:
        pk, pvt, pg, pparent, paccepted = pending
        wp = pk.shape[1]
        bwp, log2_bwp = pad_window(wp)
    else:
        pk, pvt, pg, pparent, paccepted = k, o, log_gate, parent, state_slot
        wp, bwp, log2_bwp = w, bw, log2_bw
    grid = (triton.cdiv(dv, bv), bsz * hv)
    treewy_window_kernel[grid](
        q,
        k,
        v,
        log_gate,
        beta,
        state_pool,
        state_slot,
        parent,
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
        scale,
        H=hk,
        HV=hv,
        W=w,
        K=dk,
        V=dv,
        BW=bw,
        LOG2_BW=log2_bw,
        BK=bk,
        BV=bv,
        WP=wp,
        BWP=bwp,
        LOG2_BWP=log2_bwp,
        STORE_VT=store_vt,
        COMMIT=accepted is not None,
        PENDING=pending is not None,
        BIG_PREC=BIG_DOT_PRECISION,
        SMALL_PREC=SMALL_DOT_PRECISION,
        num_warps=4 if bw <= 16 else 8,
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
) -> tuple[torch.Tensor, torch.Tensor]:
    """Outputs and pseudo-values of a draft window, reading S_0 = state_pool[state_slot[b]].

    Args: q, k [B, W, Hk, dk] and v [B, W, Hv, dv] (bf16 or fp32); log_gate, beta
    [B, W, Hv] fp32; state_pool [num_slots, Hv, dv, dk] fp32 or bf16 (not modified);
    state_slot [B] int32; parent [W] int32 (DFS preorder, parent[0] = -1).
    Returns o [B, W, Hv, dv] in v's dtype and vt [B, W, Hv, dv] fp32 (written into
    ``out`` / ``vt`` when given). CUDA-graph capturable (no host synchronisation).
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
    )


def treewy_commit(
    state_pool: torch.Tensor,
    state_slot: torch.Tensor,
    k: torch.Tensor,
    vt: torch.Tensor,
    log_gate: torch.Tensor,
    parent: torch.Tensor,
    accepted: torch.Tensor,
) -> None:
    """Rebuild the accepted node's state in place: state_pool[state_slot[b]] <- S_a.

    ``accepted`` [B] int32 holds node indices in [0, W). k, vt and log_gate are the
    verify call's. CUDA-graph capturable.
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
    if parent.shape != (w,) or parent.dtype != torch.int32:
        raise ValueError(f"parent must be int32 [W={w}], got {parent.dtype} {parent.shape}")
    bw, log2_bw = pad_window(w)
    bk = triton.next_power_of_2(dk)
    bv = pick_block_v(bsz * hv, dv, bw)
    grid = (triton.cdiv(dv, bv), bsz * hv)
    treewy_commit_kernel[grid](
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
        LOG2_BW=log2_bw,
        BK=bk,
        BV=bv,
        SMALL_PREC=SMALL_DOT_PRECISION,
        num_warps=4,
    )
