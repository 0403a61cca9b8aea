"""The non-GDN-recurrence operators of a Qwen3.5 / Qwen3-Next decoder step, in PyTorch.

Random bf16 tensors at the per-GPU shapes of ``capsim.calibration.shapes`` (no weights are
loaded). Each ``make_*`` builds its tensors once and returns a list of zero-argument
callables, one per independent copy of the weights: timing a CUDA graph that runs every
copy back to back keeps weights out of L2 between calls, as in a real step where every
layer has its own weights (METHOD.md: "rotate among several input sets").

Bytes and FLOPs returned next to each op are the floor counts used for efficiencies:
each weight and activation read once, each output written once; 2 FLOPs per MAC.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

L2_FLUSH_BYTES = 256 * 2**20
"""Weights touched per graph replay: several times the H200's 60 MB L2 (KINDS.md)."""

Op = Callable[[], object]


def copies_for(touched_bytes: float, cap: int = 16) -> int:
    """Independent weight copies so one replay touches at least ``L2_FLUSH_BYTES``."""
    return int(min(cap, max(1, math.ceil(L2_FLUSH_BYTES / max(touched_bytes, 1.0)))))


def _randn(shape: tuple[int, ...], dev: str, gen: torch.Generator, scale: float = 1.0):
    t = torch.empty(shape, device=dev, dtype=torch.bfloat16)
    t.normal_(0.0, scale, generator=gen)
    return t


def make_gemm(m: int, n: int, k: int, dev: str, gen: torch.Generator):
    x = _randn((m, k), dev, gen)
    w_bytes = n * k * 2
    ws = [_randn((n, k), dev, gen, 0.02) for _ in range(copies_for(w_bytes))]
    flops = 2.0 * m * n * k
    bytes_ = w_bytes + 2.0 * m * (k + n)
    return [lambda w=w: F.linear(x, w) for w in ws], flops, bytes_


def moe_expected_active(num_experts: int, topk: int, m: int) -> float:
    """Experts hit by m tokens under uniform random top-k routing."""
    return num_experts * (1.0 - (1.0 - topk / num_experts) ** m)


def moe_weights(hidden: int, experts: int, inter: int, shared: int, dev, gen) -> dict:
    """One MoE layer's weights: router, stacked experts (E, K, N) and the shared expert."""
    w = {
        "router": _randn((experts, hidden), dev, gen, 0.02),
        "w13": _randn((experts, 2 * inter, hidden), dev, gen, 0.02).transpose(-2, -1),
        "w2": _randn((experts, hidden, inter), dev, gen, 0.02).transpose(-2, -1),
        "inter": inter,
        "shared": shared,
    }
    if shared:
        w["s13"] = _randn((2 * shared, hidden), dev, gen, 0.02)
        w["s2"] = _randn((hidden, shared), dev, gen, 0.02)
        w["sg"] = _randn((1, hidden), dev, gen, 0.02)
    return w


def moe_apply(w: dict, x, topk: int):
    """Router + top-k + grouped expert GEMMs (torch._grouped_mm) + shared expert.

    Routing comes from random router weights on random inputs: close to uniform, which is
    the stated assumption of the calibration (real routing is less balanced).
    """
    experts, inter, shared = w["router"].shape[0], w["inter"], w["shared"]
    logits = F.linear(x, w["router"]).float()
    probs, idx = torch.topk(torch.softmax(logits, -1), topk, dim=-1)
    flat = idx.flatten()
    order = torch.argsort(flat)
    counts = torch.zeros(experts, device=x.device, dtype=torch.int32)
    counts.scatter_add_(0, flat, torch.ones_like(flat, dtype=torch.int32))
    offs = torch.cumsum(counts, 0, dtype=torch.int32)
    rows = order // topk
    xs = x.index_select(0, rows)
    h = torch._grouped_mm(xs, w["w13"], offs=offs)
    h = F.silu(h[:, :inter]) * h[:, inter:]
    y = torch._grouped_mm(h, w["w2"], offs=offs)
    y = y * probs.flatten().index_select(0, order).to(y.dtype)[:, None]
    out = torch.zeros_like(x).index_add_(0, rows, y)
    if shared:
        hs = F.linear(x, w["s13"])
        hs = F.silu(hs[:, :shared]) * hs[:, shared:]
        gate = torch.sigmoid(F.linear(x, w["sg"]))
        out = out + gate * F.linear(hs, w["s2"])
    return out


def make_moe(m: int, hidden: int, experts: int, topk: int, inter: int, shared: int, dev, gen):
    """The whole MoE block for m tokens, over enough weight copies to miss L2."""
    x = _randn((m, hidden), dev, gen)
    per_expert = 3 * hidden * inter * 2
    touched = moe_expected_active(experts, topk, m) * per_expert
    ncopy = max(2, copies_for(touched, cap=4)) if dev == "cuda" else 1
    ws = [moe_weights(hidden, experts, inter, shared, dev, gen) for _ in range(ncopy)]
    fns = [lambda w=w: moe_apply(w, x, topk) for w in ws]
    flops = 2.0 * m * topk * 3 * hidden * inter + 2.0 * m * (3 * hidden * shared + experts * hidden)
    bytes_ = touched + (3 * hidden * shared + experts * hidden) * 2 + 4.0 * m * hidden
    return fns, flops, bytes_


def device_sm_count() -> int:
    """SMs of the GPU this process runs on; off the GPU, the measured GPU's registry entry."""
    if torch.cuda.is_available():
        return int(torch.cuda.get_device_properties(0).multi_processor_count)
    from capsim.gpus import measured_gpu

    return measured_gpu().sm_count


def num_kv_splits(batch: int, hkv: int, q_len: int, ctx: int, sms: int | None = None) -> int:
    """Split-KV factor of flash-decoding: enough (batch x head x split) blocks for two
    waves of the GPU's SMs (``device_sm_count`` unless given), each split at least 256
    tokens long (the heuristic of FlashAttention's split-KV path, restated)."""
    sms = device_sm_count() if sms is None else sms
    blocks = batch * hkv * max(1, -(-q_len // 128))
    want = max(1, -(-2 * sms // blocks))
    splits = 1
    while splits * 2 <= want and ctx % (splits * 2) == 0 and ctx // (splits * 2) >= 256:
        splits *= 2
    return splits


def attn_split_kv(q, k, v, splits: int):
    """Flash-decoding: attention over ``splits`` KV chunks, merged by log-sum-exp.

    q: (B, Hkv, Lq, d) (GQA folded into Lq); k, v: (B, Hkv, ctx, d) views of the cache.
    Each chunk runs flash attention (which returns the log-sum-exp on CUDA); the merge is
    a softmax over chunks of the LSEs.
    """
    if splits == 1:
        return F.scaled_dot_product_attention(q, k, v)
    b, h, lq, d = q.shape
    ctx = k.shape[2]
    ks = k.unflatten(2, (splits, ctx // splits)).transpose(1, 2).flatten(0, 1)
    vs = v.unflatten(2, (splits, ctx // splits)).transpose(1, 2).flatten(0, 1)
    qs = q.unsqueeze(1).expand(b, splits, h, lq, d).flatten(0, 1)
    if q.is_cuda:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention(qs, ks, vs)[:2]
    else:
        scores = (qs.float() @ ks.float().transpose(-2, -1)) / math.sqrt(d)
        lse = torch.logsumexp(scores, -1)
        out = (torch.softmax(scores, -1) @ vs.float()).to(q.dtype)
    out = out.unflatten(0, (b, splits))
    wts = torch.softmax(lse.unflatten(0, (b, splits)).float(), dim=1).unsqueeze(-1)
    return (out.float() * wts).sum(1).to(q.dtype)


def make_attn_decode(
    batch: int, q_tok: int, ctx: int, hq: int, hkv: int, hd: int, k_buf, v_buf, dev, gen
):
    """Verify attention of ``q_tok`` tokens per request over ``ctx`` cached tokens.

    GQA folded into the query length (the flash-decoding layout): q is
    (B, Hkv, q_tok*Hq/Hkv, hd) against K/V (B, Hkv, ctx, hd), read from a large pre-filled
    buffer so that every copy reads distinct KV, as the paged cache does. Small batches
    split the KV (``num_kv_splits``), as vLLM's decode attention backends do.
    """
    group = hq // hkv
    q = _randn((batch, hkv, q_tok * group, hd), dev, gen)
    tok = batch * ctx
    kv_bytes = 2.0 * tok * hkv * hd * 2
    ncopy = max(1, min(copies_for(kv_bytes), k_buf.shape[0] // tok))
    splits = num_kv_splits(batch, hkv, q_tok * group, ctx)
    fns = []
    for i in range(ncopy):
        k = k_buf[i * tok : (i + 1) * tok].view(batch, ctx, hkv, hd).transpose(1, 2)
        v = v_buf[i * tok : (i + 1) * tok].view(batch, ctx, hkv, hd).transpose(1, 2)
        fns.append(lambda k=k, v=v: attn_split_kv(q, k, v, splits))
    flops = 4.0 * batch * q_tok * hq * hd * ctx
    bytes_ = kv_bytes + 4.0 * batch * q_tok * hq * hd
    return fns, flops, bytes_, splits


def make_attn_prefill(n: int, ctx: int, hq: int, hkv: int, hd: int, dev, gen):
    """Causal attention of one chunk of ``n`` new tokens after ``ctx`` cached tokens."""
    q = _randn((1, hq, n, hd), dev, gen)
    k = _randn((1, hq, ctx + n, hd), dev, gen)  # KV expanded to hq heads outside the timing
    v = _randn((1, hq, ctx + n, hd), dev, gen)
    if ctx == 0:
        fns = [lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)]
    else:
        from torch.nn.attention.bias import causal_lower_right

        bias = causal_lower_right(n, ctx + n)
        fns = [lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=bias)]
    flops = 4.0 * hq * hd * n * (ctx + n / 2.0)
    bytes_ = 2.0 * (2 * n * hq * hd + 2 * (ctx + n) * hkv * hd)
    return fns, flops, bytes_


def make_conv(m: int, channels: int, kernel: int, dev, gen):
    """GDN causal depthwise conv1d over q, k, v channels for m tokens."""
    x = _randn((1, channels, m + kernel - 1), dev, gen)
    ws = [_randn((channels, 1, kernel), dev, gen) for _ in range(4)]
    fns = [lambda w=w: F.silu(F.conv1d(x, w, groups=channels)) for w in ws]
    return fns, 2.0 * m * channels * kernel, 4.0 * m * channels + 2.0 * channels * kernel


def make_rmsnorm(m: int, dim: int, dev, gen):
    x = _randn((m, dim), dev, gen)
    ws = [_randn((dim,), dev, gen) for _ in range(4)]
    fns = [lambda w=w: F.rms_norm(x, (dim,), w, 1e-6) for w in ws]
    return fns, 4.0 * m * dim, 4.0 * m * dim


def make_sample(m: int, vocab: int, dev, gen):
    """Greedy sampling: float logits then argmax per row."""
    logits = _randn((m, vocab), dev, gen)
    fns = [lambda: torch.argmax(logits.float(), dim=-1)]
    return fns, 2.0 * m * vocab, 2.0 * m * vocab


def make_gdn_prefill(t: int, hv: int, dk: int, dv: int, dev, gen):
    """One sequence of t new tokens through the chunked GDN kernel with an initial state.

    On CUDA this is fla's ``chunk_gated_delta_rule`` (what vLLM runs for prefill); off
    CUDA (``--smoke``) a float32 recurrence in torch stands in, only to test the plumbing.
    q and k are expanded to Hv heads outside the timing.
    """
    q = _randn((1, t, hv, dk), dev, gen)
    k = _randn((1, t, hv, dk), dev, gen)
    v = _randn((1, t, hv, dv), dev, gen)
    g = F.logsigmoid(torch.randn((1, t, hv), device=dev, generator=gen)).float()
    beta = torch.sigmoid(torch.randn((1, t, hv), device=dev, generator=gen)).to(torch.bfloat16)
    s0 = torch.randn((1, hv, dk, dv), device=dev, generator=gen, dtype=torch.float32) * 0.01
    if dev == "cuda":
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule

        def run():
            return chunk_gated_delta_rule(
                q,
                k,
                v,
                g,
                beta,
                initial_state=s0,
                output_final_state=True,
                use_qk_l2norm_in_kernel=True,
            )

        impl = "fla.chunk_gated_delta_rule"
    else:

        def run():
            s = s0[0].clone()
            qn = F.normalize(q.float(), dim=-1)
            kn = F.normalize(k.float(), dim=-1)
            outs = []
            for i in range(t):
                s = s * g[0, i].exp()[:, None, None]
                kv = torch.einsum("hk,hkv->hv", kn[0, i], s)
                upd = beta[0, i].float()[:, None] * (v[0, i].float() - kv)
                s = s + torch.einsum("hk,hv->hkv", kn[0, i], upd)
                outs.append(torch.einsum("hk,hkv->hv", qn[0, i], s))
            return torch.stack(outs), s

        impl = "torch_reference"
    flops = 2.0 * t * hv * dk * dv * 4 + 4.0 * t * hv * 64 * (dk + dv)
    bytes_ = 2.0 * t * hv * (2 * dk + 2 * dv) + 2 * 4.0 * hv * dk * dv
    return [run], flops, bytes_, impl
