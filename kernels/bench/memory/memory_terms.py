"""Measure the non-KV memory terms of vLLM 0.33's start-up on one GPU (issue 11, item 4).

Needs torch, triton, optionally the fla-core wheel, and a folder of
vLLM 0.33 source files (``--vllm-src``, extracted from the public wheel, never committed)
that holds the Triton kernels vLLM runs. Those files are loaded through the one vLLM shim
(``kernels/bench/vllm_shim.py``), which stands in for the parts of the vllm package they
import (platform queries, triton re-exports), so no vLLM install and no vLLM C extension is needed.

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

Usage (device): ``python3 -m capsim_kernels.bench.memory.memory_terms --out $OUT
--vllm-src .vllmwheel/src``.
CPU dry run (plumbing only, no byte counts): ``TRITON_INTERPRET=1 python3 -m
capsim_kernels.bench.memory.memory_terms --out /tmp/x --vllm-src ... --device cpu``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..vllm_shim import install as install_vllm_shim
from ..vllm_shim import interpreter_aliases as _interpreter_aliases
from .cudagraphs import term_cudagraphs
from .probe import Probe, Writer, _step, _versions, _write_json
from .shapes import (
    CPU_SEQS,
    CPU_TOKENS,
    GPU_SEQS,
    GPU_TOKENS,
    SHAPES,
    VLLM_REF,
    GpuShape,
    tiny_shape,
    vllm_capture_sizes,
)
from .terms_gdn import term_gdn_core_path, term_gdn_fla060, term_gdn_vllm
from .terms_moe import (
    load_topk_topp,
    moe_weights,
    term_moe_transient,
    term_moe_workspace,
    term_sampler,
    vllm_moe_workspace_elems,
)

__all__ = ["SHAPES", "GpuShape", "main", "vllm_capture_sizes", "vllm_moe_workspace_elems"]

SRC_HERE = "measured here: torch.cuda.max_memory_allocated delta"


@dataclass
class Run:
    """One measurement run: where rows go, what to skip, the deadline and the metadata."""

    probe: Probe
    writer: Writer
    device: torch.device
    shapes: tuple[GpuShape, ...]
    tokens: tuple[int, ...]
    seqs: tuple[int, ...]
    skip: set[str]
    deadline: float
    meta_path: Path
    meta: dict[str, Any] = field(default_factory=dict)

    def time_left(self) -> bool:
        return time.time() < self.deadline

    @property
    def details(self) -> dict[str, Any]:
        return self.meta["details"]

    @property
    def errors(self) -> list[str]:
        return self.meta["errors"]

    def save(self) -> None:
        _write_json(self.meta_path, self.meta)


def run_gdn(run: Run) -> None:
    """1. GDN prefill transient (vLLM's vendored FLA) and the layer-core path."""
    fla_src = f"{VLLM_REF}: vllm/third_party/flash_linear_attention/ops/chunk.py"
    for term, fn, kernel in (
        ("gdn_prefill_transient", term_gdn_vllm,
         "vllm0.33 Triton/FLA chunk_gated_delta_rule (1 seq, fp32 state)"),
        ("gdn_prefill_core_path", term_gdn_core_path,
         "vllm0.33 fused_post_conv_prep + state gather + chunk_gated_delta_rule + write-back"),
    ):  # fmt: skip
        if term in run.skip:
            continue
        for s in run.shapes:
            for t in run.tokens:
                if not run.time_left():
                    break
                with _step(f"{term}/{s.model}/{t}", run.details, run.errors):
                    r = fn(run.probe, s, t, run.device)
                    run.details[f"{term}/{s.model}/{t}"] = r
                    src = f"{fla_src}; {SRC_HERE} (peak - inputs - held outputs)"
                    run.writer.row(
                        term, s, tokens=t, nbytes=r["transient"], kernel=kernel, source=src
                    )
        run.save()


def run_sampler(run: Run) -> None:
    """2. The sampler's dummy run (same vocab and fp32 path for both models, any TP)."""
    if "sampler_dummy_run" in run.skip or not run.time_left():
        return
    topk_topp, topk_label = load_topk_topp()
    for n in run.seqs:
        if not run.time_left():
            break
        with _step(f"sampler/{n}", run.details, run.errors):
            r = term_sampler(run.probe, run.shapes[0].vocab, n, run.device, topk_topp)
            run.details[f"sampler/{n}"] = r
            for s in run.shapes:
                run.writer.row(
                    "sampler_dummy_run", s, seqs=n, nbytes=r["peak_over_base"],
                    kernel=f"Sampler.forward generator call; {topk_label}",
                    source=f"{VLLM_REF}: v1/worker/gpu_model_runner.py _dummy_sampler_run, "
                    f"v1/sample/sampler.py; {SRC_HERE} (peak - bf16 logits)",
                )  # fmt: skip
    run.save()


def run_moe(run: Run) -> None:
    """3. MoE workspace and the stand-in MoE's transient."""
    workspace_src = (
        f"{VLLM_REF}: fused_moe/experts/triton_moe.py workspace_shapes, "
        "fused_moe/modular_kernel.py; measured here: torch.cuda.memory_allocated held by "
        "the buffers"
    )
    for s in run.shapes:
        if not run.time_left() or {"moe_workspace", "moe_grouped_mm_transient"} <= run.skip:
            break
        weights = moe_weights(s, run.device)
        for t in run.tokens:
            if not run.time_left():
                break
            if "moe_workspace" not in run.skip:
                with _step(f"moe_workspace/{s.model}/{t}", run.details, run.errors):
                    r = term_moe_workspace(run.probe, s, weights, t, run.device)
                    run.details[f"moe_workspace/{s.model}/{t}"] = r
                    run.writer.row(
                        "moe_workspace", s, tokens=t, nbytes=r["held"],
                        kernel="vllm0.33 TritonExperts workspace13/workspace2 + align buffers "
                        "(allocated and filled; fused_moe_kernel not run)", source=workspace_src,
                    )  # fmt: skip
            if "moe_grouped_mm_transient" not in run.skip:
                with _step(f"moe_grouped_mm/{s.model}/{t}", run.details, run.errors):
                    r = term_moe_transient(run.probe, s, weights, t, run.device)
                    run.details[f"moe_grouped_mm/{s.model}/{t}"] = r
                    run.writer.row(
                        "moe_grouped_mm_transient", s, tokens=t, nbytes=r["transient"],
                        kernel="stand-in MoE: torch._grouped_mm sorted dispatch + shared expert",
                        source=f"public torch {torch.__version__} kernel; {SRC_HERE}",
                    )  # fmt: skip
        del weights
        run.probe.clean()
        run.save()


def _cudagraph_rows(run: Run, term: str, s: GpuShape, r: dict, sizes: list[int], desc: str):
    src = (
        f"capture sizes: {VLLM_REF} config/vllm.py (max_num_seqs 256/512/1024 give the "
        f"same list on H200); measured here: torch.cuda.mem_get_info drop"
    )
    top = max(sizes)
    w = run.writer
    if term != "cudagraph_pool":
        w.row(term, s, seqs=256, capture=top, nbytes=r["total"], kernel=desc, source=src)
        return
    for b in sorted(sizes):
        w.row(term, s, seqs=256, capture=b, nbytes=r["per_size"][b], kernel=desc, source=src)
    w.row("cudagraph_pool_vllm_estimate", s, seqs=256, capture=top, nbytes=r["estimate"],
          kernel=desc, source=src + "; first + (n-1) x second as gpu_model_runner.py "
          "profile_cudagraph_memory")  # fmt: skip
    w.row("cudagraph_pool_total", s, seqs=256, capture=top, nbytes=r["total"], kernel=desc,
          source=src)  # fmt: skip


def run_cudagraphs(run: Run) -> None:
    """4. The CUDA graph pool of a decode step."""
    sizes = vllm_capture_sizes(256, 8192) if run.probe.cuda else [1, 2, 4]
    for layers, term in ((4, "cudagraph_pool"), (8, "cudagraph_pool_2periods")):
        if term in run.skip:
            continue
        for s in run.shapes:
            if not run.time_left():
                break
            with _step(f"{term}/{s.model}", run.details, run.errors):
                r = term_cudagraphs(run.probe, s, layers, sizes, run.device)
                run.details[f"{term}/{s.model}"] = r
                desc = (
                    f"torch.cuda.graph decode step, {layers} layers (3 GDN: vllm0.33 "
                    f"fused_sigmoid_gating_delta_rule_update; 1 attn: torch SDPA; each + "
                    f"grouped-mm MoE + shared expert), {len(sizes)} sizes in one pool, "
                    "largest first"
                )
                _cudagraph_rows(run, term, s, r, sizes, desc)
        run.save()


def run_fla060(run: Run) -> None:
    """5. fla-core 0.6.0 cross-check of the GDN transient."""
    if "gdn_prefill_transient_fla060" in run.skip:
        return
    for s in run.shapes:
        for t in run.tokens:
            if not run.time_left():
                break
            with _step(f"fla060/{s.model}/{t}", run.details, run.errors):
                r = term_gdn_fla060(run.probe, s, t, run.device)
                run.details[f"fla060/{s.model}/{t}"] = r
                run.writer.row(
                    "gdn_prefill_transient_fla060", s, tokens=t, nbytes=r["transient"],
                    kernel="fla-core 0.6.0 fla.ops.gated_delta_rule.chunk_gated_delta_rule "
                    "(q/k expanded to value heads)",
                    source=f"PyPI fla-core 0.6.0; {SRC_HERE} (peak - inputs - held outputs)",
                )  # fmt: skip


def _first_config_autotune() -> None:
    """Autotuners take their first config without benchmarking (as vLLM's
    VLLM_TRITON_FORCE_FIRST_CONFIG does): buffer sizes follow the shapes, not the config,
    and compiling every config would not fit the lease; the CPU interpreter has no
    benchmarker at all."""
    import triton.runtime.autotuner as _at

    _at.Autotuner._bench = lambda self, *a, config, **k: [1.0, 1.0, 1.0]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--vllm-src", required=True, type=Path, help="extracted vLLM 0.33 files")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument(
        "--budget-s", type=float, default=420.0, help="stop starting new terms after this"
    )
    ap.add_argument("--skip", default="", help="comma list of terms to skip")
    ap.add_argument("--autotune", action="store_true", help="let Triton autotune (slow)")
    return ap.parse_args(argv)


def _setup(args: argparse.Namespace, argv: list[str] | None, t_start: float) -> Run:
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    torch.manual_seed(0)
    install_vllm_shim(args.vllm_src.resolve())
    probe = Probe(device)
    if not args.autotune or not probe.cuda:
        _first_config_autotune()
    if not probe.cuda:
        _interpreter_aliases()
    date = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%MZ")
    command = "python3 -m capsim_kernels.bench.memory.memory_terms " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    shapes = SHAPES if probe.cuda else tuple(tiny_shape(s) for s in SHAPES)
    meta: dict[str, Any] = {
        "date": date, "command": command, "versions": _versions(), "vllm_reference": VLLM_REF,
        "shapes": [asdict(s) for s in shapes], "errors": [], "details": {},
    }  # fmt: skip
    return Run(
        probe=probe, writer=Writer(args.out, command, date), device=device, shapes=shapes,
        tokens=GPU_TOKENS if probe.cuda else CPU_TOKENS,
        seqs=GPU_SEQS if probe.cuda else CPU_SEQS,
        skip={t for t in args.skip.split(",") if t}, deadline=t_start + args.budget_s,
        meta_path=args.out / "meta.json", meta=meta,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device=cuda but torch sees no GPU", file=sys.stderr)
        return 2
    if not (args.vllm_src / "vllm").is_dir():
        print(f"--vllm-src={args.vllm_src} has no vllm/ folder", file=sys.stderr)
        return 2
    t_start = time.time()
    run = _setup(args, argv, t_start)
    run.save()
    torch.set_grad_enabled(False)  # vLLM runs the model without autograd
    for section in (run_gdn, run_sampler, run_moe, run_cudagraphs, run_fla060):
        section(run)
    if run.probe.cuda:  # device memory outside torch's allocator (context, cuBLAS, modules)
        run.probe.clean()
        free, total = torch.cuda.mem_get_info()
        run.meta["non_torch_bytes_at_end"] = total - free - run.probe.reserved()
    run.meta["wall_s"] = round(time.time() - t_start, 1)
    run.save()
    print(f"done in {run.meta['wall_s']} s; {len(run.errors)} errors", flush=True)
    for e in run.errors:
        print("ERROR", e, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
