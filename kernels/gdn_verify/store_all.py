"""Store-all verification (vLLM's default speculative GDN path), for chains and trees.

Walks the window node by node with the recurrence
``S_t = a_t S_p + b_t (v_t - a_t S_p k_t) k_t^T``, ``o_t = S_t q_t`` and writes the state
after every node t into ``state_pool[slots[b, t]]``, reading request b's committed state
from ``state_pool[init_slot[b]]``. One program owns one (request, value head, dv tile) and
the whole key dimension, so the state tile stays in registers along a chain. In a tree,
a node whose parent is not the previous node reloads its parent's state from the slot
this program wrote earlier (behind a barrier), as vLLM's tree path does.

Bytes per (request, value head): S_0 read (dv*dk*s), W states written (W*dv*dk*s),
q/k (W*dk*2 each, shared by Hv/Hk heads), v (W*dv*2), gates and betas (W*4 each),
o written (W*dv*2); tree reloads come from L2.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._jit import grid_chunks
from .treewy_inputs import check_inputs

__all__ = ["STOREALL_CONFIG", "storeall_config", "storeall_verify"]

# Launch configuration (dv tile, warps, stages) by state dtype; the caller may pass its own
# (bench --sweep times candidates). Round 1-4 default: a 32-row dv tile, halved while
# fewer than 1024 programs (default only), 4 warps, Triton's 3 stages.
STOREALL_CONFIG = {
    "float32": {"block_v": 32, "num_warps": 4, "num_stages": 3},
    "bfloat16": {"block_v": 32, "num_warps": 4, "num_stages": 3},
}


def storeall_config(state_dtype: torch.dtype) -> dict:
    """A copy of the default launch configuration for ``state_dtype``."""
    return dict(STOREALL_CONFIG["float32" if state_dtype == torch.float32 else "bfloat16"])


@triton.jit
def storeall_verify_kernel(
    q,
    k,
    v,
    g,
    beta,
    state,
    init_slot,
    slots,
    parent,
    o,
    scale,
    H: tl.constexpr,
    HV: tl.constexpr,
    W: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    IS_CHAIN: tl.constexpr,
    BH0,
):
    i_v, i_bh = tl.program_id(0), tl.program_id(1) + BH0
    i_b, i_h = i_bh // HV, i_bh % HV
    i_hk = i_h // (HV // H)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    m_vk = m_v[:, None] & m_k[None, :]
    o_tile = (i_h * V + o_v[:, None]) * K + o_k[None, :]  # [BV, BK] within one slot

    i_slot0 = tl.load(init_slot + i_b).to(tl.int64)
    b_s = tl.load(state + i_slot0 * HV * V * K + o_tile, mask=m_vk, other=0.0).to(tl.float32)
    for t in range(W):
        if not IS_CHAIN:
            i_p = tl.load(parent + t)
            if i_p != t - 1:  # false at the root: parent[0] = -1 = t - 1
                # branch point: the parent's state is in its slot, written by this program
                tl.debug_barrier()
                i_ps = tl.load(slots + i_b * W + i_p).to(tl.int64)
                b_s = tl.load(state + i_ps * HV * V * K + o_tile, mask=m_vk, other=0.0).to(
                    tl.float32
                )
        o_qk = ((i_b * W + t).to(tl.int64) * H + i_hk) * K + o_k
        b_q = tl.load(q + o_qk, mask=m_k, other=0.0).to(tl.float32)
        b_k = tl.load(k + o_qk, mask=m_k, other=0.0).to(tl.float32)
        b_q = b_q * tl.rsqrt(tl.sum(b_q * b_q, 0) + 1e-6) * scale
        b_k = b_k * tl.rsqrt(tl.sum(b_k * b_k, 0) + 1e-6)
        o_tv = ((i_b * W + t).to(tl.int64) * HV + i_h) * V + o_v
        b_v = tl.load(v + o_tv, mask=m_v, other=0.0).to(tl.float32)
        o_th = (i_b * W + t).to(tl.int64) * HV + i_h
        b_g = tl.load(g + o_th)
        b_beta = tl.load(beta + o_th)

        b_s = b_s * tl.exp(b_g)
        b_vn = b_beta * (b_v - tl.sum(b_s * b_k[None, :], 1))  # pseudo-value [BV]
        b_s = b_s + b_vn[:, None] * b_k[None, :]
        b_o = tl.sum(b_s * b_q[None, :], 1)
        tl.store(o + o_tv, b_o.to(o.dtype.element_ty), mask=m_v)
        i_st = tl.load(slots + i_b * W + t).to(tl.int64)
        b_s_st = b_s.to(state.dtype.element_ty)
        tl.store(state + i_st * HV * V * K + o_tile, b_s_st, mask=m_vk)
        if not IS_CHAIN:
            # continue from the stored value, as a reload would see it
            b_s = b_s_st.to(tl.float32)


def storeall_verify(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_gate: torch.Tensor,
    beta: torch.Tensor,
    state_pool: torch.Tensor,
    init_slot: torch.Tensor,
    slots: torch.Tensor,
    parent: torch.Tensor,
    scale: float | None = None,
    *,
    is_chain: bool | None = None,
    out: torch.Tensor | None = None,
    config: dict | None = None,
) -> torch.Tensor:
    """Outputs of a draft window; the state after every node goes to ``slots[b, t]``.

    Args: as ``treewy_verify``, plus init_slot [B] int32 (committed state) and slots
    [B, W] int32 (one output slot per node; must differ from init_slot and each other).
    ``is_chain`` selects the chain kernel; when None it is read from ``parent``, which
    synchronises with the host (pass it explicitly under CUDA-graph capture).
    ``config``: {"block_v", "num_warps", "num_stages"} (default ``storeall_config``).
    Returns o [B, W, Hv, dv] in v's dtype.
    """
    bsz, w, hk, hv, dv = check_inputs(q, k, v, log_gate, beta, state_pool, parent)
    dk = q.shape[3]
    if slots.shape != (bsz, w) or slots.dtype != torch.int32:
        raise ValueError(f"slots must be int32 [B={bsz}, W={w}], got {slots.dtype} {slots.shape}")
    if init_slot.shape != (bsz,) or init_slot.dtype != torch.int32:
        raise ValueError(f"init_slot must be int32 [B={bsz}], got {init_slot.shape}")
    if is_chain is None:
        is_chain = parent.cpu().tolist() == list(range(-1, w - 1))
    if scale is None:
        scale = dk**-0.5
    bk = triton.next_power_of_2(dk)
    cfg = storeall_config(state_pool.dtype) if config is None else config
    # dv tile: 32 rows x full dk keeps the fp32 tile at 32 registers per thread (4 warps);
    # shrink it when there are too few programs to fill the GPU.
    bv = min(cfg["block_v"], triton.next_power_of_2(dv))
    while config is None and bv > 16 and bsz * hv * triton.cdiv(dv, bv) < 1024:
        bv //= 2
    o = torch.empty_like(v) if out is None else out
    for bh0, count in grid_chunks(bsz * hv):
        _launch(bh0, count, bv, cfg, q, k, v, log_gate, beta, state_pool, init_slot, slots,
                parent, o, scale, hk, hv, w, dk, dv, bk, is_chain)  # fmt: skip
    return o


def _launch(bh0, count, bv, cfg, q, k, v, log_gate, beta, state_pool, init_slot, slots,
            parent, o, scale, hk, hv, w, dk, dv, bk, is_chain) -> None:  # fmt: skip
    storeall_verify_kernel[(triton.cdiv(dv, bv), count)](
        q,
        k,
        v,
        log_gate,
        beta,
        state_pool,
        init_slot,
        slots,
        parent,
        o,
        scale,
        H=hk,
        HV=hv,
        W=w,
        K=dk,
        V=dv,
        BK=bk,
        BV=bv,
        IS_CHAIN=is_chain,
        BH0=bh0,
        num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"],
    )
