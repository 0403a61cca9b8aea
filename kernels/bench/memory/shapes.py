"""Per-GPU shapes of the memory-term benchmark, derived from capsim's presets
(``capsim.models.PRESETS`` through ``capsim.calibration.shapes.step_shapes``: never copied),
the measured grids, and vLLM 0.33's CUDA-graph capture sizes."""

from __future__ import annotations

from dataclasses import dataclass, replace

from capsim.calibration.shapes import step_shapes
from capsim.models import PRESETS

VLLM_REF = "vLLM 0.33.0 wheel (PyPI vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl)"


@dataclass(frozen=True)
class GpuShape:
    """Per-GPU shapes of one model at one TP degree (mirrors capsim/models.py presets)."""

    model: str
    tp: int
    hidden: int
    hk: int  # GDN key heads on this GPU
    hv: int  # GDN value heads on this GPU
    dk: int
    dv: int
    hq: int  # attention query heads on this GPU
    hkv: int  # attention KV heads on this GPU (replicated when tp > num_kv_heads)
    head_dim: int
    experts: int
    topk: int
    moe_inter: int  # routed expert width on this GPU (intermediate split over TP)
    shared_inter: int
    vocab: int


def gpu_shape(model: str, tp: int) -> GpuShape:
    """The per-GPU shape of preset ``model`` at ``tp`` (capsim's sharding rule)."""
    s = step_shapes(PRESETS[model], tp)
    return GpuShape(
        model=model,
        tp=tp,
        hidden=s.hidden,
        hk=s.gdn_hk,
        hv=s.gdn_hv,
        dk=s.gdn_dk,
        dv=s.gdn_dv,
        hq=s.attn_hq,
        hkv=s.attn_hkv,
        head_dim=s.head_dim,
        experts=s.num_experts,
        topk=s.topk,
        moe_inter=s.moe_inter,
        shared_inter=s.shared_inter,
        vocab=PRESETS[model].vocab_size,
    )


SHAPES: tuple[GpuShape, ...] = (gpu_shape("qwen3.5-35b-a3b", 1), gpu_shape("qwen3.5-397b-a17b", 8))

GPU_TOKENS = (2048, 8192, 16384)
GPU_SEQS = (256, 512, 1024)
CPU_TOKENS = (64, 128)
CPU_SEQS = (4,)


def tiny_shape(s: GpuShape) -> GpuShape:
    """A CPU-sized copy of ``s`` for the dry run (same head counts, small widths)."""
    return replace(
        s,
        hidden=256,
        experts=8,
        topk=2,
        moe_inter=64,
        shared_inter=64,
        vocab=4096,
        hq=min(s.hq, 4),
        hkv=min(s.hkv, 1),
        head_dim=64,
    )


def vllm_capture_sizes(
    max_num_seqs: int, max_num_batched_tokens: int, ceiling: int = 512
) -> list[int]:
    """Capture sizes vLLM 0.33 picks without speculation.

    vllm/config/vllm.py, non-Blackwell ceiling 512.
    """
    top = min(max_num_seqs * 2, ceiling, max_num_batched_tokens)
    sizes = [s for s in (1, 2, 4) if s <= top]
    if top >= 8:
        sizes += list(range(8, min(top + 1, 256), 8))
    if top >= 256:
        sizes += list(range(256, top + 1, 16))
    if max_num_batched_tokens <= top:
        sizes.append(max_num_batched_tokens)
    if max_num_seqs <= min(max_num_seqs * 2, ceiling) and max_num_seqs <= max_num_batched_tokens:
        sizes.append(max_num_seqs)
    return sorted(set(sizes))
