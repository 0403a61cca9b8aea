"""TreeWY stage 3: rebuild the accepted node's state in place (the separate commit).

``treewy_commit_kernel`` walks the accepted node's path (no [W, W] mask; L_a - L_i from
the path's segment sums, _jit.path_scale) and streams the state:
S_a = exp(L_a) S_0 + sum_{i <= a} exp(L_a - L_i) vt_i k_i^T / |k_i|.

Shapes: state pool [slots, Hv, dv, dk]; k [B, W, Hk, dk]; vt [B, W, Hv, dv] fp32;
log_gate [B, W, Hv]; parent [W]; accepted [B].
Bytes per (request, value head): reads S_0 (dv*dk*s), the path's k (<= W*dk*2, shared by
the group), vt (<= W*dv*4), gates (W*4); writes one state (dv*dk*s). Nothing runs at import.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._jit import dot_precision, pad_window, path_scale, pick_block_v, xdot
from .policy import DEFAULT_POLICY, LaunchPolicy
from .treewy_inputs import check_parent, launch_split

__all__ = ["treewy_commit", "treewy_commit_kernel"]


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
