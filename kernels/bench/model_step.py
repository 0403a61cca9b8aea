"""Measure the operators of a GDN-hybrid decoder step on one GPU (issue #6).

Writes, under ``--out``:

- ``model_step.csv``: one row per (operator, shape, size) point: p20/p50/p80 in
  microseconds per call, with the floor FLOPs and bytes of the call;
- ``model_step_validation.csv``: whole decode/mixed steps of the 35B model (all layers,
  every operator except the GDN recurrence kernel, lm_head and greedy sampling), captured
  as one CUDA graph: the held-back check of the additive step model;
- ``model_step_meta.json``: device, versions, measured copy bandwidth and bf16 GEMM rate,
  date and the command line.

GPU timing: every point is captured in a CUDA graph that runs all weight copies back to
back (vLLM replays decode steps as graphs), replayed ``--replays`` times between CUDA
events; the per-call time is the replay time over the number of calls. Off CUDA
(``--smoke``) tiny shapes are timed with the host clock to test the plumbing on CPU.

Usage (on the H200; fla-core carried as a wheel)::

    PYTHONPATH=. python3 kernels/bench/model_step.py --out $OUT
    PYTHONPATH=. python3 kernels/bench/model_step.py --smoke --out /tmp/smoke
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import model_ops as ops

from capsim.calibration.shapes import StepShapes, step_shapes
from capsim.models import PRESETS, ModelSpec

SCHEMA_VERSION = 1
COLUMNS = (
    "op",
    "key",
    "impl",
    "m_tok",
    "n",
    "k",
    "batch",
    "q_tok",
    "ctx_tok",
    "flops",
    "bytes",
    "copies",
    "timing",
    "p20_us",
    "p50_us",
    "p80_us",
)
VAL_COLUMNS = (
    "model",
    "finite",
    "tp",
    "num_decode_req",
    "q_tok",
    "ctx_tok",
    "prefill_tok",
    "prefill_chunks",
    "tree",
    "depth",
    "commit",
    "kind",
    "timing",
    "p20_us",
    "p50_us",
    "p80_us",
)

FULL_GRID = {
    "m": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384],
    "m_logits": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192],
    "batch": [1, 4, 16, 64, 256, 1024],
    "ctx": [256, 1024, 4096, 16384, 65536],
    "q": [1, 4, 16, 40],
    "max_kv_tok": 16 * 2**20,
    "pre_n": [64, 256, 1024, 4096, 16384],
    "pre_ctx": [0, 2048, 8192, 32768],
    "gdn_t": [64, 256, 1024, 4096, 16384],
    "host_m": [1, 64, 1024, 4096],
    "val": [
        (1, 4, 2048, 0),
        (8, 4, 2048, 0),
        (64, 4, 2048, 0),
        (256, 4, 2048, 0),
        (64, 4, 8192, 0),
        (32, 4, 2048, 2048),
        (0, 4, 0, 4096),
    ],
}
VLLM_VAL = (  # whole steps of the 35B: compositions no operator series was measured at
    # (R, ctx, tree, prefill chunks (new, cached))
    (2, 3000, None, ()),
    (12, 1500, None, ()),
    (48, 6000, None, ()),
    (100, 2500, None, ()),
    (200, 1200, None, ()),
    (384, 700, None, ()),
    (24, 3000, None, ((1500, 0),)),
    (8, 5000, None, ((3000, 2000),)),
    (96, 1000, None, ((512, 4096), (256, 0))),
    (0, 0, None, ((3000, 1000),)),
    (8, 2000, (2, 2, 2), ()),
    (40, 3000, (2, 2, 2), ()),
    (16, 2500, (2, 2, 1), ()),
    (64, 1800, (2, 2, 1), ()),
)
VLLM_GDN_GRID = {"T": (4, 15, 40), "B": (1, 8, 32, 128, 256)}
MOE_STANDIN_M = (1, 16, 256, 4096)
GDN_COLUMNS = (
    "kernel", "model_shape", "state_dtype", "T", "tree", "B", "Hv", "Hk", "dk", "dv",
    "p20_us", "p50_us", "p80_us", "bytes_moved", "impl", "source",
)  # fmt: skip

SMOKE_GRID = {
    "m": [1, 4, 16],
    "m_logits": [1, 4, 16],
    "batch": [1, 4],
    "ctx": [16, 64],
    "q": [1, 4],
    "max_kv_tok": 4096,
    "pre_n": [8, 32],
    "pre_ctx": [0, 16],
    "gdn_t": [4, 8],
    "host_m": [1, 4],
    "val": [(2, 4, 32, 0), (1, 4, 16, 16)],
}

SMOKE_MODEL = ModelSpec(
    name="smoke-tiny",
    hidden_size=64,
    num_gdn_layers=3,
    num_attn_layers=1,
    num_attention_heads=4,
    num_kv_heads=2,
    head_dim=16,
    attn_output_gate=True,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
    linear_conv_kernel_dim=4,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    shared_expert_intermediate_size=32,
    vocab_size=512,
    sources=("synthetic: CPU smoke test only",),
)

DEFAULT_MODELS = ("qwen3.5-35b-a3b:1", "qwen3.5-397b-a17b:8", "qwen3-next-80b-a3b:1")


# ------------------------------------------------------------------------------ timing
def _percentiles(samples_us: list[float]) -> tuple[float, float, float]:
    p20, p50, p80 = np.percentile(np.asarray(samples_us), [20, 50, 80])
    return float(p20), float(p50), float(p80)


def time_calls(
    fns: list[Callable[[], object]], replays: int, *, graph: bool = True
) -> tuple[str, tuple]:
    """Per-call time of ``fns`` run back to back: CUDA graph replays, else eager/host.

    ``graph=False`` times eager launches between events (prefill kernels, which vLLM
    runs outside CUDA graphs at large token counts, and kernels with host-side logic).
    """
    if torch.cuda.is_available():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for f in fns:  # warm-up: lazy init, autotune, handles
                f()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()

        def run():
            for f in fns:
                f()

        how = "cuda_eager"
        if graph:
            cuda_graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(cuda_graph):
                for f in fns:
                    f()
            run, how = cuda_graph.replay, "cuda_graph"
        run()
        torch.cuda.synchronize()
        samples = []
        for _ in range(replays):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e3 / len(fns))
        return how, _percentiles(samples)
    for f in fns:
        f()
    samples = []
    for _ in range(replays):
        t0 = time.perf_counter()
        for f in fns:
            f()
        samples.append((time.perf_counter() - t0) * 1e6 / len(fns))
    return "cpu_host", _percentiles(samples)


def time_host_roundtrip(m: int, replays: int, dev: str) -> tuple[str, tuple]:
    """Per-step host round trip: replay a 1-kernel graph, copy m sampled ids, sync.

    This is the part of vLLM's per-step host work that stays on the critical path with
    async scheduling (VLLM.md s5: the scheduler overlaps the GPU step).
    """
    tokens = torch.zeros(m, dtype=torch.int64, device=dev)
    if dev == "cuda":
        host = torch.empty(m, dtype=torch.int64, pin_memory=True)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            tokens.add_(1)
        for _ in range(10):
            graph.replay()
        torch.cuda.synchronize()

        def step():
            graph.replay()
            host.copy_(tokens, non_blocking=True)
            torch.cuda.synchronize()

    else:

        def step():
            tokens.add_(1)
            tokens.cpu()

    samples = []
    for _ in range(replays):
        t0 = time.perf_counter()
        step()
        samples.append((time.perf_counter() - t0) * 1e6)
    return "host_clock", _percentiles(samples)


# ------------------------------------------------------------------------------ points
class Writer:
    """Appends rows to a CSV and flushes each one (a killed run keeps what it measured)."""

    def __init__(self, path: Path, columns: Iterable[str]) -> None:
        self.columns = tuple(columns)
        self.fh = path.open("w", newline="")
        self.csv = csv.DictWriter(self.fh, fieldnames=self.columns)
        self.csv.writeheader()
        self.rows = 0

    def write(self, row: dict) -> None:
        self.csv.writerow({c: row.get(c, 0) for c in self.columns})
        self.fh.flush()
        self.rows += 1

    def close(self) -> None:
        self.fh.close()


def _row(op, key, how, pct, *, flops, bytes_, copies, impl="torch", **dims) -> dict:
    p20, p50, p80 = pct
    row = {"op": op, "key": key, "impl": impl, "timing": how, "copies": copies}
    row.update({"flops": f"{flops:.6g}", "bytes": f"{bytes_:.6g}"})
    row.update({"p20_us": f"{p20:.3f}", "p50_us": f"{p50:.3f}", "p80_us": f"{p80:.3f}"})
    row.update(dims)
    return row


def _free() -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


@dataclass(frozen=True)
class OpPoint:
    """One measured point of the operator table: ``make()`` returns (callables, flops,
    bytes, extra); the row is (op, key, impl) plus ``dims``. ``impl`` may name the
    build's extra value as "{extra}" (e.g. the split-KV count)."""

    tag: tuple
    op: str
    key: str
    make: Callable[[], tuple]
    dims: dict
    impl: str = "torch"


def decode_attn_grid(grid: dict) -> Iterable[tuple[int, int, int]]:
    """(q, batch, ctx) of the decode-attention grid, batch x ctx within max_kv_tok."""
    for q in grid["q"]:
        for batch in grid["batch"]:
            for ctx in grid["ctx"]:
                if batch * ctx <= grid["max_kv_tok"]:
                    yield q, batch, ctx


def operator_points(shp: StepShapes, grid: dict, dev: str, gen, kv=None) -> list[OpPoint]:
    """The table of operators of one (model, tp): every point the step model reads.

    ``kv`` = (k_buf, v_buf): the decode-attention KV buffers (None: no decode points)."""
    pts: list[OpPoint] = []
    for lin in shp.linears:
        for m in grid["m_logits"] if lin.name == "lm_head" else grid["m"]:
            pts.append(OpPoint(
                ("gemm", lin.n, lin.k, m), "gemm", lin.name,
                lambda lin=lin, m=m: ops.make_gemm(m, lin.n, lin.k, dev, gen),
                {"m_tok": m, "n": lin.n, "k": lin.k},
            ))  # fmt: skip
    for m in grid["m"]:
        pts.append(OpPoint(
            ("moe", shp.moe_key, m), "moe", shp.moe_key,
            lambda m=m: ops.make_moe(m, shp.hidden, shp.num_experts, shp.topk, shp.moe_inter,
                                     shp.shared_inter, dev, gen),
            {"m_tok": m}, impl="torch._grouped_mm",
        ))  # fmt: skip
    for dim in sorted({shp.hidden, shp.gdn_hv * shp.gdn_dv}):
        for m in grid["m"]:
            pts.append(OpPoint(
                ("rmsnorm", dim, m), "rmsnorm", f"d{dim}",
                lambda m=m, dim=dim: ops.make_rmsnorm(m, dim, dev, gen), {"m_tok": m, "k": dim},
            ))  # fmt: skip
    for m in grid["m"]:
        pts.append(OpPoint(
            ("conv", shp.conv_dim, m), "conv", f"c{shp.conv_dim}",
            lambda m=m: ops.make_conv(m, shp.conv_dim, shp.conv_kernel, dev, gen),
            {"m_tok": m, "k": shp.conv_dim},
        ))  # fmt: skip
    for m in grid["m_logits"]:
        pts.append(OpPoint(
            ("sample", shp.vocab_local, m), "sample", f"v{shp.vocab_local}",
            lambda m=m: ops.make_sample(m, shp.vocab_local, dev, gen),
            {"m_tok": m, "n": shp.vocab_local},
        ))  # fmt: skip
    if kv is not None:
        k_buf, v_buf = kv
        for q, batch, ctx in decode_attn_grid(grid):
            pts.append(OpPoint(
                ("attn_decode", shp.attn_key, q, batch, ctx), "attn_decode",
                shp.attn_key,
                lambda q=q, batch=batch, ctx=ctx: ops.make_attn_decode(
                    batch, q, ctx, shp.attn_hq, shp.attn_hkv, shp.head_dim, k_buf,
                    v_buf, dev, gen),
                {"batch": batch, "q_tok": q, "ctx_tok": ctx},
                impl="sdpa_flash_splitkv{extra}",
            ))  # fmt: skip
    for t in grid["gdn_t"]:
        pts.append(OpPoint(
            ("gdn_prefill", shp.gdn_key, t), "gdn_prefill", shp.gdn_key,
            lambda t=t: ops.make_gdn_prefill(t, shp.gdn_hv, shp.gdn_dk, shp.gdn_dv, dev, gen),
            {"batch": 1, "m_tok": t, "q_tok": t}, impl="{extra}",
        ))  # fmt: skip
    for n in grid["pre_n"]:
        for ctx in grid["pre_ctx"]:
            pts.append(OpPoint(
                ("attn_prefill", shp.attn_key, n, ctx), "attn_prefill", shp.attn_key,
                lambda n=n, ctx=ctx: ops.make_attn_prefill(
                    n, ctx, shp.attn_hq, shp.attn_hkv, shp.head_dim, dev, gen),
                {"batch": 1, "q_tok": n, "ctx_tok": ctx}, impl="torch.sdpa",
            ))  # fmt: skip
    return pts


def vllm_operator_points(shp: StepShapes, grid: dict, dev: str, gen, cache) -> list[OpPoint]:
    """The op classes that vLLM runs its own kernels for (``vllm_step_ops``), replacing
    the torch rows of the same (op, key): moe (+ its stand-in parts), attn_decode and
    attn_prefill over a paged cache, gdn_prefill, conv."""
    import vllm_step_ops as vops

    attn = vops.Attn(shp.attn_hq, shp.attn_hkv, shp.head_dim, dev, max_q=max(grid["q"]))
    block = vops.hybrid_block_size(shp)
    pts: list[OpPoint] = []
    for m in grid["m"]:
        pts.append(OpPoint(
            ("moe", shp.moe_key, m), "moe", shp.moe_key,
            lambda m=m: vops.make_moe_vllm(m, shp, dev, gen), {"m_tok": m},
            impl=vops.MOE_IMPL + "[{extra}]",
        ))  # fmt: skip
    for part in ("topk_softmax", "moe_align_block_size", "silu_and_mul", "moe_sum"):
        for m in MOE_STANDIN_M:
            pts.append(OpPoint(
                ("moe_standin", part, shp.moe_key, m), "moe_standin", f"{part}/{shp.moe_key}",
                lambda m=m, part=part: vops.make_moe_standin(part, m, shp, dev, gen),
                {"m_tok": m}, impl="{extra}",
            ))  # fmt: skip
    for m in grid["m"]:
        pts.append(OpPoint(
            ("conv", shp.conv_dim, m), "conv", f"c{shp.conv_dim}",
            lambda m=m: vops.make_conv_vllm(m, shp, dev, gen), {"m_tok": m, "k": shp.conv_dim},
            impl="{extra}",
        ))  # fmt: skip
    if cache is not None:
        for q, batch, ctx in decode_attn_grid(grid):
            pts.append(OpPoint(
                ("attn_decode", shp.attn_key, q, batch, ctx), "attn_decode",
                shp.attn_key,
                lambda q=q, batch=batch, ctx=ctx: vops.make_attn(
                    attn, batch, q, ctx, cache, block, dev, gen),
                {"batch": batch, "q_tok": q, "ctx_tok": ctx},
                impl=vops.ATTN_IMPL.replace("{path}", ",{extra}") + f"[block={block}]",
            ))  # fmt: skip
        for n in grid["pre_n"]:
            for ctx in grid["pre_ctx"]:
                pts.append(OpPoint(
                    ("attn_prefill", shp.attn_key, n, ctx), "attn_prefill", shp.attn_key,
                    lambda n=n, ctx=ctx: vops.make_attn(
                        attn, 1, n, ctx + n, cache, block, dev, gen),
                    {"batch": 1, "q_tok": n, "ctx_tok": ctx},
                    impl=vops.ATTN_IMPL.replace("{path}", ",{extra}") + f"[block={block}]",
                ))  # fmt: skip
    for t in grid["gdn_t"]:
        pts.append(OpPoint(
            ("gdn_prefill", shp.gdn_key, t), "gdn_prefill", shp.gdn_key,
            lambda t=t: vops.make_gdn_prefill_vllm(t, shp, dev, gen),
            {"batch": 1, "m_tok": t, "q_tok": t}, impl="{extra}",
        ))  # fmt: skip
    return pts


def measure_vllm_gdn(shp: StepShapes, out: Writer, dev, gen, replays, deadline) -> None:
    """vLLM's store-all verify op at the GDN kernel table's shapes (chain windows)."""
    import vllm_loader as vl
    import vllm_step_ops as vops

    src = vl.sources()["fused_sigmoid_gating"]
    for t in VLLM_GDN_GRID["T"]:
        for b in VLLM_GDN_GRID["B"]:
            if time.monotonic() > deadline:
                return
            try:
                fns, _, bytes_, impl = vops.make_storeall_vllm(b, t, shp, dev, gen)
                how, pct = time_calls(fns, replays)
            except Exception as exc:
                print(f"FAILED vllm storeall T={t} B={b}: {exc}"[:400], file=sys.stderr)
                continue
            out.write({
                "kernel": "vllm_storeall", "model_shape": f"{shp.model}-tp{shp.tp}",
                "state_dtype": "float32", "T": t, "tree": "chain", "B": b, "Hv": shp.gdn_hv,
                "Hk": shp.gdn_hk, "dk": shp.gdn_dk, "dv": shp.gdn_dv,
                "p20_us": f"{pct[0]:.3f}", "p50_us": f"{pct[1]:.3f}", "p80_us": f"{pct[2]:.3f}",
                "bytes_moved": f"{bytes_:.0f}", "impl": f"{impl} ({how})", "source": src,
            })  # fmt: skip
            _free()


def measure_shapes(
    shp: StepShapes,
    grid: dict,
    out: Writer,
    done: set,
    dev: str,
    gen,
    replays: int,
    deadline: float,
    only: frozenset[str] = frozenset(),
    kernels: str = "torch",
) -> None:
    """All per-op points of one (model, tp) (``operator_points``; with
    ``kernels='vllm'`` the classes of ``vllm_operator_points`` replace the torch ones);
    shapes already measured are skipped. A point is timed as a CUDA graph, eagerly if
    that fails."""

    def wanted(op: str) -> bool:
        return not only or op in only

    # decode attention reads KV from one large buffer (distinct slices per copy)
    kv = None
    fresh = ("attn_buf", shp.attn_key) not in done and (
        wanted("attn_decode") or (kernels == "vllm" and wanted("attn_prefill"))
    )
    if fresh and time.monotonic() < deadline:
        if kernels == "vllm":
            import vllm_step_ops as vops

            block = vops.hybrid_block_size(shp)
            nblk = -(-grid["max_kv_tok"] // block) + max(grid["batch"]) + 2
            kv = vops.kv_cache(nblk, block, shp.attn_hkv, shp.head_dim, dev, gen)
        else:
            shape = (grid["max_kv_tok"], shp.attn_hkv, shp.head_dim)
            k_buf = torch.empty(shape, device=dev, dtype=torch.bfloat16).normal_(generator=gen)
            kv = (k_buf, torch.empty_like(k_buf).normal_(generator=gen))
    points = operator_points(shp, grid, dev, gen, None if kernels == "vllm" else kv)
    if kernels == "vllm":
        vpts = vllm_operator_points(shp, grid, dev, gen, kv)
        replaced = {p.op for p in vpts}
        points = [p for p in points if p.op not in replaced] + vpts
    for pt in points:
        if pt.tag in done or time.monotonic() > deadline or not wanted(pt.op):
            continue
        done.add(pt.tag)
        built = None
        for use_graph in (True, False):
            try:
                built = pt.make() if built is None else built
                how, pct = time_calls(built[0], replays, graph=use_graph)
                extra = built[3] if len(built) > 3 else ""
                out.write(_row(
                    pt.op, pt.key, how, pct, flops=built[1], bytes_=built[2],
                    copies=len(built[0]), impl=pt.impl.format(extra=extra), **pt.dims,
                ))  # fmt: skip
                break
            except Exception as exc:  # one failing point must not lose the others
                print(
                    f"FAILED {pt.tag} graph={use_graph}: {type(exc).__name__}: {exc}"[:400],
                    file=sys.stderr,
                )
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
        built = None
        _free()
    if kv is not None:
        done.add(("attn_buf", shp.attn_key))
        del kv
        _free()


# ------------------------------------------------------------------------------ whole step
class StepStack:
    """All layers of one model with their own weights, for whole-step validation runs."""

    def __init__(self, shp: StepShapes, dev: str, gen, max_kv_tok: int) -> None:
        self.shp, self.dev = shp, dev
        h = shp.hidden

        def w(n, k):
            return ops._randn((n, k), dev, gen, 0.02)

        self.layers = []
        total = shp.num_gdn_layers + shp.num_attn_layers
        every = total // max(shp.num_attn_layers, 1)
        for i in range(total):
            is_attn = (i + 1) % every == 0 and shp.num_attn_layers > 0
            layer = {"attn": is_attn, "norm": torch.ones(h, device=dev, dtype=torch.bfloat16)}
            if is_attn:
                layer["qkv"] = w(shp.linear("attn_qkv").n, h)
                layer["o"] = w(h, shp.linear("attn_o").k)
                layer["k_cache"] = torch.empty(
                    (max_kv_tok, shp.attn_hkv, shp.head_dim), device=dev, dtype=torch.bfloat16
                ).normal_(generator=gen)
                layer["v_cache"] = torch.empty_like(layer["k_cache"]).normal_(generator=gen)
            else:
                layer["qkvz"] = w(shp.linear("gdn_in_qkvz").n, h)
                layer["ba"] = w(shp.linear("gdn_in_ba").n, h)
                layer["out"] = w(h, shp.linear("gdn_out").k)
                layer["conv"] = ops._randn((shp.conv_dim, 1, shp.conv_kernel), dev, gen)
                layer["gnorm"] = torch.ones(
                    shp.gdn_hv * shp.gdn_dv, device=dev, dtype=torch.bfloat16
                )
            layer["moe"] = ops.moe_weights(
                h, shp.num_experts, shp.moe_inter, shp.shared_inter, dev, gen
            )
            self.layers.append(layer)
        self.lm_head = w(shp.vocab_local, h)
        self.gen = gen

    def forward_fn(self, batch: int, q_tok: int, ctx: int, prefill_tok: int):
        """The step as one callable: GEMMs at the step's tokens, attention per part."""
        shp, dev, gen = self.shp, self.dev, self.gen
        m = batch * q_tok + prefill_tok
        h = shp.hidden
        x = ops._randn((m, h), dev, gen)
        group = shp.attn_hq // shp.attn_hkv
        hd = shp.head_dim
        pre_q = ops._randn((1, shp.attn_hq, prefill_tok, hd), dev, gen) if prefill_tok else None
        pre_kv = ops._randn((1, shp.attn_hq, prefill_tok, hd), dev, gen) if prefill_tok else None
        dec_q = ops._randn((batch, shp.attn_hkv, q_tok * group, hd), dev, gen) if batch else None
        n_logits = batch * q_tok + (1 if prefill_tok else 0)

        def run():
            y = x
            for layer in self.layers:
                t = F.rms_norm(y, (h,), layer["norm"], 1e-6)
                if layer["attn"]:
                    qkv = F.linear(t, layer["qkv"])
                    if batch:
                        tok = batch * ctx
                        k = layer["k_cache"][:tok].view(batch, ctx, shp.attn_hkv, hd)
                        v = layer["v_cache"][:tok].view(batch, ctx, shp.attn_hkv, hd)
                        ops.attn_split_kv(
                            dec_q,
                            k.transpose(1, 2),
                            v.transpose(1, 2),
                            ops.num_kv_splits(batch, shp.attn_hkv, dec_q.shape[2], ctx),
                        )
                    if prefill_tok:
                        F.scaled_dot_product_attention(pre_q, pre_kv, pre_kv, is_causal=True)
                    # NOTE: a finite stand-in for the attention output. Runs before
                    # 2026-11-29 16:15 UTC used an uninitialised buffer here, which can hold
                    # NaN and collapse the MoE routing of the following layers.
                    a = qkv[:, : shp.linear("attn_o").k].contiguous()
                    y = y + F.linear(a, layer["o"])
                else:
                    F.linear(t, layer["ba"])
                    qkvz = F.linear(t, layer["qkvz"])
                    c = qkvz[:, : shp.conv_dim].t().unsqueeze(0)
                    c = F.pad(c, (shp.conv_kernel - 1, 0))
                    F.silu(F.conv1d(c, layer["conv"], groups=shp.conv_dim))
                    core = qkvz[:, shp.conv_dim : shp.conv_dim + shp.gdn_hv * shp.gdn_dv]
                    o = F.rms_norm(core.contiguous(), (core.shape[1],), layer["gnorm"], 1e-6)
                    y = y + F.linear(o, layer["out"])
                t = F.rms_norm(y, (h,), layer["norm"], 1e-6)
                y = y + ops.moe_apply(layer["moe"], t, shp.topk)
            t = F.rms_norm(y[-n_logits:], (h,), self.layers[0]["norm"], 1e-6)
            self.last_hidden = y
            return torch.argmax(F.linear(t, self.lm_head).float(), dim=-1)

        return run


def measure_validation(shp, grid, out: Writer, dev, gen, replays, deadline) -> None:
    points = grid["val"]
    max_kv = max(b * c for b, _, c, _ in points) or 1
    try:
        stack = StepStack(shp, dev, gen, max_kv)
    except torch.OutOfMemoryError as exc:
        print(f"validation stack skipped: {exc}", file=sys.stderr)
        return
    for batch, q, ctx, pre in points:
        if time.monotonic() > deadline:
            break
        try:
            how, pct = time_calls([stack.forward_fn(batch, q, ctx, pre)], replays)
        except Exception as exc:
            print(f"FAILED validation {batch, q, ctx, pre}: {exc}"[:400], file=sys.stderr)
            continue
        finite = bool(torch.isfinite(stack.last_hidden).all())
        out.write(
            {
                "finite": finite,
                "kind": "forward_no_gdn",
                "tree": "chain",
                "model": shp.model,
                "tp": shp.tp,
                "num_decode_req": batch,
                "q_tok": q,
                "ctx_tok": ctx,
                "prefill_tok": pre,
                "timing": how,
                "p20_us": f"{pct[0]:.3f}",
                "p50_us": f"{pct[1]:.3f}",
                "p80_us": f"{pct[2]:.3f}",
            }
        )
        _free()
    del stack
    _free()


# ------------------------------------------------------------------------------ ceilings
def measure_ceilings(dev: str, smoke: bool) -> dict:
    if dev != "cuda":
        return {}
    n = 2**30 if not smoke else 2**20
    a = torch.empty(n, dtype=torch.float32, device=dev).normal_()
    b = torch.empty_like(a)
    _, pct = time_calls([lambda: b.copy_(a)], 20)
    copy_gbps = 2 * 4 * n / (pct[1] * 1e-6) / 1e9
    s = 8192
    x = torch.randn(s, s, device=dev, dtype=torch.bfloat16)
    y = torch.randn(s, s, device=dev, dtype=torch.bfloat16)
    _, pct = time_calls([lambda: x @ y], 10)
    tflops = 2 * s**3 / (pct[1] * 1e-6) / 1e12
    return {"copy_gbps_read_plus_write": copy_gbps, "bf16_gemm_8192_tflops": tflops}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--smoke", action="store_true", help="tiny shapes; runs on CPU")
    ap.add_argument("--models", nargs="*", default=list(DEFAULT_MODELS), help="name:tp ...")
    ap.add_argument("--replays", type=int, default=15)
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop new points after")
    ap.add_argument("--seed", type=int, default=6)
    ap.add_argument("--no-validation", action="store_true")
    ap.add_argument("--ops", default="", help="comma list: measure only these op classes")
    ap.add_argument("--no-host", action="store_true", help="skip the host round trip")
    ap.add_argument(
        "--kernels", choices=("vllm", "torch"), default=None,
        help="vllm: vLLM 0.33's kernels from .vllmwheel/src (default on CUDA); torch: stand-ins",
    )  # fmt: skip
    args = ap.parse_args(argv)

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if not args.smoke and dev != "cuda":
        ap.error("a full run needs CUDA; use --smoke on CPU")
    grid = SMOKE_GRID if args.smoke else FULL_GRID
    kernels = args.kernels or ("torch" if args.smoke or dev != "cuda" else "vllm")
    if kernels == "vllm" and dev != "cuda":
        ap.error("--kernels vllm needs CUDA")
    if args.smoke:
        shapes = [step_shapes(SMOKE_MODEL, 1)]
    else:
        shapes = []
        for spec in args.models:
            name, _, tp = spec.partition(":")
            shapes.append(step_shapes(PRESETS[name], int(tp or 1)))
    args.out.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator(device=dev).manual_seed(args.seed)
    t_start = time.monotonic()
    deadline = t_start + args.budget_s
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    meta: dict = {
        "schema_version": SCHEMA_VERSION,
        "started_utc": started,
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "device": torch.cuda.get_device_name(0) if dev == "cuda" else platform.processor(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "replays": args.replays,
        "seed": args.seed,
        "smoke": args.smoke,
        "models": [f"{s.model}:tp{s.tp}" for s in shapes],
        "ops": args.ops or "all",
    }
    try:
        import triton

        meta["triton"] = triton.__version__
        import fla

        meta["fla"] = getattr(fla, "__version__", "?")
    except Exception as exc:
        meta["import_note"] = repr(exc)
    meta["ceilings"] = measure_ceilings(dev, args.smoke)
    print("ceilings", meta["ceilings"], flush=True)
    meta["kernels"] = kernels
    gdn_out = None
    if kernels == "vllm":
        import vllm_loader as vl
        import vllm_step_ops as vops

        meta["vllm_sources"] = vl.sources()
        meta["vllm_standins"] = vl.STANDIN
        meta["vllm_moe_config"] = {
            s.key: dict(zip(("file", "found"), vops.moe_config_file(s), strict=True))
            for s in shapes
        }
        meta["vllm_checks"] = vops.checks(dev, gen)
        print("vllm", json.dumps(meta["vllm_moe_config"]), json.dumps(meta["vllm_checks"]))
        gdn_out = Writer(args.out / "vllm_gdn_verify.csv", GDN_COLUMNS)

    ops_out = Writer(args.out / "model_step.csv", COLUMNS)
    val_out = Writer(args.out / "model_step_validation.csv", VAL_COLUMNS)
    done: set = set()
    only = frozenset(o for o in args.ops.split(",") if o)
    for i, shp in enumerate(shapes):
        measure_shapes(shp, grid, ops_out, done, dev, gen, args.replays, deadline, only, kernels)
        print(f"{shp.key}: {ops_out.rows} op rows, {time.monotonic() - t_start:.0f}s", flush=True)
        if i == 0 and not args.no_validation:
            if kernels == "vllm":
                import vllm_step

                pts = [vllm_step.StepPoint(r, c, tree, pre) for r, c, tree, pre in VLLM_VAL]
                vllm_step.measure(
                    shp, pts, val_out, dev, gen, args.replays, deadline + 120, time_calls
                )
            else:
                measure_validation(shp, grid, val_out, dev, gen, args.replays, deadline + 60)
            print(f"validation: {val_out.rows} rows, {time.monotonic() - t_start:.0f}s", flush=True)
        if gdn_out is not None:
            measure_vllm_gdn(shp, gdn_out, dev, gen, args.replays, deadline + 150)
            print(f"vllm gdn: {gdn_out.rows} rows, {time.monotonic() - t_start:.0f}s", flush=True)
    for m in [] if args.no_host else grid["host_m"]:
        how, pct = time_host_roundtrip(m, 200, dev)
        ops_out.write(_row("host", "roundtrip", how, pct, flops=0, bytes_=8 * m, copies=1, m_tok=m))
    ops_out.close()
    val_out.close()
    if gdn_out is not None:
        gdn_out.close()
    meta["finished_utc"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    meta["op_rows"] = ops_out.rows
    meta["validation_rows"] = val_out.rows
    meta["elapsed_s"] = round(time.monotonic() - t_start, 1)
    if dev == "cuda":
        meta["cuda"] = torch.version.cuda
        meta["sm_count"] = torch.cuda.get_device_properties(0).multi_processor_count
    tmp = args.out / "model_step_meta.json.tmp"
    tmp.write_text(json.dumps(meta, indent=2) + "\n")
    tmp.replace(args.out / "model_step_meta.json")
    print(json.dumps({k: meta[k] for k in ("op_rows", "validation_rows", "elapsed_s")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
