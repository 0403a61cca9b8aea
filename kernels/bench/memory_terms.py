"""Measure the non-KV memory terms of vLLM 0.33's start-up on one GPU (issue 11, item 4).

Self-contained: needs torch, triton, optionally the fla-core wheel, and a folder of
vLLM 0.33 source files (``--vllm-src``, extracted from the public wheel, never committed)
that holds the Triton kernels vLLM runs. Those files are loaded through a small shim
(:func:`install_vllm_shim`) that stands in for the parts of the vllm package they import
(platform queries, triton re-exports), so no vLLM install and no vLLM C extension is needed.

Terms (every row of the CSV names the kernel that ran and where it came from):

``gdn_prefill_transient``
    vLLM's vendored FLA ``chunk_gated_delta_rule`` (vllm/third_party/flash_linear_attention/
    ops/chunk.py, the "Triton/FLA" GDN prefill backend) on one sequence of
    max_num_batched_tokens tokens at the per-GPU head shapes. ``bytes`` = peak
    ``torch.cuda.max_memory_allocated`` minus the inputs (q, k, v, g, beta, fp32 initial
    state) minus the outputs still held (o, final state): the kernel's own scratch.
    vLLM's profile run never reaches this kernel (``_forward_core`` returns early while
    ``attn_metadata`` is None and only warms the kernels up at T=64), so the profiler does
    not count it. On Hopper vLLM 0.33's "auto" backend picks FlashInfer's GDN prefill
    (qwen_gdn_linear_attn.py ``_resolve_gdn_prefill_backend``), which is JIT-compiled and
    not carried here; the Triton/FLA path is what ``--gdn-prefill-backend triton`` runs.
``gdn_prefill_core_path``
    The prefill half of ``GatedDeltaNetAttention._forward_core`` from the conv output on:
    ``fused_post_conv_prep`` (split + l2norm + gating), the fp32 initial-state gather, the
    chunk rule, the state write-back. Inputs: conv output, a, b, state pool; output:
    ``core_attn_out``. ``bytes`` = peak minus inputs minus outputs.
``gdn_prefill_transient_fla060``
    The same measurement with fla-core 0.6.0's own ``chunk_gated_delta_rule`` (cross-check).
``sampler_dummy_run``
    ``GPUModelRunner._dummy_sampler_run`` (gpu_model_runner.py): bf16 logits
    [max_num_seqs, vocab] from the lm_head, then the sampler as its second (generator)
    call runs it: fp32 copy, greedy argmax, in-place temperature, vLLM's Triton top-k/top-p
    (v1/sample/ops/topk_topp_triton.py, whose per-device [min(SMs, n), vocab] fp32 buffer
    is cached and stays allocated), softmax, exponential noise, argmax. ``bytes`` = peak
    minus the bf16 logits (the cached buffer included).
``moe_workspace``
    The buffers vLLM 0.33's modular fused-MoE kernel takes from the workspace manager for
    the unquantized Triton experts at M = max_num_batched_tokens
    (experts/triton_moe.py ``TritonExperts.workspace_shapes`` and modular_kernel.py: a
    common buffer of max(M*topk*max(N/2, K), M*K) elements plus workspace2 of
    M*topk*max(N, K), bf16) plus the routing-alignment buffers. They are allocated and
    filled by a grouped-GEMM MoE (``torch._grouped_mm``, a public stand-in for vLLM's
    ``fused_moe_kernel``, which is not run here). The workspace manager keeps the buffers
    after the profile run.
``moe_grouped_mm_transient``
    Peak minus inputs minus output of the whole stand-in MoE forward (router, top-k,
    sort, two grouped GEMMs, SiLU-and-mul, weighted scatter) at M tokens.
``cudagraph_pool`` / ``cudagraph_pool_total`` / ``cudagraph_pool_vllm_estimate``
    A decode step of one 4-layer period (3 GDN layers with vLLM's fused sigmoid-gating
    recurrent kernel + 1 gated attention layer with torch SDPA, each followed by the
    stand-in MoE and a shared expert; cuBLAS projections) captured with
    ``torch.cuda.graph`` into one shared pool at every capture size vLLM 0.33 picks on an
    H200 (vllm/config/vllm.py: [1, 2, 4] + 8..248 step 8 + 256..512 step 16, ceiling 512),
    largest first as vLLM captures. Per size: the device free-memory drop of that capture
    (what ``profile_cudagraph_memory`` measures). Total: the sum over all sizes. Estimate:
    vLLM's formula (first capture + (n-1) x second capture). ``cudagraph_pool_2periods``
    repeats the total with 8 layers, to separate the per-layer part.

Usage (device): ``python3 memory_terms.py --out $OUT --vllm-src .memcarry/vllm_src``.
CPU dry run (plumbing only, no byte counts): ``TRITON_INTERPRET=1 python3 memory_terms.py
--out /tmp/x --vllm-src ... --device cpu``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime as _dt
import gc
import json
import platform
import sys
import time
import traceback
import types
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

CSV_COLUMNS = (
    "term",
    "model",
    "tp",
    "max_num_batched_tokens",
    "max_num_seqs",
    "capture_size",
    "bytes",
    "kernel",
    "source",
    "command",
    "date",
)

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


def _per_gpu(
    model: str,
    tp: int,
    *,
    hidden: int,
    hk: int,
    hv: int,
    hq: int,
    kv: int,
    experts: int,
    topk: int,
    moe_inter: int,
    shared_inter: int,
    vocab: int = 248320,
) -> GpuShape:
    return GpuShape(
        model=model,
        tp=tp,
        hidden=hidden,
        hk=hk // tp,
        hv=hv // tp,
        dk=128,
        dv=128,
        hq=hq // tp,
        hkv=max(kv // tp, 1),
        head_dim=256,
        experts=experts,
        topk=topk,
        moe_inter=moe_inter // tp,
        shared_inter=shared_inter // tp,
        vocab=vocab,
    )


# Full-model numbers from capsim/models.py (PRESETS); tests/calibration checks they agree.
SHAPES: tuple[GpuShape, ...] = (
    _per_gpu(
        "qwen3.5-35b-a3b",
        1,
        hidden=2048,
        hk=16,
        hv=32,
        hq=16,
        kv=2,
        experts=256,
        topk=8,
        moe_inter=512,
        shared_inter=512,
    ),
    _per_gpu(
        "qwen3.5-397b-a17b",
        8,
        hidden=4096,
        hk=16,
        hv=64,
        hq=32,
        kv=2,
        experts=512,
        topk=10,
        moe_inter=1024,
        shared_inter=1024,
    ),
)

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


# ----------------------------------------------------------------------------- vllm shim


class _Platform:
    """The few ``current_platform`` queries the carried vLLM kernel files make."""

    device_type = "cuda"

    def is_cuda(self) -> bool:
        return torch.cuda.is_available()

    def is_cuda_alike(self) -> bool:
        return torch.cuda.is_available()

    def is_rocm(self) -> bool:
        return False

    def is_xpu(self) -> bool:
        return False

    def is_cpu(self) -> bool:
        return not torch.cuda.is_available()

    def is_device_capability_family(self, family: int) -> bool:
        if not torch.cuda.is_available():
            return False
        major, minor = torch.cuda.get_device_capability()
        return (major * 10 + minor) // 10 == family // 10

    def is_device_capability(self, cap: int) -> bool:
        if not torch.cuda.is_available():
            return False
        major, minor = torch.cuda.get_device_capability()
        return major * 10 + minor == cap


def _num_compute_units(device_index: int | None = None) -> int:
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(device_index or 0).multi_processor_count
    return 8


def _async_tensor_h2d(
    data: Any, device: Any = None, dtype: Any = None, out: Any = None
) -> torch.Tensor:
    return torch.as_tensor(data, dtype=dtype).to(device, non_blocking=True)


def install_vllm_shim(src: Path) -> None:
    """Make ``import vllm.<carried file>`` work from the extracted files under ``src``.

    Packages become bare namespace modules (their ``__init__`` files, which import all of
    vLLM, are not run); the modules the carried files import for platform facts and
    triton re-exports are small stand-ins defined here.
    """
    import triton
    import triton.language as tl

    try:
        import triton.language.extra.libdevice as tldevice
    except ImportError:  # pragma: no cover - older triton
        tldevice = types.SimpleNamespace()

    def package(name: str) -> types.ModuleType:
        mod = types.ModuleType(name)
        mod.__path__ = [str(src / name.replace(".", "/"))]
        sys.modules[name] = mod
        return mod

    for name in (
        "vllm",
        "vllm.third_party",
        "vllm.third_party.flash_linear_attention",
        "vllm.third_party.flash_linear_attention.ops",
        "vllm.v1",
        "vllm.v1.sample",
        "vllm.v1.sample.ops",
        "vllm.model_executor",
        "vllm.model_executor.warmup",
        "vllm.utils",
    ):
        package(name)

    tu = types.ModuleType("vllm.triton_utils")
    tu.triton, tu.tl, tu.tldevice, tu.HAS_TRITON = triton, tl, tldevice, True
    sys.modules["vllm.triton_utils"] = tu

    plat = types.ModuleType("vllm.platforms")
    plat.current_platform = _Platform()
    sys.modules["vllm.platforms"] = plat

    envs = types.ModuleType("vllm.envs")
    envs.VLLM_TRITON_JIT_WARMUP_NUM_THREADS = 1
    sys.modules["vllm.envs"] = envs
    sys.modules["vllm"].envs = envs

    sync = types.ModuleType("vllm.utils.gpu_sync_debug")
    sync.gpu_sync_allowed = contextlib.nullcontext
    sys.modules["vllm.utils.gpu_sync_debug"] = sync

    tor = types.ModuleType("vllm.utils.torch_utils")
    tor.async_tensor_h2d = _async_tensor_h2d
    sys.modules["vllm.utils.torch_utils"] = tor

    pu = types.ModuleType("vllm.utils.platform_utils")
    pu.num_compute_units = _num_compute_units
    sys.modules["vllm.utils.platform_utils"] = pu


def _interpreter_aliases() -> None:
    """CPU dry run only: make FLA's ``exp = tl.exp`` style aliases callable in TRITON_INTERPRET."""
    import triton
    import triton.language as tl

    op = __import__("vllm.third_party.flash_linear_attention.ops.op", fromlist=["op"])
    scope: dict[str, Any] = {"triton": triton, "tl": tl}
    for name in ("exp", "exp2", "log", "log2"):  # jit wrappers need tl among their globals
        exec(f"@triton.jit\ndef _{name}(x):\n    return tl.{name}(x)\n", scope)
    _exp, _exp2, _log, _log2 = (scope[f"_{n}"] for n in ("exp", "exp2", "log", "log2"))
    op.exp, op.exp2, op.log, op.log2 = _exp, _exp2, _log, _log2


# ----------------------------------------------------------------------------- measuring


class Probe:
    """Allocated-memory bookkeeping; on CPU every figure is 0 (plumbing check only)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def clean(self) -> None:
        gc.collect()
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()

    def allocated(self) -> int:
        return torch.cuda.memory_allocated() if self.cuda else 0

    def reset_peak(self) -> None:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()

    def peak(self) -> int:
        return torch.cuda.max_memory_allocated() if self.cuda else 0

    def free(self) -> int:
        return torch.cuda.mem_get_info()[0] if self.cuda else 0

    def reserved(self) -> int:
        return torch.cuda.memory_reserved() if self.cuda else 0


def measure_call(probe: Probe, run: Callable[[], Any], warmup: bool = True) -> dict[str, int]:
    """Run ``run`` (once to compile/autotune, then measured); inputs already allocated.

    Returns base (inputs), peak, held (outputs still referenced) and transient
    (peak - base - held) in bytes.
    """
    if warmup:
        out = run()
        probe.sync()
        del out
        probe.clean()
    base = probe.allocated()
    probe.reset_peak()
    out = run()
    probe.sync()
    peak = probe.peak()
    held = probe.allocated() - base
    del out
    return {
        "base": base,
        "peak": peak,
        "held": held,
        "transient": peak - base - held,
        "peak_over_base": peak - base,
    }


# ----------------------------------------------------------------------------- terms


def _randn(
    *shape: int, dtype: torch.dtype, device: torch.device, scale: float = 1.0
) -> torch.Tensor:
    return (scale * torch.randn(*shape, device=device, dtype=torch.float32)).to(dtype)


def gdn_inputs(
    s: GpuShape, tokens: int, device: torch.device, *, expand_qk: bool = False
) -> dict[str, Any]:
    hq = s.hv if expand_qk else s.hk
    q = torch.nn.functional.normalize(
        _randn(1, tokens, hq, s.dk, dtype=torch.float32, device=device), dim=-1
    )
    k = torch.nn.functional.normalize(
        _randn(1, tokens, hq, s.dk, dtype=torch.float32, device=device), dim=-1
    )
    return {
        "q": q.to(torch.bfloat16),
        "k": k.to(torch.bfloat16),
        "v": _randn(1, tokens, s.hv, s.dv, dtype=torch.bfloat16, device=device),
        "g": torch.nn.functional.logsigmoid(torch.randn(1, tokens, s.hv, device=device)),
        "beta": torch.rand(1, tokens, s.hv, device=device).sigmoid(),
        "initial_state": _randn(1, s.hv, s.dv, s.dk, dtype=torch.float32, device=device, scale=0.1),
        "cu_seqlens": torch.tensor([0, tokens], device=device, dtype=torch.int32),
    }


def _measure_chunk_rule(
    probe: Probe,
    rule: Callable[..., Any],
    x: dict[str, torch.Tensor],
    long_cu_seqlens: bool = False,
    **extra: Any,
) -> dict[str, int]:
    """Measure one call of a chunked gated-delta rule (vLLM's or fla-core's) on ``x``."""

    def run() -> Any:
        cu = x["cu_seqlens"].long() if long_cu_seqlens else x["cu_seqlens"]
        return rule(
            q=x["q"],
            k=x["k"],
            v=x["v"],
            g=x["g"],
            beta=x["beta"],
            initial_state=x["initial_state"],
            output_final_state=True,
            cu_seqlens=cu,
            **extra,
        )

    return measure_call(probe, run)


def term_gdn_vllm(probe: Probe, s: GpuShape, tokens: int, device: torch.device) -> dict[str, int]:
    from vllm.third_party.flash_linear_attention.ops.chunk import chunk_gated_delta_rule

    x = gdn_inputs(s, tokens, device)
    return _measure_chunk_rule(probe, chunk_gated_delta_rule, x, use_qk_l2norm_in_kernel=False)


def term_gdn_fla060(probe: Probe, s: GpuShape, tokens: int, device: torch.device) -> dict[str, int]:
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    # fla-core's chunk rule takes q/k with the value-head count: expand the key heads.
    x = gdn_inputs(s, tokens, device, expand_qk=True)
    return _measure_chunk_rule(probe, chunk_gated_delta_rule, x, long_cu_seqlens=True)


def term_gdn_core_path(
    probe: Probe, s: GpuShape, tokens: int, device: torch.device
) -> dict[str, int]:
    """Prefill half of vLLM's GDN ``_forward_core`` from the conv output to core_attn_out."""
    from vllm.third_party.flash_linear_attention.ops.chunk import chunk_gated_delta_rule
    from vllm.third_party.flash_linear_attention.ops.fused_gdn_prefill_post_conv import (
        fused_post_conv_prep,
    )

    qkv_dim = 2 * s.hk * s.dk + s.hv * s.dv
    pool_slots = 4
    conv_out = _randn(tokens, qkv_dim, dtype=torch.bfloat16, device=device)
    a = _randn(tokens, s.hv, dtype=torch.bfloat16, device=device)
    b = _randn(tokens, s.hv, dtype=torch.bfloat16, device=device)
    a_log = torch.log(torch.rand(s.hv, device=device) * 15 + 1)
    dt_bias = torch.ones(s.hv, device=device)
    ssm_state = _randn(pool_slots, s.hv, s.dv, s.dk, dtype=torch.float32, device=device, scale=0.1)
    idx = torch.tensor([1], device=device, dtype=torch.long)
    has_init = torch.tensor([True], device=device)
    cu = torch.tensor([0, tokens], device=device, dtype=torch.int32)
    core_attn_out = torch.zeros(tokens, s.hv, s.dv, device=device, dtype=torch.bfloat16)

    def run() -> None:
        q, k, v, g, beta = fused_post_conv_prep(
            conv_output=conv_out,
            a=a,
            b=b,
            A_log=a_log,
            dt_bias=dt_bias,
            num_k_heads=s.hk,
            head_k_dim=s.dk,
            head_v_dim=s.dv,
            apply_l2norm=True,
            output_g_exp=False,
        )
        init = ssm_state[idx]
        init[~has_init, ...] = 0
        o, last = chunk_gated_delta_rule(
            q=q.unsqueeze(0),
            k=k.unsqueeze(0),
            v=v.unsqueeze(0),
            g=g.unsqueeze(0),
            beta=beta.unsqueeze(0),
            initial_state=init,
            output_final_state=True,
            cu_seqlens=cu,
            use_qk_l2norm_in_kernel=False,
        )
        ssm_state[idx] = last.to(ssm_state.dtype)
        core_attn_out[:tokens] = o.squeeze(0)

    r = measure_call(probe, run)
    return r


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


# ----------------------------------------------------------------------------- graphs


class DecodePeriod:
    """One decode step over ``layers`` layers (every 4th an attention layer), static buffers."""

    def __init__(
        self, s: GpuShape, layers: int, max_batch: int, device: torch.device, ctx: int = 256
    ) -> None:
        from vllm.third_party.flash_linear_attention.ops.fused_sigmoid_gating import (
            fused_sigmoid_gating_delta_rule_update,
        )

        self.recurrent = fused_sigmoid_gating_delta_rule_update
        bf = torch.bfloat16
        self.s, self.ctx = s, ctx
        h = s.hidden
        qkv = 2 * s.hk * s.dk + s.hv * s.dv
        self.x = _randn(max_batch, h, dtype=bf, device=device)
        self.cu = torch.arange(max_batch + 1, device=device, dtype=torch.int32)
        self.idx = torch.arange(max_batch, device=device, dtype=torch.int32)
        self.moe = moe_weights(s, device)  # one expert set shared by all layers (weights only)
        self.layers: list[dict[str, Any]] = []
        for i in range(layers):
            if (i + 1) % 4 == 0:
                self.layers.append(
                    {
                        "kind": "attn",
                        "wq": _randn(h, 2 * s.hq * s.head_dim, dtype=bf, device=device, scale=0.02),
                        "wkv": _randn(
                            h, 2 * s.hkv * s.head_dim, dtype=bf, device=device, scale=0.02
                        ),
                        "wo": _randn(s.hq * s.head_dim, h, dtype=bf, device=device, scale=0.02),
                        "k": _randn(max_batch, s.hkv, ctx, s.head_dim, dtype=bf, device=device),
                        "v": _randn(max_batch, s.hkv, ctx, s.head_dim, dtype=bf, device=device),
                    }
                )
            else:
                self.layers.append(
                    {
                        "kind": "gdn",
                        "wqkvz": _randn(h, qkv + s.hv * s.dv, dtype=bf, device=device, scale=0.02),
                        "wba": _randn(h, 2 * s.hv, dtype=bf, device=device, scale=0.02),
                        "wo": _randn(s.hv * s.dv, h, dtype=bf, device=device, scale=0.02),
                        "conv_w": _randn(qkv, 4, dtype=bf, device=device, scale=0.5),
                        "conv_state": _randn(max_batch, qkv, 3, dtype=bf, device=device),
                        "ssm": _randn(
                            max_batch,
                            s.hv,
                            s.dv,
                            s.dk,
                            dtype=torch.float32,
                            device=device,
                            scale=0.1,
                        ),
                        "a_log": torch.log(torch.rand(s.hv, device=device) * 15 + 1),
                        "dt_bias": torch.ones(s.hv, device=device),
                    }
                )

    @staticmethod
    def _rms(x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)

    def step(self, b: int) -> torch.Tensor:
        s = self.s
        x = self.x[:b]
        for layer in self.layers:
            hn = self._rms(x)
            if layer["kind"] == "gdn":
                qkvz = hn @ layer["wqkvz"]
                ba = hn @ layer["wba"]
                qkv_dim = layer["conv_w"].shape[0]
                mixed, z = qkvz[:, :qkv_dim], qkvz[:, qkv_dim:]
                win = torch.cat([layer["conv_state"][:b], mixed.unsqueeze(-1)], dim=-1)
                layer["conv_state"][:b].copy_(win[..., 1:])
                conv = torch.nn.functional.silu((win * layer["conv_w"]).sum(-1))
                q, k, v = torch.split(conv, [s.hk * s.dk, s.hk * s.dk, s.hv * s.dv], dim=-1)
                o, _ = self.recurrent(
                    A_log=layer["a_log"],
                    a=ba[:, s.hv :].contiguous(),
                    b=ba[:, : s.hv].contiguous(),
                    dt_bias=layer["dt_bias"],
                    q=q.reshape(1, b, s.hk, s.dk),
                    k=k.reshape(1, b, s.hk, s.dk),
                    v=v.reshape(1, b, s.hv, s.dv),
                    initial_state=layer["ssm"],
                    inplace_final_state=True,
                    cu_seqlens=self.cu[: b + 1],
                    ssm_state_indices=self.idx[:b],
                    use_qk_l2norm_in_kernel=True,
                )
                o = self._rms(o.reshape(b, s.hv, s.dv)) * torch.nn.functional.silu(
                    z.reshape(b, s.hv, s.dv)
                )
                x = x + o.reshape(b, -1) @ layer["wo"]
            else:
                qg = (hn @ layer["wq"]).view(b, s.hq, 2 * s.head_dim)
                q, gate = qg[..., : s.head_dim], qg[..., s.head_dim :]
                kv = (hn @ layer["wkv"]).view(b, 2, s.hkv, s.head_dim)
                layer["k"][:b, :, -1].copy_(kv[:, 0])
                layer["v"][:b, :, -1].copy_(kv[:, 1])
                att = torch.nn.functional.scaled_dot_product_attention(
                    q.unsqueeze(2), layer["k"][:b], layer["v"][:b], enable_gqa=s.hq != s.hkv
                ).squeeze(2)
                x = x + (att * torch.sigmoid(gate)).reshape(b, -1) @ layer["wo"]
            x = x + moe_forward(self._rms(x), self.moe, s.topk)
        return x


def term_cudagraphs(
    probe: Probe, s: GpuShape, layers: int, sizes: list[int], device: torch.device
) -> dict[str, Any]:
    model = DecodePeriod(s, layers, max(sizes), device)
    if not probe.cuda:  # CPU: run the step eagerly at two sizes, no capture
        for b in sizes[-2:]:
            model.step(b)
        return {"per_size": dict.fromkeys(sizes, 0), "total": 0, "estimate": 0, "reserved_total": 0}
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # eager warm-up: compile kernels outside capture
        for b in (max(sizes), min(sizes)):
            model.step(b)
    torch.cuda.current_stream().wait_stream(side)
    probe.clean()
    pool = torch.cuda.graph_pool_handle()
    graphs: list[Any] = []
    per_size: dict[int, int] = {}
    per_size_reserved: dict[int, int] = {}
    probe.clean()
    free0, res0 = probe.free(), probe.reserved()
    for b in sorted(sizes, reverse=True):
        with torch.cuda.stream(side):
            model.step(b)  # vLLM warms each size up before capturing it
        torch.cuda.current_stream().wait_stream(side)
        probe.clean()
        free_before, res_before = probe.free(), probe.reserved()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool):
            out = model.step(b)
        probe.sync()
        graphs.append((g, out))
        per_size[b] = free_before - probe.free()
        per_size_reserved[b] = probe.reserved() - res_before
    probe.clean()
    total = free0 - probe.free()
    reserved_total = probe.reserved() - res0
    ordered = [per_size[b] for b in sorted(sizes, reverse=True)]
    second = max(ordered[1] if len(ordered) > 1 else 0, 1 << 20)
    estimate = ordered[0] + (len(ordered) - 1) * second
    graphs[0][0].replay()
    probe.sync()
    del graphs, model
    probe.clean()
    return {
        "per_size": per_size,
        "per_size_reserved": per_size_reserved,
        "total": total,
        "reserved_total": reserved_total,
        "estimate": estimate,
    }


# ----------------------------------------------------------------------------- driver


class Writer:
    """Appends rows to the CSV as they are measured (a crash keeps what was written)."""

    def __init__(self, out: Path, command: str, date: str) -> None:
        self.path = out / "h200_memory_terms.csv"
        self.command, self.date = command, date
        with self.path.open("w", newline="") as f:
            csv.writer(f).writerow(CSV_COLUMNS)

    def row(
        self,
        term: str,
        s: GpuShape,
        *,
        tokens: int = 0,
        seqs: int = 0,
        capture: int = 0,
        nbytes: int,
        kernel: str,
        source: str,
    ) -> None:
        values = (
            term,
            s.model,
            s.tp,
            tokens,
            seqs,
            capture,
            int(nbytes),
            kernel,
            source,
            self.command,
            self.date,
        )
        with self.path.open("a", newline="") as f:
            csv.writer(f).writerow(values)
        print(
            f"{term:32s} {s.model:18s} tp{s.tp} tok={tokens:6d} seqs={seqs:5d} cap={capture:4d} "
            f"{nbytes / 2**20:10.1f} MiB",
            flush=True,
        )


def _versions() -> dict[str, Any]:
    import triton

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda_runtime": torch.version.cuda,
    }
    try:
        import fla

        info["fla_core"] = getattr(fla, "__version__", "unknown")
    except Exception:
        info["fla_core"] = None
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(gpu=p.name, gpu_total_bytes=p.total_memory, sms=p.multi_processor_count)
        with contextlib.suppress(Exception):
            import subprocess

            info["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            ).stdout.strip()
    return info


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1, sort_keys=True, default=str))
    tmp.replace(path)


@contextlib.contextmanager
def _step(name: str, details: dict[str, Any], errors: list[str]) -> Iterator[None]:
    t0 = time.time()
    try:
        yield
    except Exception as exc:
        errors.append(f"{name}: {exc!r}")
        traceback.print_exc()
        print(f"FAILED {name}: {exc!r}", flush=True)
    finally:
        details.setdefault("_seconds", {})[name] = round(time.time() - t0, 2)
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--vllm-src", required=True, type=Path, help="extracted vLLM 0.33 files")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument(
        "--budget-s", type=float, default=420.0, help="stop starting new terms after this"
    )
    ap.add_argument("--skip", default="", help="comma list of terms to skip")
    ap.add_argument("--autotune", action="store_true", help="let Triton autotune (slow)")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device=cuda but torch sees no GPU", file=sys.stderr)
        return 2
    if not (args.vllm_src / "vllm").is_dir():
        print(f"--vllm-src={args.vllm_src} has no vllm/ folder", file=sys.stderr)
        return 2
    t_start = time.time()
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    torch.manual_seed(0)
    install_vllm_shim(args.vllm_src.resolve())
    probe = Probe(device)
    if not args.autotune or not probe.cuda:
        # Autotuners take their first config without benchmarking (as vLLM's
        # VLLM_TRITON_FORCE_FIRST_CONFIG does): buffer sizes follow the shapes, not the
        # config, and compiling every config would not fit the lease. On CPU the
        # interpreter has no benchmarker at all.
        import triton.runtime.autotuner as _at

        _at.Autotuner._bench = lambda self, *a, config, **k: [1.0, 1.0, 1.0]
    if not probe.cuda:
        _interpreter_aliases()
    date = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%MZ")
    command = "python3 kernels/bench/memory_terms.py " + " ".join(
        a for a in (argv if argv is not None else sys.argv[1:])
    )
    writer = Writer(args.out, command, date)
    skip = {t for t in args.skip.split(",") if t}
    shapes = SHAPES if probe.cuda else tuple(tiny_shape(s) for s in SHAPES)
    tokens_list = GPU_TOKENS if probe.cuda else CPU_TOKENS
    seqs_list = GPU_SEQS if probe.cuda else CPU_SEQS
    details: dict[str, Any] = {}
    errors: list[str] = []
    meta: dict[str, Any] = {
        "date": date,
        "command": command,
        "versions": _versions(),
        "vllm_reference": VLLM_REF,
        "shapes": [asdict(s) for s in shapes],
        "errors": errors,
        "details": details,
    }
    meta_path = args.out / "meta.json"
    _write_json(meta_path, meta)
    torch.set_grad_enabled(False)  # vLLM runs the model without autograd

    def time_left() -> bool:
        return time.time() - t_start < args.budget_s

    fla_src = f"{VLLM_REF}: vllm/third_party/flash_linear_attention/ops/chunk.py"
    src_here = "measured here: torch.cuda.max_memory_allocated delta"
    # 1. GDN prefill transient (vLLM's vendored FLA) and the layer-core path
    for term, fn, kernel in (
        (
            "gdn_prefill_transient",
            term_gdn_vllm,
            "vllm0.33 Triton/FLA chunk_gated_delta_rule (1 seq, fp32 state)",
        ),
        (
            "gdn_prefill_core_path",
            term_gdn_core_path,
            "vllm0.33 fused_post_conv_prep + state gather + chunk_gated_delta_rule + write-back",
        ),
    ):
        if term in skip:
            continue
        for s in shapes:
            for t in tokens_list:
                if not time_left():
                    break
                with _step(f"{term}/{s.model}/{t}", details, errors):
                    r = fn(probe, s, t, device)
                    details[f"{term}/{s.model}/{t}"] = r
                    writer.row(
                        term,
                        s,
                        tokens=t,
                        nbytes=r["transient"],
                        kernel=kernel,
                        source=f"{fla_src}; {src_here} (peak - inputs - held outputs)",
                    )
        _write_json(meta_path, meta)
    # 2. sampler dummy run
    if "sampler_dummy_run" not in skip and time_left():
        topk_topp, topk_label = load_topk_topp()
        vocab = shapes[0].vocab
        for n in seqs_list:
            if not time_left():
                break
            with _step(f"sampler/{n}", details, errors):
                r = term_sampler(probe, vocab, n, device, topk_topp)
                details[f"sampler/{n}"] = r
                for s in shapes:  # same vocab and fp32 path for both models, any TP
                    writer.row(
                        "sampler_dummy_run",
                        s,
                        seqs=n,
                        nbytes=r["peak_over_base"],
                        kernel=f"Sampler.forward generator call; {topk_label}",
                        source=f"{VLLM_REF}: v1/worker/gpu_model_runner.py _dummy_sampler_run, "
                        f"v1/sample/sampler.py; {src_here} (peak - bf16 logits)",
                    )
        _write_json(meta_path, meta)
    # 3. MoE workspace and stand-in transient
    for s in shapes:
        if not time_left() or {"moe_workspace", "moe_grouped_mm_transient"} <= skip:
            break
        weights = moe_weights(s, device)
        for t in tokens_list:
            if not time_left():
                break
            if "moe_workspace" not in skip:
                with _step(f"moe_workspace/{s.model}/{t}", details, errors):
                    r = term_moe_workspace(probe, s, weights, t, device)
                    details[f"moe_workspace/{s.model}/{t}"] = r
                    writer.row(
                        "moe_workspace",
                        s,
                        tokens=t,
                        nbytes=r["held"],
                        kernel="vllm0.33 TritonExperts workspace13/workspace2 + align buffers "
                        "(allocated and filled; fused_moe_kernel not run)",
                        source=f"{VLLM_REF}: fused_moe/experts/triton_moe.py workspace_shapes, "
                        "fused_moe/modular_kernel.py; measured here: torch.cuda.memory_allocated "
                        "held by the buffers",
                    )
            if "moe_grouped_mm_transient" not in skip:
                with _step(f"moe_grouped_mm/{s.model}/{t}", details, errors):
                    r = term_moe_transient(probe, s, weights, t, device)
                    details[f"moe_grouped_mm/{s.model}/{t}"] = r
                    writer.row(
                        "moe_grouped_mm_transient",
                        s,
                        tokens=t,
                        nbytes=r["transient"],
                        kernel="stand-in MoE: torch._grouped_mm sorted dispatch + shared expert",
                        source=f"public torch {torch.__version__} kernel; {src_here}",
                    )
        del weights
        probe.clean()
        _write_json(meta_path, meta)
    # 4. CUDA graph pool of a decode step
    sizes = vllm_capture_sizes(256, 8192) if probe.cuda else [1, 2, 4]
    for layers, term in ((4, "cudagraph_pool"), (8, "cudagraph_pool_2periods")):
        if term in skip:
            continue
        for s in shapes:
            if not time_left():
                break
            with _step(f"{term}/{s.model}", details, errors):
                r = term_cudagraphs(probe, s, layers, sizes, device)
                details[f"{term}/{s.model}"] = r
                desc = (
                    f"torch.cuda.graph decode step, {layers} layers (3 GDN: vllm0.33 "
                    f"fused_sigmoid_gating_delta_rule_update; 1 attn: torch SDPA; each + "
                    f"grouped-mm MoE + shared expert), {len(sizes)} sizes in one pool, "
                    "largest first"
                )
                src = (
                    f"capture sizes: {VLLM_REF} config/vllm.py (max_num_seqs 256/512/1024 give the "
                    f"same list on H200); measured here: torch.cuda.mem_get_info drop"
                )
                top = max(sizes)
                if term == "cudagraph_pool":
                    for b in sorted(sizes):
                        writer.row(
                            term,
                            s,
                            seqs=256,
                            capture=b,
                            nbytes=r["per_size"][b],
                            kernel=desc,
                            source=src,
                        )
                    writer.row(
                        "cudagraph_pool_vllm_estimate",
                        s,
                        seqs=256,
                        capture=top,
                        nbytes=r["estimate"],
                        kernel=desc,
                        source=src + "; first + (n-1) x second as gpu_model_runner.py "
                        "profile_cudagraph_memory",
                    )
                    writer.row(
                        "cudagraph_pool_total",
                        s,
                        seqs=256,
                        capture=top,
                        nbytes=r["total"],
                        kernel=desc,
                        source=src,
                    )
                else:
                    writer.row(
                        term, s, seqs=256, capture=top, nbytes=r["total"], kernel=desc, source=src
                    )
        _write_json(meta_path, meta)
    # 5. fla-core 0.6.0 cross-check of the GDN transient
    if "gdn_prefill_transient_fla060" not in skip:
        for s in shapes:
            for t in tokens_list:
                if not time_left():
                    break
                with _step(f"fla060/{s.model}/{t}", details, errors):
                    r = term_gdn_fla060(probe, s, t, device)
                    details[f"fla060/{s.model}/{t}"] = r
                    writer.row(
                        "gdn_prefill_transient_fla060",
                        s,
                        tokens=t,
                        nbytes=r["transient"],
                        kernel="fla-core 0.6.0 fla.ops.gated_delta_rule.chunk_gated_delta_rule "
                        "(q/k expanded to value heads)",
                        source=f"PyPI fla-core 0.6.0; {src_here} (peak - inputs - held outputs)",
                    )
    if probe.cuda:  # device memory used outside torch's allocator (context, cuBLAS, modules)
        probe.clean()
        free, total = torch.cuda.mem_get_info()
        meta["non_torch_bytes_at_end"] = total - free - probe.reserved()
    meta["wall_s"] = round(time.time() - t_start, 1)
    _write_json(meta_path, meta)
    print(f"done in {meta['wall_s']} s; {len(errors)} errors", flush=True)
    for e in errors:
        print("ERROR", e, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
