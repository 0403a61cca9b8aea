"""Round 6's step operators: what the step model lacks for TP 1/2/4/8 and FP8 weights.

- bf16 operator tables at per-GPU TP shapes not measured before (``STEP_SHAPES``), through
  ``points.measure_shapes`` with vLLM 0.33's kernels (fused MoE, unified attention, conv,
  GDN prefill) and torch (GEMM, norm, sampling), on a reduced grid (``GRID``);
- ``moe_fp8``: vLLM 0.33's Triton fused MoE on its FP8 path (``use_fp8_w8a8``, 128 x 128
  weight blocks, dynamic 1 x 128 activation groups: what vLLM runs for the block-FP8
  checkpoints on Hopper), weights quantised here, the activation quantisation a torch
  stand-in (``vllm_shim.STANDIN['per_token_group_fp8_quant']``); router and shared expert
  bf16 torch;
- ``gemm_fp8``: ``torch._scaled_mm`` with row-wise scales (e4m3 activations quantised per
  token inside the timed call) at every linear but lm_head: a stand-in for vLLM's
  compiled CUTLASS block-FP8 GEMM, labelled as such.

Rows follow model_step's schema (grids.COLUMNS), written after every point.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F

from capsim.calibration.shapes import StepShapes, step_shapes
from capsim.models import PRESETS

from . import model_ops as ops
from .grids import COLUMNS, SMOKE_GRID, SMOKE_MODEL
from .measure import Writer, _free, _row, time_calls

# (model, tp) in priority order; 397B TP1/TP2 are left out: its weights (~400 GB even in
# FP8) cannot fit one or two 141 GB GPUs, so capsim's memory plan refuses them first
# (the 80B needs two GPUs in bf16 (~160 GB of weights): TP2 first; the 397B runs at TP4 in
# FP8 and TP8 in bf16)
STEP_SHAPES = (
    ("qwen3-next-80b-a3b", 2), ("qwen3.5-35b-a3b", 2), ("qwen3.5-397b-a17b", 4),
    ("qwen3-next-80b-a3b", 4), ("qwen3.5-35b-a3b", 4), ("qwen3-next-80b-a3b", 8),
    ("qwen3.5-35b-a3b", 8),
)  # fmt: skip
FP8_SHAPES = (
    ("qwen3.5-35b-a3b", 1), ("qwen3-next-80b-a3b", 1), ("qwen3.5-397b-a17b", 4),
    ("qwen3.5-397b-a17b", 8), ("qwen3-next-80b-a3b", 2), ("qwen3.5-35b-a3b", 2),
    ("qwen3-next-80b-a3b", 4), ("qwen3.5-35b-a3b", 4),
)  # fmt: skip
FP8_BLOCK = 128
# CPU dry run: the smallest shape the 128 x 128 FP8 blocks allow
FP8_SMOKE_MODEL = replace(SMOKE_MODEL, name="smoke-fp8", hidden_size=128, moe_intermediate_size=128,
                          shared_expert_intermediate_size=128)  # fmt: skip
# reduced against model_step's FULL_GRID to fit the call: interpolation in each axis is
# linear between these points (attention is linear in context), refused above the top
GRID = {
    "m": [1, 16, 64, 256, 1024, 4096, 16384],
    "m_logits": [1, 16, 64, 256, 1024, 4096, 8192],
    "batch": [1, 8, 64, 256],
    "ctx": [1024, 8192, 65536],
    "q": [1, 4, 16],
    "max_kv_tok": 4 * 2**20,
    "pre_n": [1024, 8192],
    "pre_ctx": [0, 16384],
    "gdn_t": [256, 4096, 16384],
}
# the classes the step model reads (moe_standin, the stand-ins timed alone, is diagnostic
# and stays at the TP1 / TP8 shapes)
OPS = frozenset({"gemm", "moe", "rmsnorm", "conv", "sample", "attn_decode", "attn_prefill",
                 "gdn_prefill"})  # fmt: skip


def committed_classes() -> frozenset[tuple]:
    """The (op, key) / (gemm, n, k) classes already in capsim's packaged table: not
    measured again (capsim calibrate --build replaces a whole class with a later run's
    rows, so a partial re-measurement would drop the committed points)."""
    import csv

    import capsim.calibration as calibration  # the package only (no numpy import)

    path = Path(calibration.__file__).parent / "data" / "h200_model_step.csv"
    if not path.is_file():
        return frozenset()
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    out = set()
    for r in rows:
        if r["op"] in ("gemm", "gemm_fp8"):
            out.add((r["op"], int(float(r["n"])), int(float(r["k"]))))
        else:
            out.add((r["op"], r["key"]))
    return frozenset(out)


MOE_FP8_IMPL = (
    "vllm.fused_experts_impl[fused_moe_kernel x2, use_fp8_w8a8, block 128x128, "
    "try_get_optimal_moe_config fp8_w8a8]+standin(torch):per_token_group_fp8_quant"
    "+standin(triton):topk_softmax,moe_align_block_size,silu_and_mul+torch:router,"
    "shared_expert(bf16)"
)
GEMM_FP8_IMPL = (
    "standin:torch._scaled_mm(e4m3, rowwise scales, M padded to 16)+torch rowwise act quant"
)


def fp8_block_quant(w: torch.Tensor, block: int = FP8_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """Weights [..., N, K] -> e4m3 and fp32 scales [..., N/block, K/block] (amax / 448)."""
    *lead, n, k = w.shape
    if n % block or k % block:
        raise ValueError(f"fp8 block quantisation: weight [{n}, {k}] is not a multiple of {block}")
    fmax = torch.finfo(torch.float8_e4m3fn).max
    g = w.float().reshape(*lead, n // block, block, k // block, block)
    scale = g.abs().amax(dim=(-3, -1)).clamp_min(1e-12) / fmax
    q = (g / scale[..., :, None, :, None]).clamp(-fmax, fmax).to(torch.float8_e4m3fn)
    return q.reshape(w.shape), scale


def fp8_refusal(shp: StepShapes) -> str | None:
    """Why vLLM cannot load this (model, tp) from a 128 x 128 block-FP8 checkpoint."""
    for name, width in (("moe_intermediate_size/tp", shp.moe_inter), ("hidden", shp.hidden)):
        if width % FP8_BLOCK:
            return f"{name}={width} is not a multiple of the FP8 block {FP8_BLOCK}"
    return None


def make_moe_fp8(m: int, shp: StepShapes, dev: str, gen, ncopy: int | None = None):
    """vLLM's fused MoE on its FP8 w8a8 block path at ``m`` tokens (one weight copy per
    callable, as make_moe_vllm; ``ncopy`` overrides the copy count: 1 for a warm-up)."""
    from .. import vllm_shim as vl
    from .vllm_ops import moe_weights_vllm, silu_and_mul

    fm = vl.load_fused_moe()
    x = ops._randn((m, shp.hidden), dev, gen)
    per_expert = 3 * shp.hidden * shp.moe_inter  # fp8: 1 byte per weight
    touched = ops.moe_expected_active(shp.num_experts, shp.topk, m) * per_expert
    if ncopy is None:
        ncopy = max(2, ops.copies_for(touched, cap=4)) if dev == "cuda" else 1
    ws = []
    for _ in range(ncopy):
        w = moe_weights_vllm(shp.hidden, shp.num_experts, shp.moe_inter, shp.shared_inter,
                             dev, gen)  # fmt: skip
        w["w13"], w["s13q"] = fp8_block_quant(w["w13"])
        w["w2"], w["s2q"] = fp8_block_quant(w["w2"])
        ws.append(w)

    def apply(w):
        logits = F.linear(x, w["router"])
        tw, ti = vl.topk_softmax(logits, shp.topk)
        out = fm.fused_experts_impl(x, w["w13"], w["w2"], tw, ti, use_fp8_w8a8=True,
                                    w1_scale=w["s13q"], w2_scale=w["s2q"],
                                    block_shape=[FP8_BLOCK, FP8_BLOCK])  # fmt: skip
        if w["shared"]:
            hs = silu_and_mul(F.linear(x, w["s13"]))
            out = out + torch.sigmoid(F.linear(x, w["sg"])) * F.linear(hs, w["s2"])
        return out

    h, i, s, e = shp.hidden, shp.moe_inter, shp.shared_inter, shp.num_experts
    flops = 2.0 * m * shp.topk * 3 * h * i + 2.0 * m * (3 * h * s + e * h)
    bytes_ = touched + (3 * h * s + e * h) * 2 + 4.0 * m * h
    return [lambda w=w: apply(w) for w in ws], flops, bytes_, "", (ws[0], apply, x)


def moe_fp8_check(shp: StepShapes, dev: str, gen, m: int = 64) -> float:
    """Relative error of the FP8 MoE against float32 torch on the dequantised weights and
    activations (one weight copy, fresh inputs)."""
    from .. import vllm_shim as vl

    fns, *_, (w, apply, x) = make_moe_fp8(m, shp, dev, gen)
    got = apply(w).float()
    logits = F.linear(x, w["router"])
    tw, ti = vl.topk_softmax_standin(logits, shp.topk)
    xq, xs = vl.STANDINS_FP8.per_token_group_quant_fp8(x, FP8_BLOCK)
    xd = (xq.float().reshape(m, -1, FP8_BLOCK) * xs[..., None]).reshape(m, -1)

    def deq(q, s):
        return q.float() * s.repeat_interleave(FP8_BLOCK, -2).repeat_interleave(FP8_BLOCK, -1)

    w13, w2 = deq(w["w13"], w["s13q"]), deq(w["w2"], w["s2q"])
    ref = torch.zeros(m, shp.hidden, device=x.device)
    for j in range(shp.topk):
        e = ti[:, j].long()
        hmid = torch.einsum("mk,mnk->mn", xd, w13[e])
        d = hmid.shape[1] // 2
        act = F.silu(hmid[:, :d]) * hmid[:, d:]
        ref += tw[:, j, None] * torch.einsum("mk,mnk->mn", act, w2[e])
    if w["shared"]:
        xf = x.float()
        hs = F.linear(xf, w["s13"].float())
        d = hs.shape[1] // 2
        hs = F.silu(hs[:, :d]) * hs[:, d:]
        ref += torch.sigmoid(F.linear(xf, w["sg"].float())) * F.linear(hs, w["s2"].float())
    del fns
    return float((got - ref).norm() / ref.norm())


def make_gemm_fp8(m: int, n: int, k: int, dev: str, gen):
    """``y = x @ w^T`` with e4m3 weights (per-row scales) and per-token e4m3 activations;
    ``torch._scaled_mm`` needs a multiple of 16 rows, so M is padded up to one (vLLM's
    CUTLASS kernel takes any M: at M < 16 this row is an upper bound)."""
    fmax = torch.finfo(torch.float8_e4m3fn).max
    x = ops._randn((-(-m // 16) * 16, k), dev, gen)
    wbytes = n * k
    ncopy = ops.copies_for(wbytes)
    fns = []
    for _ in range(ncopy):
        w = ops._randn((n, k), dev, gen, 0.02).float()
        sw = (w.abs().amax(1, keepdim=True) / fmax).clamp_min(1e-12)
        wq = (w / sw).to(torch.float8_e4m3fn)
        swt = sw.reshape(1, n).contiguous()

        def fn(wq=wq, swt=swt):
            sx = (x.abs().amax(1, keepdim=True).float() / fmax).clamp_min(1e-12)
            xq = (x / sx).to(torch.float8_e4m3fn)
            return torch._scaled_mm(xq, wq.t(), scale_a=sx, scale_b=swt, out_dtype=torch.bfloat16)

        fns.append(fn)
    return fns, 2.0 * m * n * k, wbytes + 2.0 * m * (k + n), ""


def _write_point(out: Writer, op: str, key: str, built, impl: str, replays: int, **dims) -> None:
    """Time ``built`` as a CUDA graph, eagerly if the capture fails (as measure_shapes)."""
    try:
        how, pct = time_calls(built[0], replays)
    except Exception as exc:
        print(f"FAILED {op} {key} graph=True: {type(exc).__name__}: {exc}"[:400], file=sys.stderr)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        how, pct = time_calls(built[0], replays, graph=False)
    out.write(_row(op, key, how, pct, flops=built[1], bytes_=built[2], copies=len(built[0]),
                   impl=impl, **dims))  # fmt: skip


def fp8_points(shapes, grid, out: Writer, dev, gen, deadline: float, notes: list[str],
               done: set | None = None) -> None:  # fmt: skip
    """moe_fp8 and gemm_fp8 rows of ``shapes`` until ``deadline``; ``done`` (shared across
    calls) holds the points already measured."""
    done = set() if done is None else done
    for shp in shapes:
        why = fp8_refusal(shp)
        if why:
            notes.append(f"fp8 {shp.key}: not measured ({why})")
            continue
        for m in grid["m"]:
            if time.monotonic() > deadline:
                return
            if ("moe_fp8", shp.moe_key, m) in done:
                continue
            done.add(("moe_fp8", shp.moe_key, m))
            try:
                built = make_moe_fp8(m, shp, dev, gen)
                _write_point(out, "moe_fp8", shp.moe_key, built[:4], MOE_FP8_IMPL, 15, m_tok=m)
            except Exception as e:
                notes.append(f"moe_fp8 {shp.key} M={m}: {e!r}"[:300])
                print("FAILED", notes[-1], file=sys.stderr, flush=True)
            _free()
        for lin in shp.linears:
            # what the step model reads (CalibratedStepTime.fp8_linear): 128-block shapes,
            # lm_head kept in bf16 by the FP8 checkpoints
            fp8 = lin.name != "lm_head" and not (lin.n % FP8_BLOCK or lin.k % FP8_BLOCK)
            for m in grid["m"] if fp8 else ():
                tag = ("gemm_fp8", lin.n, lin.k, m)
                if tag in done or time.monotonic() > deadline:
                    continue
                done.add(tag)
                try:
                    built = make_gemm_fp8(m, lin.n, lin.k, dev, gen)
                    _write_point(out, "gemm_fp8", lin.name, built, GEMM_FP8_IMPL, 15, m_tok=m,
                                 n=lin.n, k=lin.k)  # fmt: skip
                except Exception as e:
                    notes.append(f"gemm_fp8 {lin.n}x{lin.k} M={m}: {e!r}"[:300])
                    print("FAILED", notes[-1], file=sys.stderr, flush=True)


def run_step_ops(out_dir: Path, device: str, deadline: float, dry: bool, notes: list[str]) -> dict:
    """bf16 operator tables at the TP shapes, then FP8 MoE and GEMM rows, until
    ``deadline``; returns the phase's metadata."""
    from .points import measure_shapes

    gen = torch.Generator(device=device).manual_seed(6)
    out = Writer(out_dir / "round6_step_ops.csv", COLUMNS)
    meta: dict = {"grid": GRID if not dry else SMOKE_GRID, "shapes": [], "fp8": {}}
    grid = SMOKE_GRID if dry else GRID
    shapes = ([step_shapes(SMOKE_MODEL, 1)] if dry
              else [step_shapes(PRESETS[n], tp) for n, tp in STEP_SHAPES])  # fmt: skip
    kernels = "torch" if dry else "vllm"
    half = time.monotonic() + 0.7 * max(0.0, deadline - time.monotonic())
    done: set = set()
    skip = frozenset() if dry else committed_classes()
    meta["skipped_committed_classes"] = len(skip)
    for shp in shapes:
        if time.monotonic() > half:
            notes.append(f"step_ops: bf16 tables stopped before {shp.key}")
            break
        measure_shapes(shp, grid, out, done, device, gen, 15, half, OPS, kernels, skip=skip)
        meta["shapes"].append(shp.key)
        print(f"step_ops {shp.key}: {out.rows} rows", flush=True)
    fp8_shapes = ([step_shapes(FP8_SMOKE_MODEL, 1)] if dry
                  else [step_shapes(PRESETS[n], tp) for n, tp in FP8_SHAPES])  # fmt: skip
    try:
        meta["fp8"]["moe_check_rel_err"] = moe_fp8_check(fp8_shapes[0], device, gen)
    except Exception as e:
        meta["fp8"]["moe_check_error"] = repr(e)[:300]
        notes.append(f"fp8 MoE check failed: {e!r}"[:300])
    fp8_points(fp8_shapes, grid, out, device, gen, deadline, notes)
    out.close()
    meta["rows"] = out.rows
    return meta
