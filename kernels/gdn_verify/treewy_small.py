"""Single-launch TreeWY for small windows (W <= 16): verify, fused commit, deferred commit.

Round 4 (kernels/BENCHMARKS.md). At W <= 16 the two-launch path of treewy.py spends
more time on its per-head window kernel, the second launch and the [W, W] scratch round
trip than on the state (T = 4, B = 256, fp32: 352 us of verify for a 136 us floor). Here
one program per (request, value head, dv tile) does everything, with the window math
recomputed per dv tile while the state tile's loads are in flight:

* The state tile [BV, dk] is loaded first, whole (no key chunks), so the DRAM latency
  overlaps the window math below.
* Keys and queries are **packed** into one [2*HALF, dk] tile X (rows < HALF: k of node r,
  rows >= HALF: q of node r - HALF; HALF = 8 or 16), so one product X X^T gives
  K K^T, Q K^T and both l2-norms (its diagonal), and one product X S^T gives K S^T and
  Q S^T. Raw bf16 q/k are exact in tf32, so X X^T is fp32-accurate.
* Products of two bf16 tiles run as bf16 tensor-core products on a GPU (exact products,
  fp32 sums); Triton's CPU interpreter computes bf16 x bf16 ``tl.dot`` wrongly (checked:
  errors of 1e10), so off the GPU (``NATIVE_DOT`` False) they take fp32 operands, the
  same numbers. The GPU path is checked against float64 by ``bench/run.py``'s checks.
* The ancestor mask is built in the packed index space by doubling (fp16 0/1 products,
  exact, as ``_jit.ancestor_mask``): row r's node is r mod HALF, columns are k nodes.
* (I + N)^-1 for the strictly lower N of the k block (N^HALF = 0) is the product
  (I - N)(I + N^2)(I + N^4)... : log2(HALF) squarings and products of [2*HALF]^2
  matrices in "tf32x3" (fp32-grade on tensor cores), then one refinement step
  T += T (I - (I + N) T). Without it the worst case (beta = 1, gates = 1, parallel
  keys, W = 16: intermediate entries up to C(15, 7) = 6435) lost ~1e-4 relative in
  fp32 against 1.4e-7 for a serial solve; with it, 1e-7 (tests). W = 40 keeps the
  blocked serial solve of treewy.py.
* Vt = (I + N)^-1 (beta * (v - gamma/|k| * K S^T)) and O = gamma*scale/|q| * Q S^T +
  PM Vt, PM the decay-masked Q K^T, both in the same packed space (Vt lives in the
  k rows, O in the q rows).
* COMMIT (fused): S_a = gamma_a S + sum over the path of a of exp(L_a - L_i) vt_i k_i^T
  / |k_i|, from the registers: the state is read once and written once.
* PENDING (deferred): the previous window's accepted path is applied to the state tile
  first (S read once, written once), then this window is verified from it; this
  window's k and gates are handed to the next step.

Shapes as treewy_stream.py (q, k [B, W, Hk, dk]; v [B, W, Hv, dv]; pool [slots, Hv, dv, dk]).
Bytes per (request, value head): reads S_0 (dv*dk*s), q/k (W*dk*2 each, shared by the
Hv/Hk heads of a group and by the dv tiles: L2 hits), v (W*dv*2), gates and betas
(W*4 each); writes o (W*dv*2) and, for verify, vt (W*dv*4). COMMIT: + one state written.
PENDING: + the pending k, vt, gates read and one state written (REPLAY: the ring read,
the state written only where flushed; no hand-off). No [W, W] scratch in memory.

Nothing runs at import.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._jit import (
    DotPrecision,
    chain_scale,
    grid_chunks,
    packed_rows,
    path_scale,
    pick_block_v,
    segment_log_decay,
    xdot,
)
from .policy import DEFAULT_POLICY, LaunchPolicy
from .treewy_inputs import pending_operands

__all__ = ["KERNEL_MAX_W", "launch_small", "small_window_math"]

# the kernel takes windows up to HALF = 16 (tested); which windows use it is the launch
# policy's (LaunchPolicy.small_max_w = 8: at W = 15 it was 0.35-0.69x the two-launch path
# on the H200 at every B, round 4: [32, 32] window math per dv tile, 255 registers with
# spills)
KERNEL_MAX_W = 16
# [2*HALF, 2*HALF] solve products: fp32-grade accuracy on tensor cores
SOLVE_PRECISION = "tf32x3"
# K S^T / Q S^T, the commit and the small [P, P] x [P, BV] products: the caller's
# _jit.DotPrecision (treewy.launch_window), as in the two-launch kernels
# launch configurations by (HALF, variant): policy.py (LaunchPolicy.small)


@triton.jit
def small_window_math(
    q, k, g, beta, parent, scale, i_b, i_h,
    H: tl.constexpr, HV: tl.constexpr, W: tl.constexpr, K: tl.constexpr, HALF: tl.constexpr,
    LOG2_HALF: tl.constexpr, P: tl.constexpr, BK: tl.constexpr, SOLVE_PREC: tl.constexpr,
    GRAM_PREC: tl.constexpr, NATIVE_DOT: tl.constexpr,
):  # fmt: skip
    """Steps 2-3 of ``treewy_small_kernel`` for (request i_b, value head i_h), all in
    registers: (b_x [P, BK] packed raw keys over queries, b_xk its key rows, b_g, b_beta,
    b_rn = 1/|x_r|, m_anc, b_lg, b_seg, b_pm, b_t = (I + N)^-1). Also called per tile by
    the pipelined persistent verify (treewy_pipe.treewy_pipe_small_kernel)."""
    i_hk = i_h // (HV // H)
    o_k = tl.arange(0, BK)
    m_k = o_k < K
    # 2. packed keys / queries and the window's scalars
    o_p, is_k, node, m_node = packed_rows(P, HALF, W)
    o_xrow = ((i_b * W + node).to(tl.int64) * H + i_hk) * K
    p_xk = k + o_xrow[:, None] + o_k[None, :]
    p_xq = q + o_xrow[:, None] + o_k[None, :]
    b_xk = tl.load(p_xk, mask=(is_k & m_node)[:, None] & m_k[None, :], other=0.0)
    b_xq = tl.load(p_xq, mask=((o_p >= HALF) & m_node)[:, None] & m_k[None, :], other=0.0)
    b_x = tl.where(is_k[:, None], b_xk, b_xq)  # [P, BK] raw (bf16) keys over queries
    o_gr = (i_b * W + node).to(tl.int64) * HV + i_h
    b_g = tl.load(g + o_gr, mask=m_node, other=0.0).to(tl.float32)  # node's gate, both halves
    b_beta = tl.load(beta + o_gr, mask=is_k & m_node, other=0.0).to(tl.float32)
    b_par = tl.load(parent + node, mask=m_node, other=-1)
    # 3. the window's [P, P] quantities (recomputed per dv tile: tiny next to the state)
    if NATIVE_DOT and b_x.dtype == tl.bfloat16:  # bf16 q/k: exact products, fp32 sums
        b_gram = tl.dot(b_x, tl.trans(b_x))
    else:
        b_gram = tl.dot(b_x.to(tl.float32), tl.trans(b_x.to(tl.float32)), input_precision=GRAM_PREC)
    eye = o_p[:, None] == o_p[None, :]
    b_rn = tl.rsqrt(tl.sum(tl.where(eye, b_gram, 0.0), 1) + 1e-6)  # 1/|x_r|
    colk = is_k[None, :]
    b_pp = ((b_par[:, None] == o_p[None, :]) & colk).to(tl.float16)  # parent, packed
    b_anc = b_pp + ((node[:, None] == o_p[None, :]) & colk).to(tl.float16)
    b_pw = b_pp
    for _ in tl.static_range(LOG2_HALF - 1):
        b_pw = tl.dot(b_pw, b_pw).to(tl.float16)
        b_anc = (b_anc.to(tl.float32) + tl.dot(b_pw, b_anc)).to(tl.float16)
    m_anc = b_anc > 0.5  # [r, c]: k node c is an ancestor of (or is) node(r)
    b_lg = tl.sum(tl.where(m_anc, tl.where(is_k, b_g, 0.0)[None, :], 0.0), 1)  # L of node(r)
    # exp(L_t - L_i) from the segment sums (i, t] (_jit.segment_log_decay), not L_t - L_i
    b_seg = segment_log_decay(m_anc, tl.where(is_k, b_g, 0.0), NATIVE_DOT)
    b_dec = tl.where(m_anc, tl.exp(tl.where(m_anc, b_seg, 0.0)), 0.0)
    b_c = b_dec * b_gram * b_rn[:, None] * b_rn[None, :]
    m_strict = m_anc & (node[:, None] != o_p[None, :])
    b_n = tl.where(is_k[:, None] & m_strict, b_beta[:, None] * b_c, 0.0)
    b_pm = tl.where(is_k[:, None], 0.0, b_c * scale)
    # (I + N)^-1 = (I - N)(I + N^2)(I + N^4)...: N^HALF = 0
    b_t = eye.to(tl.float32) - b_n
    b_np = b_n
    for _ in tl.static_range(LOG2_HALF - 1):
        b_np = tl.dot(b_np, b_np, input_precision=SOLVE_PREC)
        b_t = b_t + tl.dot(b_t, b_np, input_precision=SOLVE_PREC)
    # one refinement step T += T (I - (I + N) T): the product form's cancellation (up to
    # ~1e-4 relative at W = 16 in the worst case) drops to a serial solve's ~1e-7
    b_res = eye.to(tl.float32) - b_t - tl.dot(b_n, b_t, input_precision=SOLVE_PREC)
    b_t = b_t + tl.dot(b_t, b_res, input_precision=SOLVE_PREC)
    return b_x, b_xk, b_g, b_beta, b_rn, m_anc, b_lg, b_seg, b_pm, b_t


@triton.jit
def treewy_small_kernel(
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
    pflush,
    scale,
    H: tl.constexpr,
    HV: tl.constexpr,
    W: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    HALF: tl.constexpr,
    LOG2_HALF: tl.constexpr,
    P: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    WP: tl.constexpr,
    BWP: tl.constexpr,
    STORE_VT: tl.constexpr,
    COMMIT: tl.constexpr,
    PENDING: tl.constexpr,
    REPLAY: tl.constexpr,
    STATE_PREC: tl.constexpr,
    SMALL_PREC: tl.constexpr,
    SOLVE_PREC: tl.constexpr,
    GRAM_PREC: tl.constexpr,
    NATIVE_DOT: tl.constexpr,
    EARLY_S: tl.constexpr,
    BH0,
):
    """One (request, value head, dv tile) of a window of W <= HALF nodes, P = 2 * HALF."""
    i_v, i_bh = tl.program_id(0), tl.program_id(1) + BH0
    i_b, i_h = i_bh // HV, i_bh % HV
    i_hk = i_h // (HV // H)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    m_vk = m_v[:, None] & m_k[None, :]

    # 1. the state tile, whole (EARLY_S: first, so its DRAM latency overlaps the window
    # math; otherwise after it, with fewer registers live during the math)
    i_slot = tl.load(state_slot + i_b).to(tl.int64)
    p_s = state + ((i_slot * HV + i_h) * V + o_v[:, None]) * K + o_k[None, :]
    if EARLY_S:
        b_s = tl.load(p_s, mask=m_vk, other=0.0)  # [BV, BK], state dtype

    # 2-3. packed keys / queries, the window's scalars and [P, P] quantities
    b_x, b_xk, b_g, b_beta, b_rn, m_anc, b_lg, b_seg, b_pm, b_t = small_window_math(
        q, k, g, beta, parent, scale, i_b, i_h, H, HV, W, K, HALF, LOG2_HALF, P, BK,
        SOLVE_PREC, GRAM_PREC, NATIVE_DOT,
    )  # fmt: skip
    o_p, is_k, node, m_node = packed_rows(P, HALF, W)
    o_xrow = ((i_b * W + node).to(tl.int64) * H + i_hk) * K
    p_xk = k + o_xrow[:, None] + o_k[None, :]
    o_gr = (i_b * W + node).to(tl.int64) * HV + i_h

    if not EARLY_S:
        b_s = tl.load(p_s, mask=m_vk, other=0.0)
    o_vrow = ((i_b * W + node).to(tl.int64) * HV + i_h) * V
    b_v = tl.load(
        v + o_vrow[:, None] + o_v[None, :], mask=(is_k & m_node)[:, None] & m_v[None, :], other=0.0
    ).to(tl.float32)

    if PENDING:
        # the previous window's accepted path, applied before this window reads the state
        o_pw = tl.arange(0, BWP)
        i_pa = tl.load(paccepted + i_b)  # -1: nothing pending
        if REPLAY:  # the ring is a chain: entries 0..i_pa
            b_pcoef, b_pla = chain_scale(pg + i_b * WP * HV + i_h, i_pa, WP, BWP, HV)
        else:
            b_pcoef, b_pla = path_scale(pparent, pg + i_b * WP * HV + i_h, i_pa, WP, BWP, HV)
        m_ppath = b_pcoef != 0.0
        o_prow = ((i_b * WP + o_pw).to(tl.int64) * H + i_hk) * K
        b_pk = tl.load(
            pk + o_prow[:, None] + o_k[None, :], mask=m_ppath[:, None] & m_k[None, :], other=0.0
        )
        b_pkf = b_pk.to(tl.float32)
        b_pvt = tl.load(
            pvt + ((i_b * WP + o_pw).to(tl.int64) * HV + i_h)[:, None] * V + o_v[None, :],
            mask=m_ppath[:, None] & m_v[None, :],
            other=0.0,
        )
        b_pvt = b_pvt * (b_pcoef * tl.rsqrt(tl.sum(b_pkf * b_pkf, 1) + 1e-6))[:, None]
        b_s = xdot(
            tl.trans(b_pvt), b_pk, tl.exp(b_pla) * b_s.to(tl.float32), STATE_PREC, False,
            NATIVE_DOT,
        )  # fmt: skip
        if REPLAY:  # checkpoint + ring stay in registers (fp32); stored only when flushed
            m_flush = tl.load(pflush + i_b + 0 * o_v) != 0  # [BV], one value per request
            tl.store(p_s, b_s.to(p_s.dtype.element_ty), mask=m_vk & m_flush[:, None])
        else:
            b_s = b_s.to(p_s.dtype.element_ty)
            tl.store(p_s, b_s, mask=m_vk)
        # hand this window's keys (one writer per key head) and gates to the next step
        if not REPLAY:  # noqa: SIM102 (constexpr branch: Triton cannot mix it with `and`)
            if i_v == 0:
                tl.store(g_out + o_gr, b_g, mask=is_k & m_node)
                if i_h % (HV // H) == 0:
                    tl.store(
                        k_out + o_xrow[:, None] + o_k[None, :],
                        b_xk,
                        mask=(is_k & m_node)[:, None] & m_k[None, :],
                    )

    # 4. the state-sized products
    if NATIVE_DOT and b_s.dtype == b_x.dtype:  # bf16 state, bf16 q/k: exact products
        b_xs = tl.dot(b_x, tl.trans(b_s))  # [P, BV]: K S^T over Q S^T
    else:
        b_xs = xdot(
            b_x, tl.trans(b_s.to(tl.float32)), tl.zeros([P, BV], dtype=tl.float32), STATE_PREC,
            True, NATIVE_DOT,
        )  # fmt: skip
    b_gam = tl.exp(b_lg)
    b_rhs = tl.where(is_k[:, None], b_beta[:, None] * (b_v - (b_gam * b_rn)[:, None] * b_xs), 0.0)
    b_vt = tl.dot(b_t, b_rhs, input_precision=SMALL_PREC)  # rows >= HALF are zero
    b_cq = tl.where(is_k, 0.0, b_gam * b_rn * scale)
    b_o = b_cq[:, None] * b_xs + tl.dot(b_pm, b_vt, input_precision=SMALL_PREC)
    tl.store(
        o + o_vrow[:, None] + o_v[None, :],
        b_o.to(o.dtype.element_ty),
        mask=((o_p >= HALF) & m_node)[:, None] & m_v[None, :],
    )
    if STORE_VT:
        tl.store(
            vt + o_vrow[:, None] + o_v[None, :], b_vt, mask=(is_k & m_node)[:, None] & m_v[None, :]
        )

    if COMMIT:
        # S_a from the registers; accepted outside [0, W) leaves the state as it is
        i_a = tl.load(accepted + i_b)
        m_row_a = (o_p == i_a) & (i_a < W)
        b_onpath = tl.sum(tl.where(m_row_a[:, None] & m_anc, 1.0, 0.0), 0)  # [P] over k nodes
        b_la = tl.sum(tl.where(m_row_a, b_lg, 0.0), 0)
        b_sega = tl.sum(tl.where(m_row_a[:, None], b_seg, 0.0), 0)  # L_a - L_c per column
        b_coef = tl.where(b_onpath > 0.5, tl.exp(tl.where(b_onpath > 0.5, b_sega, 0.0)), 0.0)
        b_vta = b_vt * (b_coef * b_rn)[:, None]
        # keys again from L1/L2 rather than keeping the packed tile live this long
        b_kc = tl.load(p_xk, mask=(is_k & m_node)[:, None] & m_k[None, :], other=0.0)
        b_sa = xdot(
            tl.trans(b_vta), b_kc, tl.exp(b_la) * b_s.to(tl.float32), STATE_PREC, False,
            NATIVE_DOT,
        )  # fmt: skip
        tl.store(p_s, b_sa.to(p_s.dtype.element_ty), mask=m_vk)


def launch_small(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_gate: torch.Tensor,
    beta: torch.Tensor,
    state_pool: torch.Tensor,
    state_slot: torch.Tensor,
    parent: torch.Tensor,
    *,
    num_heads: tuple[int, int],
    scale: float,
    o: torch.Tensor,
    vt: torch.Tensor | None,
    accepted: torch.Tensor | None = None,
    pending: tuple | None = None,
    k_out: torch.Tensor | None = None,
    g_out: torch.Tensor | None = None,
    replay_flush: torch.Tensor | None = None,
    config: dict | None = None,
    prec: DotPrecision,
    policy: LaunchPolicy | None = None,
) -> None:
    """Launch the single-launch kernel (inputs already validated by treewy.check_inputs);
    ``prec`` from _jit.dot_precision."""
    hk, hv = num_heads
    bsz, w, _, dk = q.shape
    dv = v.shape[3]
    half, cfg, bk, bv = _small_sizes(w, bsz * hv, (dk, dv), accepted is not None, config, policy)
    pk, pvt, pg, pparent, paccepted, wp, bwp = pending_operands(
        pending, (k, o, log_gate, parent, state_slot), w, 16
    )
    for bh0, count in grid_chunks(bsz * hv):
        treewy_small_kernel[(triton.cdiv(dv, bv), count)](
            q, k, v, log_gate, beta, state_pool, state_slot, parent, o,
            vt if vt is not None else o,
            accepted if accepted is not None else state_slot,
            pk, pvt, pg, pparent, paccepted,
            k_out if k_out is not None else k,
            g_out if g_out is not None else log_gate,
            replay_flush if replay_flush is not None else state_slot,
            scale,
            H=hk, HV=hv, W=w, K=dk, V=dv,
            HALF=half, LOG2_HALF=half.bit_length() - 1, P=2 * half,
            BK=bk, BV=bv, WP=wp, BWP=bwp,
            STORE_VT=vt is not None,
            COMMIT=accepted is not None,
            PENDING=pending is not None,
            REPLAY=replay_flush is not None,
            STATE_PREC=prec.state, SMALL_PREC=prec.small, SOLVE_PREC=SOLVE_PRECISION,
            GRAM_PREC=prec.gram, NATIVE_DOT=prec.native,
            EARLY_S=cfg["early_s"],
            BH0=bh0,
            num_warps=cfg["num_warps"],
        )  # fmt: skip


def _small_sizes(
    w: int,
    num_heads_total: int,
    dims: tuple[int, int],
    fused: bool,
    config: dict | None,
    policy: LaunchPolicy | None,
) -> tuple[int, dict, int, int]:
    """(HALF, launch config, BK, BV) of a single-launch window of ``w`` nodes over
    ``num_heads_total`` = B * Hv programs, ``dims`` = (dk, dv); refused past KERNEL_MAX_W."""
    dk, dv = dims
    if w > KERNEL_MAX_W:
        raise ValueError(f"the single-launch kernel takes W <= {KERNEL_MAX_W}, got W={w}")
    half = 8 if w <= 8 else 16
    variant = "fused" if fused else "verify"
    policy = DEFAULT_POLICY if policy is None else policy
    cfg = policy.small_config(half, variant) if config is None else config
    bk = triton.next_power_of_2(dk)
    bv = pick_block_v(num_heads_total, dv, widest=cfg["block_v"])
    return half, cfg, bk, bv
