"""The deferred commit's pending-path coefficients, once per (request, value head).

Why (round 7, kernels/gdn_verify/NOTES.md section 7): the pipelined deferred stream
(treewy_pipe.py) recomputed the pending path's coefficients in every (request, value
head, dv tile) tile: the ancestor mask (three fp16 products), the segment sums and two
passes over the pending keys for their norms; it ran 1.8-2.5x slower than the round-6
deferred kernel (T = 4 B = 256 fp32: 901 us vs 491). Here they are computed once per
(request, value head), so the tile loop only streams the state and the path's rows:

    pscale[i] = exp(L_a - L_i) / |k_i|   (i on the pending path, 0 elsewhere)   [WP]
    pgam      = exp(L_a)                   (1 when nothing is pending)

with L_a - L_i the masked sum of the path's gates after i (``_jit.path_scale``, the same
numbers as the round-6 deferred kernel's per-tile walk). The same program copies this
window's gates (every head) and keys (the first value head of a group) into the next
step's pending buffers, which the stream then no longer writes.

``pending_prologue`` is the device helper; ``treewy_pending_kernel`` runs it alone (grid
B * Hv) and ``treewy_prep_kernel`` runs it inside stage 1 when asked (one launch fewer).
Bytes per (request, value head): reads the path's keys (<= WP*dk*2, shared by the
group), the pending gates (WP*4), this window's gates (W*4) and keys (W*dk*2 per group);
writes pscale (WP*4), pgam (4), the gates (W*4) and keys (W*dk*2 per group). Nothing runs
at import.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._jit import pad_window, path_scale

__all__ = ["launch_pending", "pending_prologue", "pending_tile", "treewy_pending_kernel"]

PENDING_BLOCK_K = 32  # key chunk of the norms and the key copy


@triton.jit
def pending_prologue(
    i_b, i_h, q, k, g, pk, pg, pparent, paccepted, pscale, pgam, pgram, k_out, g_out,
    H: tl.constexpr, HV: tl.constexpr, W: tl.constexpr, K: tl.constexpr, BW: tl.constexpr,
    BK: tl.constexpr, BKC: tl.constexpr, WP: tl.constexpr, BWP: tl.constexpr,
    GRAM: tl.constexpr, GRAM_PREC: tl.constexpr,
):  # fmt: skip
    """pscale [WP] and pgam of (request i_b, value head i_h); this window's gates and
    (first head of a group) keys copied to g_out / k_out. GRAM: also the raw products of
    this window's keys and queries with the pending path's keys, K PK^T and Q PK^T
    ([W, WP] each, at pgram + (i_bh * 2 + {0, 1}) * W * WP; rows off the path are 0)."""
    i_hk = i_h // (HV // H)
    i_bh = i_b * HV + i_h
    o_p = tl.arange(0, BWP)
    m_p = o_p < WP
    o_w = tl.arange(0, BW)
    m_w = o_w < W
    o_row = ((i_b * W + o_w[:, None]).to(tl.int64) * H + i_hk) * K
    i_pa = tl.load(paccepted + i_b)  # -1: nothing pending
    b_coef, b_la = path_scale(pparent, pg + i_b * WP * HV + i_h, i_pa, WP, BWP, HV)
    m_path = (b_coef != 0.0) & m_p
    o_prow = ((i_b * WP + o_p[:, None]).to(tl.int64) * H + i_hk) * K
    b_k2 = tl.zeros([BWP], dtype=tl.float32)
    b_kp = tl.zeros([BW, BWP], dtype=tl.float32)
    b_qp = tl.zeros([BW, BWP], dtype=tl.float32)
    for i_kc in tl.static_range(0, BK, BKC):
        o_k = i_kc + tl.arange(0, BKC)
        m_k = o_k < K
        b_pk = tl.load(pk + o_prow + o_k[None, :], mask=m_path[:, None] & m_k[None, :],
                       other=0.0).to(tl.float32)  # fmt: skip
        b_k2 += tl.sum(b_pk * b_pk, 1)
        if GRAM:
            m_wk = m_w[:, None] & m_k[None, :]
            b_kc = tl.load(k + o_row + o_k[None, :], mask=m_wk, other=0.0).to(tl.float32)
            b_qc = tl.load(q + o_row + o_k[None, :], mask=m_wk, other=0.0).to(tl.float32)
            b_kp += tl.dot(b_kc, tl.trans(b_pk), input_precision=GRAM_PREC)
            b_qp += tl.dot(b_qc, tl.trans(b_pk), input_precision=GRAM_PREC)
    b_sc = tl.where(m_path, b_coef * tl.rsqrt(b_k2 + 1e-6), 0.0)
    tl.store(pscale + i_bh.to(tl.int64) * WP + o_p, b_sc, mask=m_p)
    tl.store(pgam + i_bh, tl.exp(b_la))
    if GRAM:
        o_g = i_bh.to(tl.int64) * 2 * W * WP + o_w[:, None] * WP + o_p[None, :]
        m_g = m_w[:, None] & m_p[None, :]
        tl.store(pgram + o_g, b_kp, mask=m_g)
        tl.store(pgram + W * WP + o_g, b_qp, mask=m_g)
    # hand this window's gates (every head) and keys (one head per group) to the next step
    o_wh = (i_b * W + o_w).to(tl.int64) * HV + i_h
    tl.store(g_out + o_wh, tl.load(g + o_wh, mask=m_w, other=0.0), mask=m_w)
    # rows of W only for the group's first head (a vector mask: the interpreter rejects a
    # broadcast scalar bool)
    m_wr = (o_w + (i_h % (HV // H)) * BW) < W
    for i_kc in tl.static_range(0, BK, BKC):
        o_k = i_kc + tl.arange(0, BKC)
        m_wk = m_wr[:, None] & (o_k < K)[None, :]
        tl.store(k_out + o_row + o_k[None, :], tl.load(k + o_row + o_k[None, :], mask=m_wk),
                 mask=m_wk)  # fmt: skip


@triton.jit
def pending_tile(
    pscale, pgam, pvt, i_b, i_h, o_v, m_v, H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr,
    V: tl.constexpr, WP: tl.constexpr, BWP: tl.constexpr, FLAT: tl.constexpr = False,
):  # fmt: skip
    """What a stream tile needs of the hoisted pending path: (b_pvt [BWP, BV] = the path's
    pseudo-values times pscale, pgam, m_ppath [BWP], o_prow [BWP, 1] row offsets of the
    pending keys). Rows off the path are neither read nor applied. FLAT: every one of the
    WP rows is read and the rows off the path zeroed after the load, so no load's mask
    depends on another load (Triton's pipeliner then keeps every load at one level)."""
    i_hk = i_h // (HV // H)
    i_bh = i_b * HV + i_h
    o_p = tl.arange(0, BWP)
    m_p = o_p < WP
    b_psc = tl.load(pscale + i_bh.to(tl.int64) * WP + o_p, mask=m_p, other=0.0)
    b_pgam = tl.load(pgam + i_bh)
    m_ppath = (b_psc != 0.0) & m_p
    p_pvt = pvt + ((i_b * WP + o_p[:, None]).to(tl.int64) * HV + i_h) * V + o_v[None, :]
    if FLAT:
        b_pvt = tl.load(p_pvt, mask=m_p[:, None] & m_v[None, :], other=0.0)
        b_pvt = tl.where(m_ppath[:, None], b_pvt, 0.0)
    else:
        b_pvt = tl.load(p_pvt, mask=m_ppath[:, None] & m_v[None, :], other=0.0)
    o_prow = ((i_b * WP + o_p[:, None]).to(tl.int64) * H + i_hk) * K
    return b_pvt * b_psc[:, None], b_pgam, m_ppath, o_prow


@triton.jit
def treewy_pending_kernel(
    q, k, g, pk, pg, pparent, paccepted, pscale, pgam, pgram, k_out, g_out,
    H: tl.constexpr, HV: tl.constexpr, W: tl.constexpr, K: tl.constexpr, BW: tl.constexpr,
    BK: tl.constexpr, BKC: tl.constexpr, WP: tl.constexpr, BWP: tl.constexpr,
    GRAM: tl.constexpr, GRAM_PREC: tl.constexpr,
):  # fmt: skip
    """One program per (request, value head): ``pending_prologue`` alone."""
    i_bh = tl.program_id(0)
    pending_prologue(i_bh // HV, i_bh % HV, q, k, g, pk, pg, pparent, paccepted, pscale, pgam,
                     pgram, k_out, g_out, H, HV, W, K, BW, BK, BKC, WP, BWP, GRAM,
                     GRAM_PREC)  # fmt: skip


def pending_buffers(bsz: int, hv: int, w: int, wp: int, gram: bool, device) -> tuple:
    """(pscale [B*Hv, WP], pgam [B*Hv], pgram [B*Hv, 2, W, WP] or pscale when not gram)
    fp32 scratch of the hoisted pending path."""
    pscale = torch.empty((bsz * hv, wp), dtype=torch.float32, device=device)
    pgam = torch.empty((bsz * hv,), dtype=torch.float32, device=device)
    pgram = (torch.empty((bsz * hv, 2, w, wp), dtype=torch.float32, device=device) if gram
             else pscale)  # fmt: skip
    return pscale, pgam, pgram


def pending_consts(k: torch.Tensor, wp: int, hk: int, hv: int, gram: bool, gram_prec: str) -> dict:
    """The compile-time arguments of ``pending_prologue`` for window keys ``k``."""
    w, dk = k.shape[1], k.shape[3]
    bk = triton.next_power_of_2(dk)
    return {"H": hk, "HV": hv, "W": w, "K": dk, "BW": pad_window(w)[0], "BK": bk,
            "BKC": min(bk, PENDING_BLOCK_K), "WP": wp, "BWP": pad_window(wp)[0],
            "GRAM": gram, "GRAM_PREC": gram_prec}  # fmt: skip


def launch_pending(q, k, log_gate, pending, k_out, g_out, *, num_heads, gram: bool = False,
                   gram_prec: str = "tf32") -> tuple:  # fmt: skip
    """Launch ``treewy_pending_kernel`` (grid B * Hv, 1 warp); ``pending`` = (k, vt,
    log_gate, parent, accepted) of the previous window. Returns (pscale, pgam, pgram)."""
    hk, hv = num_heads
    pk, _, pg, pparent, paccepted = pending
    bsz, wp = pk.shape[0], pk.shape[1]
    bufs = pending_buffers(bsz, hv, k.shape[1], wp, gram, k.device)
    treewy_pending_kernel[(bsz * hv,)](
        q, k, log_gate, pk, pg, pparent, paccepted, *bufs, k_out, g_out,
        **pending_consts(k, wp, hk, hv, gram, gram_prec), num_warps=1,
    )  # fmt: skip
    return bufs
