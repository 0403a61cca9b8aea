"""The operator points of one (model, TP) shape: the torch and vLLM operator tables, the
vLLM store-all GDN series, and the loop that times them."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from capsim.calibration.shapes import StepShapes

from . import model_ops as ops
from .grids import MOE_STANDIN_M, VLLM_GDN_GRID
from .measure import Writer, _free, _row, time_calls


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
    from . import vllm_ops as vops

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
    from .. import vllm_shim as vl
    from . import vllm_ops as vops

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


def _kv_buffer(shp: StepShapes, grid: dict, dev: str, gen, kernels: str):  # type: ignore[no-untyped-def]
    """The decode-attention KV buffer of one (model, tp): vLLM's paged cache (its hybrid
    block size, enough blocks for ``max_kv_tok`` plus one per batch row and 2 spare) with
    ``kernels='vllm'``, else a (K, V) pair of [max_kv_tok, Hkv, head_dim] bf16 tensors."""
    if kernels == "vllm":
        from . import vllm_ops as vops

        block = vops.hybrid_block_size(shp)
        nblk = -(-grid["max_kv_tok"] // block) + max(grid["batch"]) + 2
        return vops.kv_cache(nblk, block, shp.attn_hkv, shp.head_dim, dev, gen)
    shape = (grid["max_kv_tok"], shp.attn_hkv, shp.head_dim)
    k_buf = torch.empty(shape, device=dev, dtype=torch.bfloat16).normal_(generator=gen)
    return (k_buf, torch.empty_like(k_buf).normal_(generator=gen))


def _time_point(pt: OpPoint, out: Writer, replays: int) -> None:
    """Build and time one point as a CUDA graph, eagerly if that fails, and write its row;
    a point failing both ways is reported on stderr and writes nothing."""
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


def _run_once(pt: OpPoint, ops_: frozenset[str]) -> None:
    """The compile warm-up of one point: build it and run its first callable once."""
    if pt.op not in ops_:
        return
    try:
        built = pt.make()
        built[0][0]()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    except Exception as exc:  # a warm-up failure only costs the timed run its compile
        print(f"warm FAILED {pt.tag}: {type(exc).__name__}: {exc}"[:300], file=sys.stderr)
    built = None
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
    skip: frozenset[tuple] = frozenset(),
    warm_ops: frozenset[str] | None = None,
) -> None:
    """All per-op points of one (model, tp) (``operator_points``; with
    ``kernels='vllm'`` the classes of ``vllm_operator_points`` replace the torch ones);
    shapes already measured are skipped, and so are the classes in ``skip`` ((op, key), or
    (gemm, n, k)). A point is timed as a CUDA graph, eagerly if that fails.
    ``warm_ops``: a compile warm-up instead: each point of those ops runs once (no
    timing, nothing written; ``out`` unused), filling Triton's cache."""

    def wanted(op: str) -> bool:
        return not only or op in only

    def skipped(pt: OpPoint) -> bool:
        cls = (pt.op, pt.dims["n"], pt.dims["k"]) if pt.op == "gemm" else (pt.op, pt.key)
        return cls in skip

    # decode attention reads KV from one large buffer (distinct slices per copy)
    kv = None
    fresh = ("attn_buf", shp.attn_key) not in done and (
        (wanted("attn_decode") and ("attn_decode", shp.attn_key) not in skip)
        or (kernels == "vllm" and wanted("attn_prefill")
            and ("attn_prefill", shp.attn_key) not in skip)
    )  # fmt: skip
    if fresh and time.monotonic() < deadline:
        kv = _kv_buffer(shp, grid, dev, gen, kernels)
    points = operator_points(shp, grid, dev, gen, None if kernels == "vllm" else kv)
    if kernels == "vllm":
        vpts = vllm_operator_points(shp, grid, dev, gen, kv)
        replaced = {p.op for p in vpts}
        points = [p for p in points if p.op not in replaced] + vpts
    for pt in points:
        if pt.tag in done or time.monotonic() > deadline or not wanted(pt.op) or skipped(pt):
            continue
        done.add(pt.tag)
        if warm_ops is not None:
            _run_once(pt, warm_ops)
            continue
        _time_point(pt, out, replays)
        _free()
    if kv is not None:
        done.add(("attn_buf", shp.attn_key))
        del kv
        _free()
