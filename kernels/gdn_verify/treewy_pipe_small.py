"""Pipelined persistent verify with the window math in the tile loop (opt-in, W <= 8).

Why (round 7, kernels/gdn_verify/NOTES.md section 7): the pipelined verify stream
(treewy_pipe.py, pipe_d) runs at ~79% of copy bandwidth, but stage 1 (the per-head window
kernel, its own launch before the stream) takes 38-54 us of its 211-232 us at T = 2..9,
B = 256: verify as a whole is at 63%. Here the window's [P, P] quantities are computed in
registers per tile by ``treewy_small.small_window_math`` (packed keys over queries, the
product-form (I + N)^-1 with one refinement step: the single-launch kernel's accuracy,
tested there at every depth), while the pipeliner's asynchronous copies bring the next
tile's state in: one launch, no [W, W] scratch, no stage 1. The window math is redone per
dv tile (``NV`` tiles per head; block_v 128 makes it once per head).

Shapes and bytes as treewy_stream.py's verify, without the stage-1 scratch. Verify and
deferred (the hoisted pending path of treewy_pending.py, its small kernel first); no
commit. Nothing runs at import.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._jit import packed_rows, pad_window, tile_coords, xdot
from .treewy_pending import launch_pending, pending_tile
from .treewy_pipe import resident_programs
from .treewy_small import SOLVE_PRECISION, small_window_math

__all__ = ["PIPE_SMALL_MAX_W", "launch_pipe_small", "treewy_pipe_small_kernel"]

PIPE_SMALL_MAX_W = 8  # HALF = 8: [16, 16] window math (HALF = 16 spilled, treewy_small.py)


@triton.jit
def treewy_pipe_small_kernel(
    q, k, v, g, beta, state, state_slot, parent, o, vt, pk, pvt, pscale, pgam, scale, NUM_TILES,
    H: tl.constexpr, HV: tl.constexpr, W: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    HALF: tl.constexpr, LOG2_HALF: tl.constexpr, P: tl.constexpr, BK: tl.constexpr,
    BKC: tl.constexpr, BV: tl.constexpr, NV: tl.constexpr, STATE_PREC: tl.constexpr,
    SMALL_PREC: tl.constexpr, SOLVE_PREC: tl.constexpr, GRAM_PREC: tl.constexpr,
    NATIVE: tl.constexpr, NUM_STAGES: tl.constexpr, WP: tl.constexpr, BWP: tl.constexpr,
    PENDING: tl.constexpr,
):  # fmt: skip
    """Tiles pid, pid + P, ...; tile = (request * HV + head) * NV + dv tile. Per tile: the
    window math, then X S^T (K S^T over Q S^T) BKC keys at a time, Vt, O, the stores.
    PENDING (deferred): the hoisted pending path (treewy_pending.py) applied to each state
    chunk first and the chunk stored back, as treewy_pipe_kernel."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    o_p, is_k, node, m_node = packed_rows(P, HALF, W)
    m_krow, m_qrow = is_k & m_node, (o_p >= HALF) & m_node
    for tile in tl.range(pid, NUM_TILES, nprog, num_stages=NUM_STAGES):
        # pid * 0 + tile: a tensor also in the interpreter (whose range gives ints)
        _, _, i_b, i_h, i_hk, o_v, m_v = tile_coords(pid * 0 + tile, NV, HV, H, BV, V)
        i_slot = tl.load(state_slot + i_b).to(tl.int64)
        p_s = state + ((i_slot * HV + i_h) * V + o_v[:, None]) * K
        _, _, _, b_beta, b_rn, _, b_lg, _, b_pm, b_t = small_window_math(
            q, k, g, beta, parent, scale, i_b, i_h, H, HV, W, K, HALF, LOG2_HALF, P, BK,
            SOLVE_PREC, GRAM_PREC, NATIVE,
        )  # fmt: skip
        o_xrow = ((i_b * W + node).to(tl.int64) * H + i_hk) * K
        if PENDING:
            b_pvt, b_pgam, m_ppath, o_prow = pending_tile(pscale, pgam, pvt, i_b, i_h, o_v, m_v,
                                                          H, HV, K, V, WP, BWP)  # fmt: skip
        b_xs = tl.zeros([P, BV], dtype=tl.float32)
        for i_kc in tl.static_range(0, BK, BKC):
            o_kc = i_kc + tl.arange(0, BKC)
            m_kc = o_kc < K
            m_vk = m_v[:, None] & m_kc[None, :]
            b_s = tl.load(p_s + o_kc[None, :], mask=m_vk, other=0.0)
            if PENDING:
                b_pk = tl.load(pk + o_prow + o_kc[None, :],
                               mask=m_ppath[:, None] & m_kc[None, :], other=0.0)  # fmt: skip
                b_sn = xdot(tl.trans(b_pvt), b_pk, b_pgam * b_s.to(tl.float32), STATE_PREC,
                            False, NATIVE)  # fmt: skip
                b_s = b_sn.to(state.dtype.element_ty)
                tl.store(p_s + o_kc[None, :], b_s, mask=m_vk)
            o_x = o_xrow[:, None] + o_kc[None, :]
            b_xk = tl.load(k + o_x, mask=m_krow[:, None] & m_kc[None, :], other=0.0)
            b_xq = tl.load(q + o_x, mask=m_qrow[:, None] & m_kc[None, :], other=0.0)
            b_x = tl.where(is_k[:, None], b_xk, b_xq)
            b_xs = xdot(b_x, tl.trans(b_s.to(tl.float32)), b_xs, STATE_PREC, True, NATIVE)
        o_vrow = ((i_b * W + node).to(tl.int64) * HV + i_h) * V
        b_v = tl.load(v + o_vrow[:, None] + o_v[None, :], mask=m_krow[:, None] & m_v[None, :],
                      other=0.0).to(tl.float32)  # fmt: skip
        b_gam = tl.exp(b_lg)
        b_rhs = tl.where(is_k[:, None], b_beta[:, None] * (b_v - (b_gam * b_rn)[:, None] * b_xs),
                         0.0)  # fmt: skip
        b_vt = tl.dot(b_t, b_rhs, input_precision=SMALL_PREC)  # rows >= HALF are zero
        b_cq = tl.where(is_k, 0.0, b_gam * b_rn * scale)
        b_o = b_cq[:, None] * b_xs + tl.dot(b_pm, b_vt, input_precision=SMALL_PREC)
        tl.store(o + o_vrow[:, None] + o_v[None, :], b_o.to(o.dtype.element_ty),
                 mask=m_qrow[:, None] & m_v[None, :])  # fmt: skip
        tl.store(vt + o_vrow[:, None] + o_v[None, :], b_vt, mask=m_krow[:, None] & m_v[None, :])


def launch_pipe_small(
    q, k, v, log_gate, beta, state_pool, state_slot, parent, o, vt, *, num_heads, scale: float,
    block_v: int, num_warps: int, ctas_per_sm: int, num_stages: int, prec, bkc: int = 32,
    maxnreg: int = 0, pending=None, k_out=None, g_out=None,
) -> None:  # fmt: skip
    """Launch the kernel on min(tiles, ctas_per_sm * SMs) programs (ctas_per_sm 0: as many
    as the compiled kernel's registers and shared memory let reside; 4 SMs off the GPU).
    ``pending`` = (k, vt, log_gate, parent, accepted) of the previous window (deferred,
    with ``k_out`` / ``g_out``): treewy_pending.launch_pending runs first."""
    hk, hv = num_heads
    bsz, w, _, dk = q.shape
    if w > PIPE_SMALL_MAX_W:
        raise ValueError(f"the pipelined window-math verify takes W <= {PIPE_SMALL_MAX_W}, got {w}")
    dv = v.shape[3]
    nv = triton.cdiv(dv, block_v)
    num_tiles = bsz * hv * nv
    sms = (torch.cuda.get_device_properties(q.device).multi_processor_count
           if q.device.type == "cuda" else 4)  # fmt: skip
    half = 8
    bk = triton.next_power_of_2(dk)
    if pending is not None:
        pk, pvt, wp = pending[0], pending[1], pending[0].shape[1]
        pscale, pgam, _ = launch_pending(q, k, log_gate, pending, k_out, g_out,
                                         num_heads=num_heads)  # fmt: skip
    else:
        pk, pvt, pscale, pgam, wp = k, vt, log_gate, log_gate, w
    args = (q, k, v, log_gate, beta, state_pool, state_slot, parent, o, vt, pk, pvt, pscale,
            pgam, scale, num_tiles)  # fmt: skip
    consts = {
        "H": hk, "HV": hv, "W": w, "K": dk, "V": dv, "HALF": half,
        "LOG2_HALF": half.bit_length() - 1, "P": 2 * half, "BK": bk, "BKC": min(bk, bkc),
        "BV": block_v, "NV": nv, "STATE_PREC": prec.state, "SMALL_PREC": prec.small,
        "SOLVE_PREC": SOLVE_PRECISION, "GRAM_PREC": prec.gram, "NATIVE": prec.native,
        "NUM_STAGES": num_stages, "WP": wp, "BWP": pad_window(wp)[0],
        "PENDING": pending is not None, "num_warps": num_warps,
        **({"maxnreg": maxnreg} if maxnreg and prec.native else {}),
    }  # fmt: skip
    if ctas_per_sm == 0:
        ctas_per_sm = resident_programs(args, consts, num_warps, q.device,
                                        kernel=treewy_pipe_small_kernel)  # fmt: skip
    treewy_pipe_small_kernel[(min(num_tiles, ctas_per_sm * sms),)](*args, **consts)
