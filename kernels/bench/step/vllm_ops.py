"""Decoder-step operators that run vLLM 0.33's own kernels (``vllm_shim``), per GPU shape.

Each ``make_*`` returns (callables, flops, bytes, impl) like ``model_ops``: one callable
per independent weight/KV copy, so a CUDA graph over all of them keeps weights out of L2.
``impl`` names what ran; a ``+`` joins parts, and a part that is a torch stand-in for a
compiled vLLM CUDA op says so (``vllm_shim.STANDIN``).

Layouts follow vLLM: expert weights w13 [E, 2I, H] and w2 [E, H, I]; the paged KV cache
[num_blocks, block_size, Hkv, d] with vLLM's hybrid block size (``hybrid_block_size``);
the GDN state pool [slots, Hv, dv, dk].
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .. import vllm_shim as vl
from . import model_ops as ops

MOE_IMPL = (
    "vllm.fused_experts_impl[fused_moe_kernel x2, try_get_optimal_moe_config]"
    "+standin(triton):topk_softmax,moe_align_block_size,silu_and_mul+standin(torch.sum):moe_sum"
    "+torch:router,shared_expert"
)
ATTN_IMPL = "vllm.unified_attention(triton,paged,GQA{path})"
GDN_PREFILL_IMPL = "vllm.fla.chunk_gated_delta_rule(cu_seqlens,GQA)"
CONV_IMPL = "vllm.causal_conv1d_update(q={q})"
STOREALL_IMPL = "vllm.fused_sigmoid_gating_delta_rule_update"
NUM_PAR_SOFTMAX_SEGMENTS = 16  # vllm/v1/attention/backends/triton_attn.py
MIN_LAUNCH_GRID_SIZE_2D = 128  # same file
CAPTURE_SIZES = (1, 2, 4, *range(8, 257, 8), *range(272, 513, 16))  # vLLM's default list


def hybrid_block_size(shp, align: int = 16) -> int:
    """Attention block size vLLM picks for a hybrid model (platforms/interface.py): the
    smallest multiple of ``align`` tokens whose KV page holds one GDN state page."""
    state_bytes = 4 if shp.ssm_state_dtype in ("float32", "fp32") else 2
    mamba_page = (
        shp.gdn_hv * shp.gdn_dk * shp.gdn_dv * state_bytes
        + shp.conv_dim * (shp.conv_kernel - 1) * 2
    )
    per_tok = shp.kv_bytes_per_tok
    return align * -(-mamba_page // (align * per_tok))


class Attn:
    """vLLM's Triton attention call with the backend's metadata (triton_attn.py)."""

    def __init__(self, hq: int, hkv: int, hd: int, dev: str, max_q: int = 8) -> None:
        self.fn = vl.load_unified_attention()
        self.hq, self.hkv, self.hd = hq, hkv, hd
        t = MIN_LAUNCH_GRID_SIZE_2D // hkv
        self.seq_threshold_3d = min(CAPTURE_SIZES, key=lambda x: abs(x - t))
        rows = self.seq_threshold_3d * min(max_q, 8)
        pad = 1 << (hd - 1).bit_length()
        f32 = torch.float32
        self.segm_out = torch.empty(
            (rows, hq, NUM_PAR_SOFTMAX_SEGMENTS, pad), device=dev, dtype=f32
        )
        self.segm_max = torch.empty((rows, hq, NUM_PAR_SOFTMAX_SEGMENTS), device=dev, dtype=f32)
        self.segm_sum = torch.empty_like(self.segm_max)

    def __call__(self, q, k_cache, v_cache, out, cu_q, max_q, seqused, max_k, block_table):
        self.fn(
            q=q, k=k_cache, v=v_cache, out=out, cu_seqlens_q=cu_q, max_seqlen_q=max_q,
            seqused_k=seqused, max_seqlen_k=max_k, softmax_scale=1.0 / math.sqrt(self.hd),
            causal=True, window_size=(-1, -1), block_table=block_table, softcap=0,
            q_descale=None, k_descale=None, v_descale=None,
            seq_threshold_3D=self.seq_threshold_3d,
            num_par_softmax_segments=NUM_PAR_SOFTMAX_SEGMENTS,
            softmax_segm_output=self.segm_out, softmax_segm_max=self.segm_max,
            softmax_segm_expsum=self.segm_sum,
        )  # fmt: skip

    def path(self, num_seqs: int, max_q: int) -> str:
        """2D or 3D (split-KV segments) kernel, by the rule of unified_attention."""
        block_m = 16 if self.hq // self.hkv <= 16 else 1 << (self.hq // self.hkv - 1).bit_length()
        block_q = block_m // (self.hq // self.hkv)
        rows = self.segm_max.shape[0]
        two_d = (
            max_q > 8
            or num_seqs * -(-max_q // block_q) > self.seq_threshold_3d
            or rows < num_seqs * max_q
        )
        return "2d" if two_d else "3d"


def batch_meta(q_lens: list[int], ctx_lens: list[int], block: int, first_block: int, dev: str):
    """cu_seqlens_q, seqused_k and block tables of requests with their own KV blocks."""
    cu = [0]
    for n in q_lens:
        cu.append(cu[-1] + n)
    nblk = [-(-c // block) for c in ctx_lens]
    width = max(nblk)
    table = torch.zeros((len(q_lens), width), dtype=torch.int32)
    nxt = first_block
    for i, n in enumerate(nblk):
        table[i, :n] = torch.arange(nxt, nxt + n, dtype=torch.int32)
        nxt += n
    return (
        torch.tensor(cu, dtype=torch.int32, device=dev),
        torch.tensor(ctx_lens, dtype=torch.int32, device=dev),
        table.to(dev),
        nxt,
    )


def kv_cache(num_blocks: int, block: int, hkv: int, hd: int, dev: str, gen):
    shape = (num_blocks, block, hkv, hd)
    k = torch.empty(shape, device=dev, dtype=torch.bfloat16).normal_(generator=gen)
    return k, torch.empty_like(k).normal_(generator=gen)


def make_attn(attn: Attn, batch: int, q_tok: int, ctx: int, cache, block: int, dev, gen):
    """``batch`` requests, ``q_tok`` new tokens each, attending ``ctx`` keys (the cached
    prefix plus the new tokens), causal; copies read distinct KV blocks."""
    k_cache, v_cache = cache
    per_copy = batch * -(-ctx // block)
    kv_bytes = 2.0 * batch * ctx * attn.hkv * attn.hd * 2
    ncopy = max(1, min(ops.copies_for(kv_bytes), (k_cache.shape[0] - 1) // per_copy))
    if ncopy < 1 or per_copy + 1 > k_cache.shape[0]:
        raise ValueError(f"KV cache too small for batch={batch} ctx={ctx}")
    q = ops._randn((batch * q_tok, attn.hq, attn.hd), dev, gen)
    out = torch.empty_like(q)
    fns = []
    for i in range(ncopy):
        cu, used, table, _ = batch_meta(
            [q_tok] * batch, [ctx] * batch, block, 1 + i * per_copy, dev
        )
        fns.append(
            lambda cu=cu, used=used, table=table: attn(
                q, k_cache, v_cache, out, cu, q_tok, used, ctx, table
            )
        )
    flops = 4.0 * batch * q_tok * attn.hq * attn.hd * (ctx - (q_tok - 1) / 2.0)
    bytes_ = kv_bytes + 4.0 * batch * q_tok * attn.hq * attn.hd
    return fns, flops, bytes_, attn.path(batch, q_tok)


# ------------------------------------------------------------------------------ MoE
def moe_weights_vllm(hidden: int, experts: int, inter: int, shared: int, dev, gen) -> dict:
    """One MoE layer in vLLM's layout (contiguous w13 [E, 2I, H], w2 [E, H, I])."""
    w = {
        "router": ops._randn((experts, hidden), dev, gen, 0.02),
        "w13": ops._randn((experts, 2 * inter, hidden), dev, gen, 0.02),
        "w2": ops._randn((experts, hidden, inter), dev, gen, 0.02),
        "shared": shared,
    }
    if shared:
        w["s13"] = ops._randn((2 * shared, hidden), dev, gen, 0.02)
        w["s2"] = ops._randn((hidden, shared), dev, gen, 0.02)
        w["sg"] = ops._randn((1, hidden), dev, gen, 0.02)
    return w


def silu_and_mul(x):
    """torch.ops._C.silu_and_mul as vLLM calls it (here the registered stand-in)."""
    out = torch.empty((*x.shape[:-1], x.shape[-1] // 2), device=x.device, dtype=x.dtype)
    torch.ops._C.silu_and_mul(out, x)
    return out


def moe_apply_vllm(fm, w: dict, x, topk: int):
    """Router GEMM, top-k (stand-in), vLLM's fused_experts_impl, shared expert."""
    logits = F.linear(x, w["router"])
    tw, ti = vl.topk_softmax(logits, topk)
    out = fm.fused_experts_impl(x, w["w13"], w["w2"], tw, ti)
    if w["shared"]:
        hs = silu_and_mul(F.linear(x, w["s13"]))
        out = out + torch.sigmoid(F.linear(x, w["sg"])) * F.linear(hs, w["s2"])
    return out


def make_moe_vllm(m: int, shp, dev, gen):
    fm = vl.load_fused_moe()
    x = ops._randn((m, shp.hidden), dev, gen)
    per_expert = 3 * shp.hidden * shp.moe_inter * 2
    touched = ops.moe_expected_active(shp.num_experts, shp.topk, m) * per_expert
    ncopy = max(2, ops.copies_for(touched, cap=4)) if dev == "cuda" else 1
    ws = [
        moe_weights_vllm(shp.hidden, shp.num_experts, shp.moe_inter, shp.shared_inter, dev, gen)
        for _ in range(ncopy)
    ]
    fns = [lambda w=w: moe_apply_vllm(fm, w, x, shp.topk) for w in ws]
    h, i, s, e = shp.hidden, shp.moe_inter, shp.shared_inter, shp.num_experts
    flops = 2.0 * m * shp.topk * 3 * h * i + 2.0 * m * (3 * h * s + e * h)
    bytes_ = touched + (3 * h * s + e * h) * 2 + 4.0 * m * h
    cfg = fm.try_get_optimal_moe_config(ws[0]["w13"].shape, ws[0]["w2"].shape, shp.topk, None, m)
    return fns, flops, bytes_, f"BLOCK_M={cfg['BLOCK_SIZE_M']}"


def moe_config_file(shp) -> tuple[str, bool]:
    """vLLM's config file name for this MoE shape and whether vLLM ships it."""
    fm = vl.load_fused_moe()
    name = fm.get_config_file_name(shp.num_experts, shp.moe_inter, None)
    path = vl.DEFAULT_SRC / vl.CONFIG_GLOB / name
    return name, path.is_file()


def make_moe_standin(part: str, m: int, shp, dev, gen):
    """One stand-in piece of the MoE block alone, at the shapes the block runs it."""
    fm = vl.load_fused_moe()
    from vllm.model_executor.layers.fused_moe.moe_align_block_size import moe_align_block_size

    e, k, h, i = shp.num_experts, shp.topk, shp.hidden, shp.moe_inter
    logits = ops._randn((m, e), dev, gen)
    _tw, ti = vl.topk_softmax_standin(logits, k)
    cfg = fm.try_get_optimal_moe_config((e, 2 * i, h), (e, h, i), k, None, m)
    if part == "topk_softmax":
        fns = [lambda: vl.topk_softmax(logits, k)]
    elif part == "moe_align_block_size":
        fns = [lambda: moe_align_block_size(ti, cfg["BLOCK_SIZE_M"], e, None)]
    elif part == "silu_and_mul":
        x = ops._randn((m * k, 2 * i), dev, gen)
        fns = [lambda: silu_and_mul(x)]
    elif part == "moe_sum":
        x = ops._randn((m, k, h), dev, gen)
        y = torch.empty((m, h), device=dev, dtype=torch.bfloat16)
        fns = [lambda: torch.sum(x, dim=1, out=y)]
    else:
        raise ValueError(f"moe stand-in part={part!r}")
    return fns, 0.0, 0.0, vl.STANDIN[part]


# ------------------------------------------------------------------------------ GDN
def make_gdn_prefill_vllm(t: int, shp, dev, gen):
    """One sequence of t tokens through vLLM's vendored fla chunk kernel (q, k at Hk
    heads, already L2-normalised as vLLM's fused_post_conv_prep leaves them)."""
    chunk = vl.load_chunk_gated_delta_rule()
    hv, hk, dk, dv = shp.gdn_hv, shp.gdn_hk, shp.gdn_dk, shp.gdn_dv
    q = F.normalize(ops._randn((1, t, hk, dk), dev, gen).float(), dim=-1).to(torch.bfloat16)
    k = F.normalize(ops._randn((1, t, hk, dk), dev, gen).float(), dim=-1).to(torch.bfloat16)
    v = ops._randn((1, t, hv, dv), dev, gen)
    g = F.logsigmoid(torch.randn((1, t, hv), device=dev, generator=gen))
    beta = torch.sigmoid(torch.randn((1, t, hv), device=dev, generator=gen))
    s0 = torch.randn((1, hv, dv, dk), device=dev, generator=gen) * 0.01
    cu = torch.tensor([0, t], dtype=torch.int32, device=dev)

    def run():
        return chunk(
            q=q, k=k, v=v, g=g, beta=beta, initial_state=s0, output_final_state=True,
            cu_seqlens=cu, use_qk_l2norm_in_kernel=False,
        )  # fmt: skip

    flops = 2.0 * t * hv * dk * dv * 4 + 4.0 * t * hv * 64 * (dk + dv)
    bytes_ = 2.0 * t * (2 * hk * dk + 2 * hv * dv) + 2 * 4.0 * hv * dk * dv
    return [run], flops, bytes_, GDN_PREFILL_IMPL


def make_conv_vllm(m: int, shp, dev, gen, q: int = 4):
    """vLLM's causal_conv1d_update over m tokens as verify windows of q tokens (the spec
    decode path of its GDN layer), conv state per request in a pool."""
    cc = vl.load_causal_conv1d()
    q = min(q, m)
    reqs = -(-m // q)
    dim, width = shp.conv_dim, shp.conv_kernel
    x = ops._randn((reqs * q, dim), dev, gen)
    w = ops._randn((dim, width), dev, gen)
    state = ops._randn((reqs + 1, dim, width - 1 + q - 1), dev, gen)
    idx = torch.arange(1, reqs + 1, dtype=torch.int32, device=dev)
    acc = torch.ones(reqs, dtype=torch.int32, device=dev)
    qsl = torch.arange(0, (reqs + 1) * q, q, dtype=torch.int32, device=dev)

    def run():
        return cc.causal_conv1d_update(
            x, state, w, None, "silu", conv_state_indices=idx, num_accepted_tokens=acc,
            query_start_loc=qsl, max_query_len=q,
        )  # fmt: skip

    return [run], 2.0 * m * dim * width, 4.0 * m * dim + 2.0 * dim * width, CONV_IMPL.format(q=q)


def storeall_inputs(batch: int, t: int, shp, dev, gen):
    """Inputs of vLLM's store-all op for ``batch`` chains of ``t`` tokens (fp32 state
    pool in vLLM's layout, slot 0 = null)."""
    hv, hk, dk, dv = shp.gdn_hv, shp.gdn_hk, shp.gdn_dk, shp.gdn_dv
    q = ops._randn((1, batch * t, hk, dk), dev, gen)
    k = ops._randn((1, batch * t, hk, dk), dev, gen)
    v = ops._randn((1, batch * t, hv, dv), dev, gen)
    a = torch.randn((batch * t, hv), device=dev, generator=gen)
    b = torch.randn((batch * t, hv), device=dev, generator=gen)
    a_log = torch.zeros(hv, device=dev)
    dt_bias = torch.zeros(hv, device=dev)
    pool = torch.randn((batch * t + 1, hv, dv, dk), device=dev, generator=gen) * 0.01
    slots = torch.arange(1, batch * t + 1, dtype=torch.int32, device=dev).view(batch, t)
    acc = torch.ones(batch, dtype=torch.int32, device=dev)
    cu = torch.arange(0, (batch + 1) * t, t, dtype=torch.int32, device=dev)
    return {
        "A_log": a_log, "a": a, "b": b, "dt_bias": dt_bias, "q": q, "k": k, "v": v,
        "initial_state": pool, "inplace_final_state": True, "cu_seqlens": cu,
        "ssm_state_indices": slots, "num_accepted_tokens": acc,
        "use_qk_l2norm_in_kernel": True,
    }  # fmt: skip


def make_storeall_vllm(batch: int, t: int, shp, dev, gen):
    op = vl.load_fused_sigmoid_gating()
    copies = []
    per = batch * t * shp.gdn_hv * shp.gdn_dv * shp.gdn_dk * 4
    for _ in range(max(1, min(4, ops.copies_for(per)))):
        kw = storeall_inputs(batch, t, shp, dev, gen)
        copies.append(lambda kw=kw: op(**kw))
    state = shp.gdn_hv * shp.gdn_dv * shp.gdn_dk * 4
    bytes_ = batch * (state * (1 + t)) + batch * t * 2 * (
        2 * shp.gdn_hk * shp.gdn_dk + 2 * shp.gdn_hv * shp.gdn_dv
    )
    return copies, 0.0, float(bytes_), STOREALL_IMPL


def checks(dev: str, gen) -> dict:
    """Relative errors of the loaded vLLM kernels against float32 torch references at
    small shapes (fresh random inputs): MoE, attention (2D and 3D paths), GDN chunk."""
    out: dict = {}
    rel = lambda a, b: float((a.float() - b.float()).norm() / b.float().norm())  # noqa: E731
    try:
        fm = vl.load_fused_moe()
        e, h, i, k, m = 16, 256, 128, 4, 33
        x = ops._randn((m, h), dev, gen)
        w13 = ops._randn((e, 2 * i, h), dev, gen, 0.05)
        w2 = ops._randn((e, h, i), dev, gen, 0.05)
        tw, ti = vl.topk_softmax_standin(torch.randn((m, e), device=dev, generator=gen), k)
        got = fm.fused_experts_impl(x, w13, w2, tw, ti)
        ref = torch.zeros((m, h), device=dev)
        for j in range(k):
            hh = torch.einsum("mh,mnh->mn", x.float(), w13[ti[:, j].long()].float())
            hh = F.silu(hh[:, :i]) * hh[:, i:]
            ref += tw[:, j : j + 1] * torch.einsum("mi,mhi->mh", hh, w2[ti[:, j].long()].float())
        out["moe_rel_err"] = rel(got, ref)
    except Exception as exc:
        out["moe_error"] = repr(exc)[:300]
    try:
        hq, hkv, d, block = 16, 2, 256, 64
        attn = Attn(hq, hkv, d, dev)
        cache = kv_cache(64, block, hkv, d, dev, gen)
        for q_tok, batch, ctx in ((4, 3, 300), (1, 2, 200), (40, 2, 250)):
            q = ops._randn((batch * q_tok, hq, d), dev, gen)
            o = torch.empty_like(q)
            cu, used, table, _ = batch_meta([q_tok] * batch, [ctx] * batch, block, 1, dev)
            attn(q, *cache, o, cu, q_tok, used, ctx, table)
            errs = []
            for b in range(batch):
                kk = cache[0][table[b].long()].reshape(-1, hkv, d)[:ctx].float()
                vv = cache[1][table[b].long()].reshape(-1, hkv, d)[:ctx].float()
                kk, vv = kk.repeat_interleave(hq // hkv, 1), vv.repeat_interleave(hq // hkv, 1)
                qb = q[b * q_tok : (b + 1) * q_tok].float()
                s = torch.einsum("qhd,khd->hqk", qb, kk) / math.sqrt(d)
                pos = torch.arange(ctx - q_tok, ctx, device=dev)[:, None]
                s = s.masked_fill(torch.arange(ctx, device=dev)[None, :] > pos, float("-inf"))
                errs.append(
                    rel(
                        o[b * q_tok : (b + 1) * q_tok],
                        torch.einsum("hqk,khd->qhd", s.softmax(-1), vv),
                    )
                )
            out[f"attn_q{q_tok}_{attn.path(batch, q_tok)}_rel_err"] = max(errs)
    except Exception as exc:
        out["attn_error"] = repr(exc)[:300]
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_chunk

        chunk = vl.load_chunk_gated_delta_rule()
        t, hk, hv, dk = 200, 2, 4, 128
        q = F.normalize(torch.randn((1, t, hk, dk), device=dev, generator=gen), dim=-1).bfloat16()
        k = F.normalize(torch.randn((1, t, hk, dk), device=dev, generator=gen), dim=-1).bfloat16()
        v = ops._randn((1, t, hv, dk), dev, gen)
        g = F.logsigmoid(torch.randn((1, t, hv), device=dev, generator=gen))
        beta = torch.sigmoid(torch.randn((1, t, hv), device=dev, generator=gen))
        s0 = torch.randn((1, hv, dk, dk), device=dev, generator=gen) * 0.01
        cu = torch.tensor([0, t], dtype=torch.int32, device=dev)
        o1, _ = chunk(q=q, k=k, v=v, g=g, beta=beta, initial_state=s0, output_final_state=True,
                      cu_seqlens=cu, use_qk_l2norm_in_kernel=False)  # fmt: skip
        rep = hv // hk
        o2, _ = fla_chunk(q.repeat_interleave(rep, 2), k.repeat_interleave(rep, 2), v, g,
                          beta.bfloat16(), initial_state=s0.transpose(-1, -2).contiguous(),
                          output_final_state=True, cu_seqlens=cu.long())  # fmt: skip
        out["gdn_chunk_vs_fla_core_rel_err"] = rel(o1, o2)
    except Exception as exc:
        out["gdn_chunk_error"] = repr(exc)[:300]
    return out


class ConvMeta:
    """The prefill metadata vLLM's mamba builder hands causal_conv1d_fn (a restatement of
    ``compute_causal_conv1d_metadata`` in vllm/v1/attention/backends/utils.py: programs
    of BLOCK_M = 8 tokens per sequence, built on the host so the kernel needs no sync)."""

    def __init__(self, seqlens: list[int], dev: str) -> None:
        block_m = 8
        nums = [-(-n // block_m) for n in seqlens]
        mlist = [i for i, n in enumerate(nums) for _ in range(n)]
        offs = [j for n in nums for j in range(n)]
        size = max(1024, len(mlist)) * 2
        self.batch_ptr = torch.full((size,), -1, dtype=torch.int32, device=dev)
        self.token_chunk_offset_ptr = torch.full((size,), -1, dtype=torch.int32, device=dev)
        self.batch_ptr[: len(mlist)] = torch.tensor(mlist, dtype=torch.int32)
        self.token_chunk_offset_ptr[: len(offs)] = torch.tensor(offs, dtype=torch.int32)
        self.nums_dict = {
            block_m: {
                "nums": torch.tensor(nums), "tot": sum(nums), "mlist": torch.tensor(mlist),
                "mlist_len": len(mlist), "offsetlist": torch.tensor(offs),
                "batch_ptr": self.batch_ptr, "token_chunk_offset_ptr": self.token_chunk_offset_ptr,
            }
        }  # fmt: skip
