"""Sampler dummy-run and MoE workspace / transient terms."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .probe import Probe, measure_call
from .probe import randn as _randn
from .shapes import GpuShape


def sampler_run(
    logits_bf16: torch.Tensor, topk_topp: Callable[..., torch.Tensor], generator: torch.Generator
) -> torch.Tensor:
    """vLLM 0.33 ``Sampler.forward`` for _dummy_sampler_run's generator call.

    v1/sample/sampler.py; the FlashInfer first call is not carried.
    """
    n, vocab = logits_bf16.shape
    dev = logits_bf16.device
    temperature = torch.full((n,), 0.5, device=dev)
    top_p = torch.full((n,), 0.9, device=dev)
    top_k = torch.full((n,), vocab - 1, device=dev)
    logits = logits_bf16.to(torch.float32)  # Sampler.forward: "Use float32 for the logits."
    greedy = logits.argmax(dim=-1).view(-1)  # not all_random -> greedy_sample first
    temp = torch.where(temperature < 1e-5, 1.0, temperature)
    logits = logits.div_(temp.unsqueeze(dim=1))  # apply_temperature, in place
    logits = topk_topp(logits, top_k, top_p)  # TopKTopPSampler.forward_native
    probs = logits.softmax(dim=-1, dtype=torch.float32)
    q = torch.empty_like(probs)  # random_sample: exponential noise
    q.exponential_()
    q[0].exponential_(generator=generator)
    sampled = probs.div_(q).argmax(dim=-1).view(-1)
    return torch.where(temperature < 1e-5, greedy, sampled, out=greedy)


def _topk_topp_pytorch(logits: torch.Tensor, k: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Sort-based masking in the manner of vLLM's apply_top_k_top_p_pytorch (fallback only)."""
    srt, idx = logits.sort(dim=-1, descending=False)
    kth = srt.gather(1, (srt.size(1) - k.long()).unsqueeze(1))
    srt.masked_fill_(srt < kth, -float("inf"))
    cum = torch.cumsum(srt.softmax(dim=-1), dim=-1)
    mask = cum <= 1 - p.unsqueeze(1)
    mask[:, -1] = False
    srt.masked_fill_(mask, -float("inf"))
    return logits.scatter_(dim=-1, index=idx, src=srt)


def load_topk_topp() -> tuple[Callable[..., torch.Tensor], str]:
    try:
        from vllm.v1.sample.ops.topk_topp_triton import apply_top_k_top_p_triton

        return (
            apply_top_k_top_p_triton,
            "vllm0.33 v1/sample/ops/topk_topp_triton.py apply_top_k_top_p_triton",
        )
    except Exception as exc:
        print(f"topk_topp_triton unavailable ({exc!r}); sort-based fallback", flush=True)
        return _topk_topp_pytorch, "sort-based top-k/top-p (vLLM apply_top_k_top_p_pytorch manner)"


def term_sampler(
    probe: Probe, vocab: int, n: int, device: torch.device, topk_topp: Callable[..., torch.Tensor]
) -> dict[str, int]:
    logits = _randn(n, vocab, dtype=torch.bfloat16, device=device)
    gen = torch.Generator(device=device).manual_seed(0)
    sampler_run(logits, topk_topp, gen)  # compile
    # vLLM's first dummy call runs FlashInfer's sampler (not carried); the Triton
    # top-k/top-p buffer is first allocated by the second (generator) call, so empty
    # the module's caches to count it inside the measured call.
    mod = sys.modules.get("vllm.v1.sample.ops.topk_topp_triton")
    for cache in ("_TRITON_BUFFER_CACHE", "_TRITON_TABLE_CACHE", "_TRITON_SPLIT_CACHE"):
        if mod is not None and hasattr(mod, cache):
            getattr(mod, cache).clear()
    probe.clean()
    r = measure_call(probe, lambda: sampler_run(logits, topk_topp, gen), warmup=False)
    return r


@dataclass
class MoeWeights:
    router: torch.Tensor  # [hidden, E]
    w13: torch.Tensor  # [E, 2I, hidden]
    w2: torch.Tensor  # [E, hidden, I]
    shared13: torch.Tensor  # [hidden, 2Is]
    shared2: torch.Tensor  # [Is, hidden]
    shared_gate: torch.Tensor  # [hidden, 1]


def moe_weights(s: GpuShape, device: torch.device) -> MoeWeights:
    bf = torch.bfloat16
    return MoeWeights(
        router=_randn(s.hidden, s.experts, dtype=bf, device=device, scale=0.02),
        w13=_randn(s.experts, 2 * s.moe_inter, s.hidden, dtype=bf, device=device, scale=0.02),
        w2=_randn(s.experts, s.hidden, s.moe_inter, dtype=bf, device=device, scale=0.02),
        shared13=_randn(s.hidden, 2 * s.shared_inter, dtype=bf, device=device, scale=0.02),
        shared2=_randn(s.shared_inter, s.hidden, dtype=bf, device=device, scale=0.02),
        shared_gate=_randn(s.hidden, 1, dtype=bf, device=device, scale=0.02),
    )


def _grouped(
    a: torch.Tensor, w: torch.Tensor, offs: torch.Tensor, expert_of_row: torch.Tensor
) -> torch.Tensor:
    """a [rows, K] x w[e] ([E, N, K]) per group -> [rows, N]; torch._grouped_mm on GPU."""
    if a.is_cuda:
        return torch._grouped_mm(a, w.transpose(-2, -1), offs=offs)
    return torch.bmm(a.unsqueeze(1), w[expert_of_row].transpose(-2, -1)).squeeze(1)  # CPU dry run


def moe_forward(
    x: torch.Tensor, w: MoeWeights, topk: int, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Routed experts (sorted dispatch + two grouped GEMMs) plus gated shared expert."""
    m, hidden = x.shape
    e = w.w13.shape[0]
    inter = w.w2.shape[2]
    probs = torch.softmax((x @ w.router).float(), dim=-1)
    topw, topi = probs.topk(topk, dim=-1)
    topw = (topw / topw.sum(-1, keepdim=True)).to(x.dtype)
    flat = topi.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.zeros(e, device=x.device, dtype=torch.int32).index_add_(
        0, flat.int(), torch.ones_like(flat, dtype=torch.int32)
    )
    offs = torch.cumsum(counts, 0, dtype=torch.int32)
    token_of_row = order // topk
    expert_of_row = flat[order]
    h = _grouped(x[token_of_row], w.w13, offs, expert_of_row)
    act = torch.nn.functional.silu(h[:, :inter]) * h[:, inter:]
    y = _grouped(act, w.w2, offs, expert_of_row)
    y = y * topw.reshape(-1)[order].unsqueeze(1)
    res = torch.zeros(m, hidden, device=x.device, dtype=x.dtype) if out is None else out.zero_()
    res.index_add_(0, token_of_row, y)
    sh = x @ w.shared13
    si = sh.shape[1] // 2
    shared = (torch.nn.functional.silu(sh[:, :si]) * sh[:, si:]) @ w.shared2
    res.add_(shared * torch.sigmoid(x @ w.shared_gate))
    return res


def vllm_moe_workspace_elems(m: int, s: GpuShape) -> tuple[int, int]:
    """Element counts of vLLM 0.33's modular-kernel buffers for TritonExperts (bf16)."""
    n = 2 * s.moe_inter  # w13 output width
    k = s.hidden
    act_out = n // 2  # SiLU-and-mul halves N
    ws13 = m * s.topk * max(act_out, k)
    out = m * k
    ws2 = m * s.topk * max(n, k)
    return max(ws13, out), ws2


def term_moe_workspace(
    probe: Probe, s: GpuShape, w: MoeWeights, tokens: int, device: torch.device
) -> dict[str, int]:
    common_elems, ws2_elems = vllm_moe_workspace_elems(tokens, s)

    def run() -> Any:
        common = torch.empty(common_elems, device=device, dtype=torch.bfloat16)
        ws2 = torch.empty(ws2_elems, device=device, dtype=torch.bfloat16)
        # routing alignment (moe_align_block_size): sorted ids padded per expert to BLOCK_M
        block_m = 64
        max_padded = tokens * s.topk + s.experts * (block_m - 1)
        sorted_ids = torch.empty(max_padded, device=device, dtype=torch.int32)
        expert_ids = torch.empty(
            (max_padded + block_m - 1) // block_m, device=device, dtype=torch.int32
        )
        # fill the buffers the way the experts use them: cache1 in ws2, cache2 in common
        n = 2 * s.moe_inter
        cache1 = ws2[: tokens * s.topk * n].view(tokens * s.topk, n)
        cache1.normal_()
        common[: tokens * s.topk * s.moe_inter].view(tokens * s.topk, s.moe_inter).copy_(
            torch.nn.functional.silu(cache1[:, : s.moe_inter])
        )
        sorted_ids.fill_(0)
        expert_ids.fill_(0)
        return common, ws2, sorted_ids, expert_ids

    r = measure_call(probe, run, warmup=False)
    r["vllm_common_bytes"] = common_elems * 2
    r["vllm_ws2_bytes"] = ws2_elems * 2
    return r


def term_moe_transient(
    probe: Probe, s: GpuShape, w: MoeWeights, tokens: int, device: torch.device
) -> dict[str, int]:
    x = _randn(tokens, s.hidden, dtype=torch.bfloat16, device=device)
    r = measure_call(probe, lambda: moe_forward(x, w, s.topk))
    return r
