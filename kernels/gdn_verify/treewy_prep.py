"""TreeWY stage 1: the per-(request, value head) window kernel (SPEC.md section 2).

``treewy_prep_kernel`` computes, once per head, the window's [W, W] quantities: the
ancestor mask (tl.dot doubling), the decay exp(L_t - L_i) from segment sums of the log
gates along the path (_jit.segment_log_decay; never a difference of path sums), the
forward substitution (I + N)^-1 diag(beta) (blocked on 16 x 16 tiles for 16 < W <= 64),
the decay-masked Q K^T and the per-row scales ck = gamma / |k|, cq = gamma * scale / |q|.

Shapes: q, k [B, W, Hk, dk]; log_gate, beta [B, W, Hv]; outputs m1, pm [B*Hv, W, W] and
ck, cq [B*Hv, W] (fp32 scratch).
Bytes per (request, value head): reads q, k (2 * W*dk*2, shared by the Hv/Hk heads of a
group: L2 hits after the first), gates and betas (2 * W*4); writes 2*W*W*4 + 2*W*4.
No state is touched. Nothing runs at import.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._jit import (
    ancestor_mask,
    pad_window,
    segment_log_decay,
    unit_lower_inverse_blocked,
    unit_lower_inverse_t,
)
from .policy import DEFAULT_POLICY, LaunchPolicy
from .treewy_pending import pending_buffers, pending_prologue

__all__ = ["PREP_BLOCK_K", "launch_prep", "treewy_prep_kernel"]

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
    pk,
    pg,
    pparent,
    paccepted,
    pscale,
    pgam,
    pgram,
    k_out,
    g_out,
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
    NATIVE: tl.constexpr,
    WP: tl.constexpr,
    BWP: tl.constexpr,
    PENDING: tl.constexpr,
    GRAM: tl.constexpr,
):
    """The window's [W, W] quantities of one (request, value head), once per head.

    m1 = (I + N)^-1 diag(beta), pm = decay-masked Q_n K_n^T (scale included), ck =
    gamma / |k| and cq = gamma * scale / |q| (the l2-norm as a per-row scale of the raw
    products K S^T and Q S^T that the streaming kernel computes). The raw q, k are bf16,
    exact in tf32, so K K^T and Q K^T are fp32-accurate on tensor cores. PENDING: also
    the deferred commit's hoisted pending coefficients (treewy_pending.pending_prologue).
    """
    i_bh = tl.program_id(0)
    i_b, i_h = i_bh // HV, i_bh % HV
    if PENDING:
        pending_prologue(i_b, i_h, q, k, g, pk, pg, pparent, paccepted, pscale, pgam, pgram,
                         k_out, g_out, H, HV, W, K, BW, BK, BKC, WP, BWP, GRAM,
                         PREC)  # fmt: skip
    i_hk = i_h // (HV // H)
    o_w = tl.arange(0, BW)
    m_w = o_w < W
    o_row = ((i_b * W + o_w[:, None]).to(tl.int64) * H + i_hk) * K
    o_wh = (i_b * W + o_w).to(tl.int64) * HV + i_h
    b_g = tl.load(g + o_wh, mask=m_w, other=0.0).to(tl.float32)
    b_anc = ancestor_mask(parent, W, BW, LOG2_BW)  # [BW, BW] bool
    b_lg = tl.sum(tl.where(b_anc, b_g[None, :], 0.0), 1)  # L_t
    # exp(L_t - L_i) from the segment sums (i, t], never a difference of path sums
    b_seg = segment_log_decay(b_anc, b_g, NATIVE)
    b_dec = tl.where(b_anc, tl.exp(tl.where(b_anc, b_seg, 0.0)), 0.0)
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
    pending=None,
    k_out=None,
    g_out=None,
    pending_gram: bool = False,
):
    """Launch the per-head window kernel alone (also timed alone by ``bench/run.py``).

    Returns (mats [2, B*Hv, W, W] = m1, pm; cols [2, B*Hv, W] = ck, cq), fp32 scratch.
    ``num_warps`` / ``blocked`` override the policy's ``prep_warps`` / ``prep_blocked``.
    ``pending`` = (k, vt, log_gate, parent, accepted) of the previous window (with
    ``k_out`` / ``g_out``): the same program also computes the deferred commit's hoisted
    coefficients (``pending_gram``: also K PK^T, Q PK^T) and hands this window's keys and
    gates on; returns (mats, cols, (pscale, pgam, pgram)) then.
    """
    policy = DEFAULT_POLICY if policy is None else policy
    hk, hv = num_heads
    bsz, w, _, dk = q.shape
    bw, log2_bw = pad_window(w)
    bk = triton.next_power_of_2(dk)
    # per (request, value head) window matrices: tiny next to the state
    mats = torch.empty((2, bsz * hv, w, w), dtype=torch.float32, device=q.device)
    cols = torch.empty((2, bsz * hv, w), dtype=torch.float32, device=q.device)
    if pending is not None:
        pk, _, pg, pparent, paccepted = pending
        wp = pk.shape[1]
        hoisted = pending_buffers(bsz, hv, w, wp, pending_gram, q.device)
        extra = (pk, pg, pparent, paccepted, *hoisted, k_out, g_out)
    else:
        wp, hoisted = w, None
        extra = (k, log_gate, parent, parent, cols[0], cols[0], cols[0], k, log_gate)
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
        *extra,
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
        NATIVE=q.device.type == "cuda",
        WP=wp,
        BWP=pad_window(wp)[0],
        PENDING=pending is not None,
        GRAM=pending is not None and pending_gram,
        num_warps=policy.prep_warps(bw, bsz * hv) if num_warps is None else num_warps,
    )
    return (mats, cols) if hoisted is None else (mats, cols, hoisted)
