"""TreeWY stage 2, persistent variant (opt-in): the verify stream with prefetched state tiles.

Round 5 measured the verify stream at 2.4x its own read floor (T = 4, B = 256, fp32):
each (request, value head, dv tile) program waits for its state tile, then computes, and
at ~179 registers only ~5 programs per SM are resident, too few bytes in flight to cover
the DRAM latency. ``treewy_persistent_stream_kernel`` runs a fixed grid (``ctas_per_sm``
programs per SM) that walks the tiles and loads the *next* tile's state before computing
the current one (a register double buffer), so one tile's load is always in flight
behind the math. Same arithmetic as ``treewy_stream_kernel`` (verify only, whole key
dimension per tile), so the same accuracy contract. Chosen by
``LaunchPolicy.persistent_ctas_per_sm`` > 0 (default 0: off, the round-5 kernel), for
verify without a pending path or commit.

Shapes and bytes as treewy_stream.py's verify: per (request, value head) reads S_0
(dv*dk*s), q/k (W*dk*2 each), v (W*dv*2), stage-1 scratch (2*W*W*4 + 2*W*4, L2); writes
o (W*dv*2) and vt (W*dv*4). Nothing runs at import.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._jit import xdot

__all__ = [
    "PERSISTENT_BLOCK_V",
    "PERSISTENT_MAX_BW",
    "PERSISTENT_WARPS",
    "launch_persistent_stream",
    "treewy_persistent_stream_kernel",
]

# Compiled for sm_90 on the CPU (bench/resources.py's compiler path, 35B heads, fp32 state):
# 4 warps, 32-row dv tile: 180 registers at W = 4, 208 at W = 15, no spills; 2 warps: 255;
# W = 40 (BW = 64, 64-row tile): 255 registers and 728 bytes of spills, so the variant is
# offered only for BW <= PERSISTENT_MAX_BW.
PERSISTENT_BLOCK_V = 32
PERSISTENT_WARPS = 4
PERSISTENT_MAX_BW = 32


@triton.jit
def _state_tile(state, state_slot, tile, NUM_TILES, HV: tl.constexpr, K: tl.constexpr,
                V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, NV: tl.constexpr):  # fmt: skip
    """The [BV, BK] fp32 state tile of ``tile`` (dv tile fastest); zeros past the end."""
    t = tl.minimum(tile, NUM_TILES - 1)
    i_v, i_bh = t % NV, t // NV
    i_b, i_h = i_bh // HV, i_bh % HV
    i_slot = tl.load(state_slot + i_b).to(tl.int64)
    o_v = i_v * BV + tl.arange(0, BV)
    o_k = tl.arange(0, BK)
    p_s = state + ((i_slot * HV + i_h) * V + o_v[:, None]) * K + o_k[None, :]
    ok = (tl.zeros([BV], dtype=tl.int32) + tile) < NUM_TILES  # a vector: see treewy_small
    m = ((o_v < V) & ok)[:, None] & (o_k < K)[None, :]
    return tl.load(p_s, mask=m, other=0.0).to(tl.float32)


@triton.jit
def treewy_persistent_stream_kernel(
    q,
    k,
    v,
    state,
    state_slot,
    m1,
    pm,
    ck,
    cq,
    o,
    vt,
    NUM_TILES,
    H: tl.constexpr,
    HV: tl.constexpr,
    W: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BW: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    NV: tl.constexpr,
    STATE_PREC: tl.constexpr,
    SMALL_PREC: tl.constexpr,
    NATIVE: tl.constexpr,
):
    """Tiles pid, pid + P, ... (P programs); tile = (request * HV + head) * NV + dv tile.

    Vt = m1 (v - ck * (K S^T)), O = cq * (Q S^T) + pm Vt, as treewy_stream_kernel.
    """
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    o_w = tl.arange(0, BW)
    o_k = tl.arange(0, BK)
    m_w, m_k = o_w < W, o_k < K
    m_wk = m_w[:, None] & m_k[None, :]
    m_ww = m_w[:, None] & m_w[None, :]
    b_next = _state_tile(state, state_slot, pid, NUM_TILES, HV, K, V, BK, BV, NV)
    for tile in range(pid, NUM_TILES, nprog):
        b_s = b_next
        # the next tile's DRAM load is issued before this tile's math
        b_next = _state_tile(state, state_slot, tile + nprog, NUM_TILES, HV, K, V, BK, BV, NV)
        i_t = pid * 0 + tile  # a tensor also in the interpreter (whose range gives ints)
        i_v, i_bh = i_t % NV, i_t // NV
        i_b, i_h = i_bh // HV, i_bh % HV
        i_hk = i_h // (HV // H)
        o_v = i_v * BV + tl.arange(0, BV)
        m_wv = m_w[:, None] & (o_v < V)[None, :]
        o_row = ((i_b * W + o_w[:, None]).to(tl.int64) * H + i_hk) * K
        b_kraw = tl.load(k + o_row + o_k[None, :], mask=m_wk, other=0.0)
        b_q = tl.load(q + o_row + o_k[None, :], mask=m_wk, other=0.0)
        b_sk = xdot(b_kraw, tl.trans(b_s), tl.zeros([BW, BV], dtype=tl.float32), STATE_PREC,
                    True, NATIVE)  # fmt: skip
        b_sq = xdot(b_q, tl.trans(b_s), tl.zeros([BW, BV], dtype=tl.float32), STATE_PREC,
                    True, NATIVE)  # fmt: skip
        o_ww = i_bh.to(tl.int64) * W * W + o_w[:, None] * W + o_w[None, :]
        o_bw = i_bh.to(tl.int64) * W + o_w
        o_wv = ((i_b * W + o_w[:, None]).to(tl.int64) * HV + i_h) * V + o_v[None, :]
        b_ck = tl.load(ck + o_bw, mask=m_w, other=0.0)
        b_v = tl.load(v + o_wv, mask=m_wv, other=0.0).to(tl.float32)
        b_m1 = tl.load(m1 + o_ww, mask=m_ww, other=0.0)
        b_vt = tl.dot(b_m1, b_v - b_ck[:, None] * b_sk, input_precision=SMALL_PREC)
        b_cq = tl.load(cq + o_bw, mask=m_w, other=0.0)
        b_pm = tl.load(pm + o_ww, mask=m_ww, other=0.0)
        b_o = b_cq[:, None] * b_sq + tl.dot(b_pm, b_vt, input_precision=SMALL_PREC)
        tl.store(o + o_wv, b_o.to(o.dtype.element_ty), mask=m_wv)
        tl.store(vt + o_wv, b_vt, mask=m_wv)


def launch_persistent_stream(
    q, k, v, state_pool, state_slot, mats, cols, o, vt, *, num_heads, block_v: int,
    num_warps: int, ctas_per_sm: int, prec,
) -> None:  # fmt: skip
    """Launch the persistent verify stream after stage 1 (``mats``, ``cols`` of
    treewy_prep.launch_prep); grid = min(tiles, ctas_per_sm * SMs) (4 SMs off the GPU,
    so the interpreter walks several tiles per program)."""
    hk, hv = num_heads
    bsz, w, _, dk = q.shape
    dv = v.shape[3]
    bw = max(16, triton.next_power_of_2(w))
    nv = triton.cdiv(dv, block_v)
    num_tiles = bsz * hv * nv
    sms = (
        torch.cuda.get_device_properties(q.device).multi_processor_count
        if q.device.type == "cuda"
        else 4
    )
    grid = (min(num_tiles, ctas_per_sm * sms),)
    treewy_persistent_stream_kernel[grid](
        q, k, v, state_pool, state_slot, mats[0], mats[1], cols[0], cols[1], o, vt, num_tiles,
        H=hk, HV=hv, W=w, K=dk, V=dv, BW=bw, BK=triton.next_power_of_2(dk), BV=block_v, NV=nv,
        STATE_PREC=prec.state, SMALL_PREC=prec.small, NATIVE=prec.native, num_warps=num_warps,
    )  # fmt: skip
