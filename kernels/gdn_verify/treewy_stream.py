"""TreeWY stage 2: the state stream (verify; fused commit; deferred and replay pending paths).

``treewy_stream_kernel`` does the state-sized work of one (request, value head, dv tile):
K S^T and Q S^T on raw bf16 q, k (the l2-norms are per-row scales from stage 1), two
[W, W] x [W, BV] products and the stores, BKC keys at a time. Compile-time flags give
the fused verify+commit (COMMIT), the deferred commit (PENDING: the previous window's
accepted path applied first, the state written back) and the replay mode (PENDING and
REPLAY: the checkpoint's ring applied in registers, the state written back only for
requests whose ring is flushed). ``launch_window`` runs stage 1 then this kernel (or the
single-launch kernel of treewy_small.py for small windows) and is shared by all variants.

Shapes: q, k [B, W, Hk, dk]; v [B, W, Hv, dv]; state pool [slots, Hv, dv, dk].
Bytes per (request, value head), verify: reads S_0 (dv*dk*s), q/k (W*dk*2 each, shared by
Hv/Hk heads), v (W*dv*2), stage-1 scratch (2*W*W*4 + 2*W*4, from L2 per dv tile);
writes o (W*dv*2) and vt (W*dv*4). Fused: + one state written, no vt. Deferred: + the
pending k, vt, gates read (Wp*dk*2/group + Wp*dv*4 + Wp*4), one state and this window's
k, gates written. Replay: + the ring read (R*dk*2/group + R*dv*4 + R*4); a state is
written only on flush. Nothing runs at import.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._jit import chain_scale, dot_precision, pad_window, path_scale, pick_block_v, xdot
from .policy import DEFAULT_POLICY, LaunchPolicy
from .treewy_inputs import check_inputs, check_parent, launch_split, pending_operands
from .treewy_persistent import PERSISTENT_BLOCK_V, PERSISTENT_WARPS, launch_persistent_stream
from .treewy_pipe import launch_pipe_stream
from .treewy_pipe_small import PIPE_SMALL_MAX_W, launch_pipe_small
from .treewy_prep import launch_prep
from .treewy_small import launch_small

__all__ = ["launch_window", "treewy_stream_kernel"]


# Accuracy contract (round 5, _jit.dot_precision): with an fp32 state, S_0 q, S_0 k and
# the commit's Vt^T K run as three exact bf16 products against the raw bf16 q/k
# ("bf16x3"), the [W, W] x [W, BV] products in "tf32x3"; ``state_math="tf32"`` is the
# opt-in tf32 mode of rounds 1-4 (fp32 states 5e-4 to 1e-3 off float64, round-4 run 4).
# The per-head K K^T and Q K^T take raw bf16 operands, exact in tf32 (fp32 sums).
# key-dimension chunk of the per-head window kernel


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
    pflush,
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
    REPLAY: tl.constexpr,
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
        i_pa = tl.load(paccepted + i_b)  # -1: nothing pending
        if REPLAY:  # the ring is a chain: entries 0..i_pa, no parent walk
            b_pcoef, b_pla = chain_scale(pg + i_b * WP * HV + i_h, i_pa, WP, BWP, HV)
            # != 0: write the state back (ring flushed); [BV], one value per request
            m_flush = tl.load(pflush + i_b + 0 * o_v) != 0
        else:
            b_pcoef, b_pla = path_scale(pparent, pg + i_b * WP * HV + i_h, i_pa, WP, BWP, HV)
        m_ppath = (b_pcoef != 0.0) & m_p
        # only the path's rows are read (a replay ring: its filled entries, not all R)
        b_pvt = tl.load(
            pvt + ((i_b * WP + o_p[:, None]).to(tl.int64) * HV + i_h) * V + o_v[None, :],
            mask=m_ppath[:, None] & m_v[None, :],
            other=0.0,
        )
        b_pk2 = tl.zeros([BWP], dtype=tl.float32)
        for i_kc in tl.static_range(0, BK, BKC):
            o_k = i_kc + tl.arange(0, BKC)
            b_pk = tl.load(
                pk + o_prow + o_k[None, :], mask=m_ppath[:, None] & (o_k < K)[None, :], other=0.0
            ).to(tl.float32)
            b_pk2 += tl.sum(b_pk * b_pk, 1)
        b_pvt = b_pvt * (b_pcoef * tl.rsqrt(b_pk2 + 1e-6))[:, None]
        if not REPLAY:
            # hand this window's keys and gates to the next step (one writer per element):
            # the first dv tile of the first value head of a group writes k, tile 0 gates
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
            if REPLAY:  # checkpoint + ring in registers; stored only when flushed
                tl.store(
                    p_s + o_k[None, :], b_s.to(p_s.dtype.element_ty), mask=m_vk & m_flush[:, None]
                )
            else:
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


def launch_window(
    q, k, v, log_gate, beta, state_pool, state_slot, parent, *, scale, store_vt,
    accepted=None, pending=None, k_out=None, g_out=None, replay_flush=None, vt=None, out=None,
    state_math=None, policy: LaunchPolicy | None = None,
):  # fmt: skip
    """Launch the per-head window kernel, then the streaming kernel; returns (o, vt or
    None). Shared by all variants. ``replay_flush`` [B] int32 (with ``pending`` = the
    ring as a chain): the replay mode (replay.py), the state written only where != 0."""
    policy = DEFAULT_POLICY if policy is None else policy
    bsz, w, hk, hv, dv = check_inputs(q, k, v, log_gate, beta, state_pool, parent)
    if pending is not None:
        check_parent(pending[3], pending[0].shape[1])
    prec = dot_precision(state_pool.dtype, q.dtype, state_math, q.device.type)
    dk = q.shape[3]
    if scale is None:
        scale = dk**-0.5
    bw, bk, cfg, bv = _stream_sizes(policy, w, bsz * hv, (dk, dv), pending is not None)
    o = torch.empty_like(v) if out is None else out
    if store_vt and vt is None:
        vt = torch.empty(v.shape, dtype=torch.float32, device=v.device)
    if policy.use_single_launch(w, bsz * hv, fused=accepted is not None):
        launch_small(
            q, k, v, log_gate, beta, state_pool, state_slot, parent,
            num_heads=(hk, hv), scale=scale, o=o, vt=vt if store_vt else None,
            accepted=accepted, pending=pending, k_out=k_out, g_out=g_out,
            replay_flush=replay_flush, prec=prec, policy=policy,
        )  # fmt: skip
        return o, vt
    pk, pvt, pg, pparent, paccepted, wp, bwp = pending_operands(
        pending, (k, o, log_gate, parent, state_slot), w, bw
    )
    pipe = policy.pipe_config(pending is not None)
    # BW <= 32 only: at BW = 64 (W = 40) it spills (sm_90: 255 registers + 192 bytes)
    if pipe is not None and bw <= 32 and accepted is None and replay_flush is None and store_vt:
        _launch_pipe(
            pipe, q, k, v, log_gate, beta, state_pool, state_slot, parent, o, vt,
            num_heads=(hk, hv), scale=scale, prec=prec, policy=policy, pending=pending,
            k_out=k_out, g_out=g_out,
        )  # fmt: skip
        return o, vt
    mats, cols = launch_prep(
        q, k, log_gate, beta, parent, scale=scale, num_heads=(hk, hv),
        gram_precision=prec.gram, policy=policy,
    )  # fmt: skip
    if policy.use_persistent(bw) and pending is None and accepted is None and store_vt:
        launch_persistent_stream(
            q, k, v, state_pool, state_slot, mats, cols, o, vt, num_heads=(hk, hv),
            block_v=pick_block_v(bsz * hv, dv, widest=PERSISTENT_BLOCK_V),
            num_warps=PERSISTENT_WARPS, ctas_per_sm=policy.persistent_ctas_per_sm, prec=prec,
        )  # fmt: skip
        return o, vt
    launch_split(
        treewy_stream_kernel, triton.cdiv(dv, bv), bsz * hv,
        q, k, v, log_gate, state_pool, state_slot, parent,
        mats[0], mats[1], cols[0], cols[1], o,
        vt if vt is not None else o,
        accepted if accepted is not None else state_slot,
        pk, pvt, pg, pparent, paccepted,
        k_out if k_out is not None else k,
        g_out if g_out is not None else log_gate,
        replay_flush if replay_flush is not None else state_slot,
        H=hk, HV=hv, W=w, K=dk, V=dv, BW=bw, BK=bk, BKC=min(bk, cfg["bkc"]), BV=bv,
        WP=wp, BWP=bwp,
        STORE_VT=store_vt,
        COMMIT=accepted is not None,
        PENDING=pending is not None,
        REPLAY=replay_flush is not None,
        STATE_PREC=prec.state, SMALL_PREC=prec.small, NATIVE=prec.native,
        num_warps=cfg["num_warps"],
        # a register cap (policy "maxnreg", round 7 candidate): the GPU compiler only
        **({"maxnreg": cfg["maxnreg"]} if cfg.get("maxnreg") and prec.native else {}),
    )  # fmt: skip
    return o, vt


def _stream_sizes(
    policy: LaunchPolicy, w: int, num_heads_total: int, dims: tuple[int, int], deferred: bool
) -> tuple[int, int, dict, int]:
    """(BW, BK, stream launch config, BV) of the streaming kernel for a window of ``w``
    nodes over ``num_heads_total`` = B * Hv programs, ``dims`` = (dk, dv)."""
    dk, dv = dims
    bw, _ = pad_window(w)
    bk = triton.next_power_of_2(dk)
    cfg = policy.stream_config(bw, "deferred" if deferred else "verify")
    bv = pick_block_v(num_heads_total, dv, widest=cfg["block_v"])
    return bw, bk, cfg, bv


def _launch_pipe(
    pipe, q, k, v, log_gate, beta, state_pool, state_slot, parent, o, vt, *, num_heads,
    scale, prec, policy, pending, k_out, g_out,
) -> None:  # fmt: skip
    """The pipelined stream (treewy_pipe.py) of a window with BW <= 32, no commit, no
    replay, vt stored: the fused-window kernel (W <= PIPE_SMALL_MAX_W), else stage 1
    (with the hoisted pending coefficients where ``pipe.pending_in_stage1``), then the
    pipelined stream."""
    dv, num_heads_total = v.shape[3], q.shape[0] * num_heads[1]
    block_v = pick_block_v(num_heads_total, dv, widest=pipe.block_v)
    if pipe.fused_window and q.shape[1] <= PIPE_SMALL_MAX_W:
        launch_pipe_small(
            q, k, v, log_gate, beta, state_pool, state_slot, parent, o, vt,
            num_heads=num_heads, scale=scale, num_warps=pipe.num_warps,
            block_v=block_v,
            ctas_per_sm=pipe.ctas_per_sm, num_stages=pipe.stages, prec=prec, bkc=pipe.bkc,
            maxnreg=pipe.maxnreg, pending=pending, k_out=k_out, g_out=g_out,
        )  # fmt: skip
        return
    hoisted = None
    stage1 = {"scale": scale, "num_heads": num_heads, "gram_precision": prec.gram,
              "policy": policy}  # fmt: skip
    if pending is not None and pipe.pending_in_stage1:
        stage1 |= {"pending": pending, "k_out": k_out, "g_out": g_out,
                   "pending_gram": pipe.pending_gram}  # fmt: skip
        mats, cols, hoisted = launch_prep(q, k, log_gate, beta, parent, **stage1)
    else:
        mats, cols = launch_prep(q, k, log_gate, beta, parent, **stage1)
    launch_pipe_stream(
        q, k, v, log_gate, state_pool, state_slot, mats, cols, o, vt, num_heads=num_heads,
        block_v=block_v, num_warps=pipe.num_warps,
        ctas_per_sm=pipe.ctas_per_sm, num_stages=pipe.stages, prec=prec, bkc=pipe.bkc,
        pending=pending, k_out=k_out, g_out=g_out, hoisted=hoisted, maxnreg=pipe.maxnreg,
        gram=pipe.pending_gram, pack=pipe.pack_qk, tma=pipe.tma, slot_ahead=pipe.slot_ahead,
        early_rows=pipe.early_rows,
    )  # fmt: skip
