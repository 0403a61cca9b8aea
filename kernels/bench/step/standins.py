"""Triton stand-ins for the compiled CUDA ops of vLLM's MoE path (few launches each).

vLLM 0.33 runs ``topk_softmax``, ``moe_align_block_size`` and ``silu_and_mul`` as
compiled CUDA kernels (one or two launches each) that cannot be loaded here (its ``_C``
library needs torch 2.14). These are written for this repository, not taken from vLLM:
they compute the same outputs with a comparable number of launches, so the MoE block's
time is not inflated by a dozen small torch kernels per op.

- ``topk_softmax``: one program per token: softmax over the experts in fp32, top-k by
  repeated arg-max, renormalised weights (Qwen3.5's ``norm_topk_prob``);
- ``moe_align_block_size``: (1) per-expert counts by atomic histogram, (2) one program:
  padded offsets, total, expert id per block, padding fill, (3) scatter of each (token,
  slot) to its expert's next position by atomic increment (the order inside an expert
  is not fixed, as in vLLM's kernel);
- ``silu_and_mul``: one elementwise kernel.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _topk_softmax_kernel(x, w_out, id_out, E: tl.constexpr, BE: tl.constexpr, K: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BE)
    m = offs < E
    logit = tl.load(x + row * E + offs, mask=m, other=float("-inf")).to(tl.float32)
    p = tl.exp(logit - tl.max(logit, 0))
    p = p / tl.sum(p, 0)
    p = tl.where(m, p, -1.0)
    total = 0.0
    for j in tl.static_range(K):
        best = tl.max(p, 0)
        idx = tl.min(tl.where(p == best, offs, BE), 0)
        tl.store(w_out + row * K + j, best)
        tl.store(id_out + row * K + j, idx)
        total += best
        p = tl.where(offs == idx, -1.0, p)
    for j in tl.static_range(K):
        w = tl.load(w_out + row * K + j)
        tl.store(w_out + row * K + j, w / total)


def topk_softmax(logits: torch.Tensor, topk: int) -> tuple[torch.Tensor, torch.Tensor]:
    m, e = logits.shape
    w = torch.empty((m, topk), device=logits.device, dtype=torch.float32)
    ids = torch.empty((m, topk), device=logits.device, dtype=torch.int32)
    _topk_softmax_kernel[(m,)](logits, w, ids, e, triton.next_power_of_2(e), topk)
    return w, ids


@triton.jit
def _count_kernel(ids, counts, n, E: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    e = tl.load(ids + offs, mask=m, other=0)
    tl.atomic_add(counts + e, 1, mask=m)


@triton.jit
def _offsets_kernel(
    counts, cursor, sorted_ids, expert_ids, total_out, n, cap, nblocks,
    E: tl.constexpr, BS: tl.constexpr, CHUNK: tl.constexpr,
):  # fmt: skip
    ex = tl.arange(0, E)
    c = tl.load(counts + ex)
    padded = (c + BS - 1) // BS * BS
    pend = tl.cumsum(padded, 0)
    pstart = pend - padded
    tl.store(cursor + ex, pstart)
    total = tl.sum(padded, 0)
    tl.store(total_out, total)
    for start in range(0, cap, CHUNK):
        o = start + tl.arange(0, CHUNK)
        tl.store(sorted_ids + o, n, mask=o < cap)
    for start in range(0, nblocks, CHUNK // E if CHUNK > E else 1):
        b = start + tl.arange(0, CHUNK // E if CHUNK > E else 1)
        pos = b * BS
        eid = tl.sum((pend[None, :] <= pos[:, None]).to(tl.int32), 1)
        eid = tl.where(pos < total, eid, -1)
        tl.store(expert_ids + b, eid, mask=b < nblocks)


@triton.jit
def _scatter_kernel(ids, cursor, sorted_ids, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    e = tl.load(ids + offs, mask=m, other=0)
    pos = tl.atomic_add(cursor + e, 1, mask=m)
    tl.store(sorted_ids + pos, offs, mask=m)


def moe_align_block_size(
    topk_ids, num_experts, block_size, sorted_ids, expert_ids, num_tokens_post_pad,
    expert_map=None, scatter_idx=None,
) -> None:  # fmt: skip
    """Fills vLLM's three outputs (same signature as ``vllm._custom_ops``)."""
    if expert_map is not None or scatter_idx is not None:
        raise NotImplementedError("stand-in: expert_map/scatter_idx are not needed here")
    if num_experts & (num_experts - 1):
        raise ValueError(f"stand-in: num_experts={num_experts} must be a power of two")
    flat = topk_ids.reshape(-1)
    n = flat.numel()
    ws = torch.zeros(2 * num_experts, device=flat.device, dtype=torch.int32)
    counts, cursor = ws[:num_experts], ws[num_experts:]
    block = 1024
    grid = (triton.cdiv(n, block),)
    _count_kernel[grid](flat, counts, n, num_experts, block)
    _offsets_kernel[(1,)](
        counts, cursor, sorted_ids, expert_ids, num_tokens_post_pad, n, sorted_ids.numel(),
        expert_ids.numel(), num_experts, block_size, 4096,
    )  # fmt: skip
    _scatter_kernel[grid](flat, cursor, sorted_ids, n, block)


@triton.jit
def _silu_and_mul_kernel(x, out, d, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = offs < d
    a = tl.load(x + row * 2 * d + offs, mask=m).to(tl.float32)
    b = tl.load(x + row * 2 * d + d + offs, mask=m).to(tl.float32)
    y = a / (1.0 + tl.exp(-a)) * b
    tl.store(out + row * d + offs, y.to(out.dtype.element_ty), mask=m)


def silu_and_mul(out: torch.Tensor, x: torch.Tensor) -> None:
    """``torch.ops._C.silu_and_mul(out, x)`` for a contiguous 2-D ``x`` [rows, 2d]."""
    x2 = x.reshape(-1, x.shape[-1])
    d = x2.shape[1] // 2
    block = min(1024, triton.next_power_of_2(d))
    _silu_and_mul_kernel[(x2.shape[0], triton.cdiv(d, block))](x2, out, d, block)
