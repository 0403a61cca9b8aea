"""TreeWY stage 2, pipelined persistent variant (opt-in, round 7 candidate).

Why (round 6, kernels/BENCHMARKS.md): the verify stream reads S_0 at ~45% of the copy
bandwidth (T = 4, B = 256, fp32). A program of ``treewy_stream_kernel`` loads its
[BV, dk] state tile into registers, then computes, then stores: at ~175 registers only
~5 two-warp programs fit per SM, and a program's load is in flight only during its own
load phase (~16 KB per program, ~24 KB per SM on average against the ~48 KB that
Little's law asks for at ~4.3 TB/s and ~1.5 us loaded latency). The round-6 persistent
kernel double-buffered the tile in registers and lost occupancy for it (401 vs 302 us).

``treewy_pipe_kernel`` runs a fixed grid that walks the (request, value head, dv tile)
tiles in a ``tl.range`` loop with ``num_stages`` = NUM_STAGES: Triton's software
pipeliner turns the loop's loads (the slot index, then the state tile, q/k, v and the
stage-1 scratch) into asynchronous copies into shared memory issued NUM_STAGES - 1 tiles
ahead (cp.async on sm_90, checked in the sm_90 SASS: ``LDGSTS``), so the bytes in flight
live in shared memory instead of registers. Same arithmetic per tile as
``treewy_stream_kernel`` (whole key dimension per tile, bf16x3 / tf32x3 products), so
the same accuracy contract. Modes: verify (STORE_VT) and deferred (PENDING: the previous
window's accepted path applied first, the state written back). Deferred takes the pending
path's coefficients hoisted out of the tile loop (treewy_pending.py: one [WP] vector and
one scalar per (request, head), from a small kernel or from stage 1): round 7 measured the
per-tile recomputation at 889-1394 us vs 468-590 for the round-6 deferred kernel.

Chosen by ``LaunchPolicy.pipe_verify`` / ``pipe_deferred`` (default None: off). Shapes
and bytes as treewy_stream.py. Nothing runs at import.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._jit import tile_coords, xdot
from .treewy_pending import launch_pending, pending_tile

__all__ = ["launch_pipe_stream", "occupancy", "resident_programs", "state_descriptor",
           "treewy_pipe_kernel", "window_rows"]


@triton.jit
def treewy_pipe_kernel(
    q,
    k,
    v,
    g,
    state,
    state_slot,
    m1,
    pm,
    ck,
    cq,
    o,
    vt,
    pk,
    pvt,
    pscale,
    pgam,
    pgram,
    sdesc,
    NUM_TILES,
    H: tl.constexpr,
    HV: tl.constexpr,
    W: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BW: tl.constexpr,
    BK: tl.constexpr,
    BKC: tl.constexpr,
    BV: tl.constexpr,
    NV: tl.constexpr,
    WP: tl.constexpr,
    BWP: tl.constexpr,
    STORE_VT: tl.constexpr,
    PENDING: tl.constexpr,
    GRAM: tl.constexpr,
    STATE_PREC: tl.constexpr,
    SMALL_PREC: tl.constexpr,
    NATIVE: tl.constexpr,
    NUM_STAGES: tl.constexpr,
    PACK: tl.constexpr = False,
    TMA: tl.constexpr = False,
    SLOT_AHEAD: tl.constexpr = False,
    EARLY_ROWS: tl.constexpr = False,
):
    """Tiles pid, pid + P, ... (P programs); tile = (request * HV + head) * NV + dv tile.

    Per tile, as treewy_stream_kernel: Vt = m1 (v - ck * (K S^T)), O = cq * (Q S^T) +
    pm Vt on raw (bf16) q and k; with PENDING the pending path is applied to S first and
    the result stored back (deferred commit). GRAM: K S^T and Q S^T come from the loaded
    S_c, then K S'^T = gamma_a K S_c^T + (K PK^T) PVt (the [W, WP] products from
    treewy_pending.py), so the updated tile only goes to memory, never back into the
    window products (no accumulator-to-operand layout change per key chunk). PACK
    (2 W <= BW): rows < W of one [BW, BKC] operand hold the keys, rows W..2W-1 the queries
    of the same nodes, so one product set gives K S^T (rows < W) and Q S^T (rows W..);
    the outputs are formed on rows W..2W-1 (pm, cq loaded shifted down by W rows).
    TMA (session 5; V % BV == 0): the state tile's [BV, BKC] chunks are loaded (and, with
    PENDING, stored) through ``sdesc``, a 2-D tensor descriptor over the pool viewed as
    [slots * HV * V, K] (Hopper's bulk tensor copies: no per-element addresses in
    registers, the store staged in shared memory instead of the register file).
    EARLY_ROWS (session 13; with PACK only): the packed key / query rows and the pending
    keys of chunk c + 1 are loaded (``window_rows``: keys and queries in one load through a
    [BW, BKC] tensor of pointers into k and q) before chunk c's state chunk is waited for,
    chunk 0's and v before the first (Triton 3.6 leaves these loads synchronous: in place,
    each chunk waited on an L2 round trip after its state chunk had arrived).
    """
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    o_w = tl.arange(0, BW)
    m_w = o_w < W
    m_ww = m_w[:, None] & m_w[None, :]
    # the packed operand's rows: node of each row, key rows (< W), query rows (W..2W-1)
    is_k = o_w < W
    node = tl.where(is_k, o_w, o_w - W) if PACK else o_w
    m_q = ((o_w >= W) & (o_w < 2 * W)) if PACK else m_w
    # SLOT_AHEAD: the next tile's pool slot is loaded one tile early and carried, so the
    # state load's address depends on no load of its own iteration
    i_slot_nx = tl.load(state_slot + (pid // NV) // HV, mask=pid < NUM_TILES, other=0)
    for tile in tl.range(pid, NUM_TILES, nprog, num_stages=NUM_STAGES):
        # pid * 0 + tile: a tensor also in the interpreter (whose range gives ints)
        i_v, i_bh, i_b, i_h, i_hk, o_v, m_v = tile_coords(pid * 0 + tile, NV, HV, H, BV, V)
        m_wv = m_w[:, None] & m_v[None, :]
        if SLOT_AHEAD:
            i_slot = i_slot_nx.to(tl.int64)
            i_nx = pid * 0 + tile + nprog
            i_slot_nx = tl.load(state_slot + (i_nx // NV) // HV, mask=i_nx < NUM_TILES, other=0)
        else:
            i_slot = tl.load(state_slot + i_b).to(tl.int64)
        p_s = state + ((i_slot * HV + i_h) * V + o_v[:, None]) * K
        r_s = ((i_slot * HV + i_h) * V + i_v * BV).to(tl.int32)  # the tile's first row (TMA)
        o_row = ((i_b * W + node[:, None]).to(tl.int64) * H + i_hk) * K
        if PENDING:
            # the pending path's coefficients, hoisted (treewy_pending.py): one [WP] vector
            # and one scalar per (request, head), 0 off the path and when nothing is pending
            b_pvt, b_pgam, m_ppath, o_prow = pending_tile(pscale, pgam, pvt, i_b, i_h, o_v, m_v,
                                                          H, HV, K, V, WP, BWP,
                                                          SLOT_AHEAD)  # fmt: skip
        b_sk = tl.zeros([BW, BV], dtype=tl.float32)
        b_sq = tl.zeros([BW, BV], dtype=tl.float32)
        if EARLY_ROWS:
            if not PENDING:
                m_ppath, o_prow = m_w, o_row  # unused: no pending rows are loaded
            b_kn, b_qn, b_pkn = window_rows(k, q, pk, o_row, o_prow, is_k, m_w, m_q, m_ppath,
                                            0, K, BKC, PENDING)  # fmt: skip
            b_v = tl.load(v + ((i_b * W + o_w[:, None]).to(tl.int64) * HV + i_h) * V
                          + o_v[None, :], mask=m_wv, other=0.0).to(tl.float32)  # fmt: skip
        for i_kc in tl.static_range(0, BK, BKC):
            o_kc = i_kc + tl.arange(0, BKC)
            m_kc = o_kc < K
            m_vk = m_v[:, None] & m_kc[None, :]
            if EARLY_ROWS:  # this chunk's rows arrived during the last chunk; fetch the next
                b_kraw, b_q, b_pk = b_kn, b_qn, b_pkn
                if i_kc + BKC < BK:
                    b_kn, b_qn, b_pkn = window_rows(k, q, pk, o_row, o_prow, is_k, m_w, m_q,
                                                    m_ppath, i_kc + BKC, K, BKC,
                                                    PENDING)  # fmt: skip
            if TMA:
                b_s = sdesc.load([r_s, i_kc]).to(tl.float32)
            else:
                b_s = tl.load(p_s + o_kc[None, :], mask=m_vk, other=0.0).to(tl.float32)
            if not EARLY_ROWS:
                b_kraw = tl.load(k + o_row + o_kc[None, :], mask=m_w[:, None] & m_kc[None, :],
                                 other=0.0)  # fmt: skip
            if PENDING and not EARLY_ROWS:
                if SLOT_AHEAD:  # every pending row read, the rows off the path zeroed
                    b_pk = tl.load(pk + o_prow + o_kc[None, :],
                                   mask=(tl.arange(0, BWP) < WP)[:, None] & m_kc[None, :],
                                   other=0.0)  # fmt: skip
                    b_pk = tl.where(m_ppath[:, None], b_pk, 0.0).to(pk.dtype.element_ty)
                else:
                    b_pk = tl.load(pk + o_prow + o_kc[None, :],
                                   mask=m_ppath[:, None] & m_kc[None, :], other=0.0)  # fmt: skip
            if PENDING:
                b_sn = xdot(tl.trans(b_pvt), b_pk, b_pgam * b_s, STATE_PREC, False, NATIVE)
                b_s_st = b_sn.to(state.dtype.element_ty)
                if TMA:
                    sdesc.store([r_s, i_kc], b_s_st)
                else:
                    tl.store(p_s + o_kc[None, :], b_s_st, mask=m_vk)
                if not GRAM:
                    b_s = b_s_st.to(tl.float32)
            if not EARLY_ROWS:
                b_q = tl.load(q + o_row + o_kc[None, :], mask=m_q[:, None] & m_kc[None, :],
                              other=0.0)  # fmt: skip
            if EARLY_ROWS:  # packed: one load holds both (window_rows)
                b_sk = xdot(b_kraw, tl.trans(b_s), b_sk, STATE_PREC, True, NATIVE)
            elif PACK:
                # one row is a key or a query, the other load is 0 there: the sum is exact
                b_sk = xdot(b_kraw + b_q, tl.trans(b_s), b_sk, STATE_PREC, True, NATIVE)
            else:
                b_sk = xdot(b_kraw, tl.trans(b_s), b_sk, STATE_PREC, True, NATIVE)
                b_sq = xdot(b_q, tl.trans(b_s), b_sq, STATE_PREC, True, NATIVE)
        if PENDING and GRAM:
            o_p = tl.arange(0, BWP)
            o_g = i_bh.to(tl.int64) * 2 * W * WP + o_w[:, None] * WP + o_p[None, :]
            m_g = m_w[:, None] & (o_p < WP)[None, :]
            b_kp = tl.load(pgram + o_g, mask=m_g, other=0.0)
            b_sk = b_pgam * b_sk + tl.dot(b_kp, b_pvt, input_precision=SMALL_PREC)
            b_qp = tl.load(pgram + W * WP + o_g, mask=m_g, other=0.0)
            b_sq = b_pgam * b_sq + tl.dot(b_qp, b_pvt, input_precision=SMALL_PREC)
        o_ww = i_bh.to(tl.int64) * W * W + o_w[:, None] * W + o_w[None, :]
        o_bw = i_bh.to(tl.int64) * W + o_w
        o_wv = ((i_b * W + o_w[:, None]).to(tl.int64) * HV + i_h) * V + o_v[None, :]
        b_ck = tl.load(ck + o_bw, mask=m_w, other=0.0)
        if not EARLY_ROWS:
            b_v = tl.load(v + o_wv, mask=m_wv, other=0.0).to(tl.float32)
        b_m1 = tl.load(m1 + o_ww, mask=m_ww, other=0.0)
        b_vt = tl.dot(b_m1, b_v - b_ck[:, None] * b_sk, input_precision=SMALL_PREC)
        if PACK:
            # rows W..2W-1: Q S^T of node row - W; v and ck are 0 there, so the rows of
            # b_vt >= W are 0 (m1 is 0 outside [W, W]); outputs formed on rows W..2W-1
            b_cq = tl.load(cq + i_bh.to(tl.int64) * W + node, mask=m_q, other=0.0)
            b_pm = tl.load(pm + i_bh.to(tl.int64) * W * W + node[:, None] * W + o_w[None, :],
                           mask=m_q[:, None] & m_w[None, :], other=0.0)  # fmt: skip
            b_o = b_cq[:, None] * b_sk + tl.dot(b_pm, b_vt, input_precision=SMALL_PREC)
            o_ov = ((i_b * W + node[:, None]).to(tl.int64) * HV + i_h) * V + o_v[None, :]
            tl.store(o + o_ov, b_o.to(o.dtype.element_ty), mask=m_q[:, None] & m_v[None, :])
        else:
            b_cq = tl.load(cq + o_bw, mask=m_w, other=0.0)
            b_pm = tl.load(pm + o_ww, mask=m_ww, other=0.0)
            b_o = b_cq[:, None] * b_sq + tl.dot(b_pm, b_vt, input_precision=SMALL_PREC)
            tl.store(o + o_wv, b_o.to(o.dtype.element_ty), mask=m_wv)
        if STORE_VT:
            tl.store(vt + o_wv, b_vt, mask=m_wv)


@triton.jit
def window_rows(k, q, pk, o_row, o_prow, is_k, m_w, m_q, m_ppath, KC0: tl.constexpr,
                K: tl.constexpr, BKC: tl.constexpr, PENDING: tl.constexpr):
    """(packed rows, the same again, pending keys) [BW, BKC] / [BWP, BKC] bf16 of key chunk
    KC0 (EARLY_ROWS, packed windows): rows < W keys and rows W..2W-1 queries, loaded at
    once through a tensor of pointers into k and q; without PENDING the third is unused
    (the packed rows returned again)."""
    o_kc = KC0 + tl.arange(0, BKC)
    m_kc = o_kc < K
    p_kq = tl.where(is_k[:, None], k + o_row + o_kc[None, :], q + o_row + o_kc[None, :])
    b_k = tl.load(p_kq, mask=(m_w | m_q)[:, None] & m_kc[None, :], other=0.0)
    b_q = b_k
    if PENDING:
        b_pk = tl.load(pk + o_prow + o_kc[None, :], mask=m_ppath[:, None] & m_kc[None, :],
                       other=0.0)  # fmt: skip
    else:
        b_pk = b_k
    return b_k, b_q, b_pk


def launch_pipe_stream(
    q, k, v, log_gate, state_pool, state_slot, mats, cols, o, vt, *, num_heads, block_v: int,
    num_warps: int, ctas_per_sm: int, num_stages: int, prec, bkc: int = 128, pending=None,
    k_out=None, g_out=None, hoisted=None, maxnreg: int = 0, gram: bool = False,
    pack: bool = False, tma: bool = False, slot_ahead: bool = False, early_rows: bool = False,
) -> None:  # fmt: skip
    """Launch the pipelined verify / deferred stream after stage 1 (``mats``, ``cols`` of
    treewy_prep.launch_prep); grid = min(tiles, ctas_per_sm * SMs) (4 SMs off the GPU, so
    the interpreter walks several tiles per program). ``pending`` = (k, vt, log_gate,
    parent, accepted) of the previous window (deferred), with ``k_out`` / ``g_out``;
    ``hoisted`` = (pscale, pgam, pgram) when stage 1 computed them (treewy_prep PENDING),
    else treewy_pending.launch_pending runs first. ``maxnreg`` > 0 caps the registers (GPU
    compile only); ``gram``: the deferred GRAM mode (``hoisted`` must then hold pgram);
    ``pack``: keys and queries in one operand where 2 W <= BW (ignored elsewhere);
    ``tma``: the state tile through a tensor descriptor (state_descriptor; ignored where
    it does not apply); ``slot_ahead``: each tile's pool slot loaded one tile early;
    ``early_rows``: where the keys and queries are packed, the window's rows of the next
    key chunk loaded before this chunk's state (not with slot_ahead, whose pending rows are
    read flat; elsewhere the packed kernel alone, whose registers it would raise to ~240
    at W = 9 on sm_90)."""
    if early_rows and slot_ahead:
        raise ValueError("early_rows cannot be combined with slot_ahead")
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
    if pending is not None:
        pk, pvt = pending[0], pending[1]
        wp = pk.shape[1]
        if hoisted is None:
            hoisted = launch_pending(q, k, log_gate, pending, k_out, g_out, num_heads=num_heads,
                                     gram=gram, gram_prec=prec.gram)  # fmt: skip
        pscale, pgam, pgram = hoisted
    else:
        pk, pvt, pscale, pgam, pgram = k, o, log_gate, log_gate, log_gate
        wp = w
    bwp = max(16, triton.next_power_of_2(wp))
    bkc = min(bkc, triton.next_power_of_2(dk))
    sdesc = state_descriptor(state_pool, block_v, bkc) if tma else None
    args = (
        q, k, v, log_gate, state_pool, state_slot, mats[0], mats[1], cols[0], cols[1], o,
        vt if vt is not None else o, pk, pvt, pscale, pgam, pgram,
        state_pool if sdesc is None else sdesc, num_tiles,
    )  # fmt: skip
    consts = {
        "H": hk, "HV": hv, "W": w, "K": dk, "V": dv, "BW": bw, "BK": triton.next_power_of_2(dk),
        "BKC": bkc, "BV": block_v, "NV": nv, "WP": wp,
        "BWP": bwp, "STORE_VT": vt is not None, "PENDING": pending is not None,
        "GRAM": gram and pending is not None, "STATE_PREC": prec.state,
        "SMALL_PREC": prec.small, "NATIVE": prec.native,
        "NUM_STAGES": num_stages, "num_warps": num_warps,
        "PACK": pack and not gram and 2 * w <= bw, "TMA": sdesc is not None,
        "SLOT_AHEAD": slot_ahead, "EARLY_ROWS": early_rows and pack and not gram and 2 * w <= bw,
        **({"maxnreg": maxnreg} if maxnreg and prec.native else {}),
    }  # fmt: skip
    if ctas_per_sm == 0:
        ctas_per_sm = resident_programs(args, consts, num_warps, q.device)
    grid = (min(num_tiles, ctas_per_sm * sms),)
    treewy_pipe_kernel[grid](*args, **consts)


def state_descriptor(state_pool: torch.Tensor, block_v: int, bkc: int):
    """A host-side tensor descriptor over the pool [slots, Hv, dv, dk] viewed as
    [slots * Hv * dv, dk] with [block_v, bkc] boxes, or None where a box could straddle two
    heads (dv % block_v != 0) or the pool's layout does not allow one (not contiguous,
    rows not 16-byte multiples)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    slots, hv, dv, dk = state_pool.shape
    row_bytes = dk * state_pool.element_size()
    if dv % block_v or not state_pool.is_contiguous() or row_bytes % 16 or bkc > dk:
        return None
    return TensorDescriptor(state_pool, [slots * hv * dv, dk], [dk, 1], [block_v, bkc])


# programs per SM when the compiled kernel cannot be inspected (kept low: programs past
# what fits would run as a second wave of whole tile lists)
FALLBACK_PROGRAMS_PER_SM = 2
# registers are allocated per warp in units of 256; shared memory per program also
# reserves 1 KB (CUDA occupancy rules, compute capability 9.0)
_REG_UNIT = 256
_SMEM_RESERVED_BYTES = 1024


def occupancy(
    regs: int,
    smem_bytes: int,
    num_warps: int,
    *,
    regs_per_sm: int = 65536,
    smem_per_sm_bytes: int = 233472,
    max_warps: int = 64,
    max_ctas: int = 32,
) -> int:
    """Programs of ``num_warps`` warps that fit on one SM with ``regs`` registers per thread
    and ``smem_bytes`` of shared memory per program (H200 / sm_90 limits by default)."""
    per_warp = -(-regs * 32 // _REG_UNIT) * _REG_UNIT
    by_regs = regs_per_sm // (per_warp * num_warps)
    by_smem = smem_per_sm_bytes // (smem_bytes + _SMEM_RESERVED_BYTES)
    return max(1, min(by_regs, by_smem, max_warps // num_warps, max_ctas))


def resident_programs(args, consts: dict, num_warps: int, device, kernel=None) -> int:
    """Programs per SM of this launch of ``kernel`` (default treewy_pipe_kernel), from the
    compiled kernel's registers and shared memory (4 off the GPU, where the interpreter
    has no compiled kernel)."""
    if device.type != "cuda":
        return 4
    from triton.runtime import driver

    kernel = (treewy_pipe_kernel if kernel is None else kernel).warmup(*args, grid=(1,),
                                                                      **consts)  # fmt: skip
    kernel._init_handles()
    index = device.index if device.index is not None else torch.cuda.current_device()
    props = driver.active.utils.get_device_properties(index)
    return occupancy(kernel.n_regs, kernel.metadata.shared, num_warps,
                     regs_per_sm=props.get("max_num_regs", 65536))  # fmt: skip
