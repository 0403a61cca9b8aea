"""Measured step time: operator tables from one H200, summed over one engine step.

Step layout (per GPU; L_g GDN layers, L_a attention layers; M = all tokens of the step,
R = decode requests, W = tokens verified per decode request, chunks i = prefill chunks)::

    target   tok(M)                      every GEMM, MoE block, norm and conv of all layers
           + L_a * [attn_decode(R, W, ctx) + sum_i attn_prefill(n_i, c_i)]
           + L_g * [gdn_verify(R; W, commit mode) + gdn_prefill(sum_i n_i)]
           + logits(R*W + #chunks)        final norm, lm_head rows sampled, greedy sampling
    drafts   pass 1: mtp_tok(M) + attention as above (q=W) + logits(R_all)
             pass d = 2..depth: mtp_tok(R_d) + attn_decode(R_d, 1, ctx) + logits(R_d)
    host     measured graph-launch + sampled-ids round trip (async scheduling hides the rest)
    tp > 1   ring all-reduce of the hidden state twice per layer, bandwidth only (not
             measured: a lower bound, flagged in describe())

Every term is a measured curve of ``capsim/calibration/data`` (fit split only) or the GDN
kernel table; the lookups follow ``capsim.calibration.interp`` (linear inside the grid,
clamp below, refuse above) with two stated exceptions, listed in ``describe()``: decode
and prefill attention grow proportionally to context above the largest measured context,
and the GDN verify kernels grow proportionally to the batch above the largest measured
batch (per-request bytes are constant there). For B200/H100 every measured point is
first mapped through ``capsim.cost.projection`` and the result is labelled a projection.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import partial
from itertools import pairwise
from pathlib import Path

import numpy as np

from capsim.calibration.interp import Curve, Sheet, curve_sum
from capsim.calibration.shapes import StepShapes, step_shapes
from capsim.calibration.tables import CalibrationTables, load_tables, op_series
from capsim.commit_modes import MODES
from capsim.config import SpecDecodeConfig
from capsim.cost.base import BatchShape
from capsim.cost.projection import HardwareProjection, class_fixed_us
from capsim.gpus import GpuSpec, measured_gpu
from capsim.models import ModelSpec

_add = np.add.reduce  # what ndarray.sum() calls, without its Python wrapper

MEASURED_GPU = measured_gpu().name  # the registry entry with step_times="measured"
COMMIT_KERNELS: dict[str, tuple[tuple[str, ...], ...]] = {
    name: mode.kernel_series for name, mode in MODES.items()
}
# k = 0 (no speculation): vLLM's plain GDN decode (one token, no commit mode)
NO_SPEC_KERNELS: tuple[tuple[str, ...], ...] = (("vllm_decode",),)
FP8_BLOCK = 128  # block-FP8 checkpoints quantise weights in 128 x 128 blocks
BEYOND_GRID_RULES: tuple[str, ...] = (
    "below any grid: time of the smallest measured point (clamp)",
    "above the token grid (M), batch grid of attention, or a measured curve: refuse",
    "attn_decode at an unmeasured window q: linear in q between the measured neighbours",
    "attn_decode/attn_prefill above the largest measured context: proportional to context",
    "attn_decode above the largest measured batch: proportional to batch",
    "logits (lm_head + sampling) above the largest measured row count: proportional to rows",
    "gdn_verify above the largest measured batch: proportional to batch",
    "gdn_verify at an unmeasured window T (e.g. tree 2,2,1 -> T=11): linear in T between the "
    "nearest measured windows (any tree shape); outside them: refuse",
    "host round trip above its id grid: the value at the top (flat 23-27 us over 1-4096 ids)",
    "FP8 weights (quantization='fp8'): MoE from the moe_fp8 rows (vLLM's Triton w8a8 block "
    "path); linears whose n and k are multiples of 128, lm_head excepted, from gemm_fp8 rows; "
    "every other term as bf16",
    "a (model, tp, weights) without its measured rows: refuse, naming the field and value",
    "GDN: a (kernel, window) measured at fewer than two batch sizes is not used (no curve "
    "along B); the window is then interpolated in T or refused",
)


def _dtype_alias(name: str) -> str:
    aliases = {"fp32": "float32", "f32": "float32", "bf16": "bfloat16", "fp16": "float16"}
    return aliases.get(str(name).lower(), str(name).lower())


COUNT_TERMS_MEMO_MAX = 1 << 16
"""Memoised step terms kept at most (about 17 MB); cleared when full (issue 20)."""


@dataclass(frozen=True, slots=True)
class _Tables:
    """Curves for one (model shapes, GPU) pair, built once from the fit rows."""

    tok: Curve
    mtp_tok: Curve
    draft_rest: Curve
    logits: Curve
    host: Curve
    attn_w: Sheet | None
    attn_1: Sheet
    prefill_attn: tuple[tuple[float, Curve], ...]
    gdn_prefill: Curve
    gdn_verify: Curve | None


class CalibratedStepTime:
    """StepTimeModel from measured operator tables (see module docstring)."""

    def __init__(
        self,
        *,
        shapes: StepShapes,
        spec: SpecDecodeConfig,
        tables: CalibrationTables,
        gpu: GpuSpec,
        projection: HardwareProjection | None = None,
        split: str = "fit",
        require_gdn: bool = True,
        quantization: str = "none",
        quant_scope: str = "linear",
    ) -> None:
        if split not in ("fit", "all"):
            raise ValueError(f"calibrated.split={split!r} must be 'fit' or 'all'")
        if quantization not in ("none", "fp8"):
            raise ValueError(
                f"calibrated: quantization={quantization!r} has no measured kernels "
                "(measured: 'none' (bf16) and 'fp8' (vLLM's block-FP8 path))"
            )
        self.fp8 = quantization == "fp8"
        self.quant_scope = quant_scope
        if self.fp8 and shapes.moe_inter % FP8_BLOCK:
            # vLLM refuses to load such a checkpoint (block_n does not divide the shard)
            raise ValueError(
                f"calibrated: quantization='fp8' at tensor_parallel_size={shapes.tp}: the "
                f"expert shard moe_intermediate_size/tp={shapes.moe_inter} is not divisible "
                f"by the FP8 weight block {FP8_BLOCK} (vLLM cannot load it)"
            )
        self.shapes, self.spec, self.tables, self.gpu = shapes, spec, tables, gpu
        self.projection = projection
        self.split = split
        self._require_gdn = require_gdn
        self._gdn_kernels: tuple[str, ...] = ()
        self._gdn_interp: str | None = None
        self._t = self._build()
        # step_time_s's terms that depend only on the batch's token counts, per
        # (num_decode_req, query_tok_per_decode, num_chunks, prefill_tok): a memo of pure
        # functions of the key, so prices are the same numbers as computing them again
        self._count_terms: dict[tuple[int, int, int, int], tuple] = {}  # type: ignore[type-arg]

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_config(
        cls,
        model: ModelSpec,
        gpu: GpuSpec,
        tp: int,
        spec: SpecDecodeConfig,
        *,
        data_dir: Path | None = None,
    ) -> CalibratedStepTime:
        """Measured on the H200; any other GPU of ``capsim.gpus`` is a labelled projection."""
        tables = load_tables(MEASURED_GPU, data_dir)
        projection = None
        if gpu.step_times != "measured":
            projection = HardwareProjection(source=measured_gpu(), target=gpu)
        return cls(
            shapes=step_shapes(model, tp), spec=spec, tables=tables, gpu=gpu,
            projection=projection, quantization=model.quantization, quant_scope=model.quant_scope,
        )  # fmt: skip

    def fp8_linear(self, name: str) -> bool:
        """Whether linear ``name`` runs in FP8: FP8 weights with quant_scope 'linear', a
        128-block-divisible shape, not lm_head (kept in bf16 by the FP8 checkpoints)."""
        if not self.fp8 or self.quant_scope != "linear" or name == "lm_head":
            return False
        lin = self.shapes.linear(name)
        return lin.n % FP8_BLOCK == 0 and lin.k % FP8_BLOCK == 0

    def _refusal(self, key: tuple, series: dict) -> str:
        """One line naming the field and value that has no measured rows."""
        shp = self.shapes
        op = key[0]
        weights = "fp8" if self.fp8 else "bf16"
        have = sorted({k[1:] for k in series if k[0] == op}, key=str)
        near = ", ".join(map(str, have[:6])) + (" ..." if len(have) > 6 else "")
        return (
            f"calibrated: {shp.model} at tensor_parallel_size={shp.tp} (weights {weights}) has "
            f"no measured {op} rows for {'/'.join(map(str, key[1:]))} in "
            f"{self.tables.manifest_path.name} (measured {op}: {near or 'none'})"
        )

    def _rows(self, rows: tuple[dict, ...]) -> list[dict]:
        return [r for r in rows if self.split == "all" or r["split"] == "fit"]

    def _times(self, rows: list[dict], flops_key: str, bytes_key: str, op_key: str) -> list[float]:
        """p50 seconds per row, projected to the target GPU when one is set."""
        if self.projection is None:
            return [r["p50_us"] * 1e-6 for r in rows]
        fixed = class_fixed_us(rows, op_key=op_key)
        return [
            self.projection.project_us(
                r[op_key], r["p50_us"], r.get(flops_key, 0.0), r[bytes_key], fixed[r[op_key]]
            )
            * 1e-6
            for r in rows
        ]

    def _series(self) -> dict[tuple, list[tuple[float, float]]]:
        """The fit rows' (x, seconds) points, by operator series."""
        rows = self._rows(self.tables.ops)
        secs = self._times(rows, "flops", "bytes", "op")
        series: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
        for row, t_s in zip(rows, secs, strict=True):
            key, x = op_series(row)
            series[key].append((x, t_s))
        return series

    def _curve(self, series: dict, key: tuple, above: str = "refuse") -> Curve:
        pts = series.get(key)
        if not pts:
            raise ValueError(self._refusal(key, series))
        return Curve.from_points("/".join(map(str, key)), *zip(*pts, strict=True), above)

    def _gemm(self, series: dict, name: str) -> Curve:
        lin = self.shapes.linear(name)
        if self.fp8_linear(name):
            return self._curve(series, ("gemm_fp8", lin.n, lin.k))
        return self._curve(series, ("gemm", lin.n, lin.k))

    def _token_curves(self, series: dict) -> tuple[Curve, Curve, Curve]:
        """Per-token curves: (tok, mtp_tok, logits)."""
        shp = self.shapes
        curve, gemm = partial(self._curve, series), partial(self._gemm, series)
        rms_h = curve(("rmsnorm", f"d{shp.hidden}"))
        moe = curve(("moe_fp8" if self.fp8 else "moe", shp.moe_key))
        gdn_layer = [
            (2.0, rms_h),
            (1.0, gemm("gdn_in_qkvz")),
            (1.0, gemm("gdn_in_ba")),
            (1.0, curve(("conv", f"c{shp.conv_dim}"))),
            (1.0, curve(("rmsnorm", f"d{shp.gdn_hv * shp.gdn_dv}"))),
            (1.0, gemm("gdn_out")),
            (1.0, moe),
        ]
        attn_layer = [(2.0, rms_h), (1.0, gemm("attn_qkv")), (1.0, gemm("attn_o")), (1.0, moe)]
        tok = curve_sum(
            "tok",
            [(w * shp.num_gdn_layers, c) for w, c in gdn_layer]
            + [(w * shp.num_attn_layers, c) for w, c in attn_layer],
        )
        mtp = [(1.0, gemm("mtp_fc")), (2.0, rms_h), *attn_layer]
        mtp_tok = curve_sum("mtp_tok", [(w * max(shp.num_mtp_layers, 1), c) for w, c in mtp])
        # stated rule: above the largest measured row count (tree verify windows can
        # exceed it), logits are proportional to rows (a compute-bound GEMM + sampling)
        logits = curve_sum(
            "logits",
            [(1.0, rms_h), (1.0, gemm("lm_head")), (1.0, curve(("sample", f"v{shp.vocab_local}")))],
            "proportional",
        )
        return tok, mtp_tok, logits

    def _attn_q_sheet(self, series: dict, q: int) -> Sheet | None:
        shp = self.shapes
        batches = sorted({k[3] for k in series if k[:3] == ("attn_decode", shp.attn_key, q)})
        if not batches:
            return None
        curves = tuple(
            self._curve(series, ("attn_decode", shp.attn_key, q, b), above="proportional")
            for b in batches
        )
        # stated rule: above the largest measured batch, proportional to batch (every
        # decode request reads its own KV; tree drafts run many rows per request)
        name = f"attn_decode/{shp.attn_key}/q{q}/batch"
        return Sheet(name, tuple(batches), curves, above="proportional")

    def _attn_sheet(self, series: dict, q: int) -> Sheet | None:
        """Measured q, else linear in q between the two measured neighbours."""
        shp = self.shapes
        exact = self._attn_q_sheet(series, q)
        qs = sorted({k[2] for k in series if k[:2] == ("attn_decode", shp.attn_key)})
        lower = [x for x in qs if x < q]
        upper = [x for x in qs if x > q]
        if exact is not None or not lower or not upper:
            return exact
        s0, s1 = self._attn_q_sheet(series, lower[-1]), self._attn_q_sheet(series, upper[0])
        if s0 is None or s1 is None or s0.us != s1.us:
            return None
        a = (q - lower[-1]) / (upper[0] - lower[-1])
        curves = tuple(
            curve_sum(f"attn_decode/q{q}/b{b:g}", [(1 - a, c0), (a, c1)], "proportional")
            for b, c0, c1 in zip(s0.us, s0.curves, s1.curves, strict=True)
        )
        return Sheet(
            f"attn_decode/{shp.attn_key}/q{q}(interp)/batch", s0.us, curves, "proportional"
        )

    def _attn_tables(
        self, series: dict
    ) -> tuple[Sheet, Sheet | None, tuple[tuple[float, Curve], ...]]:
        """Attention sheets: (attn_1, attn_w, prefill_attn)."""
        shp = self.shapes
        attn_1 = self._attn_sheet(series, 1)
        if attn_1 is None:
            raise ValueError(f"calibration table has no attn_decode q=1 points for {shp.key}")
        w = self.spec.window_tok
        attn_w = attn_1 if w == 1 else self._attn_sheet(series, w)
        if attn_w is None and self.spec.depth:
            raise ValueError(
                f"calibration table has no attn_decode points with q_tok={w} "
                f"(spec window) for {shp.attn_key}"
            )
        pre_ctx = sorted(k[2] for k in series if k[:2] == ("attn_prefill", shp.attn_key))
        prefill_attn = tuple(
            (float(c), self._curve(series, ("attn_prefill", shp.attn_key, c), above="proportional"))
            for c in pre_ctx
        )
        return attn_1, attn_w, prefill_attn

    def _build(self) -> _Tables:
        shp = self.shapes
        series = self._series()
        tok, mtp_tok, logits = self._token_curves(series)
        attn_1, attn_w, prefill_attn = self._attn_tables(series)
        rest = max(self.spec.depth - 1, 0)
        draft_rest = curve_sum("draft_rest", [(float(rest), mtp_tok), (float(rest), logits)])
        return _Tables(
            tok=tok,
            mtp_tok=mtp_tok,
            draft_rest=draft_rest,
            logits=logits,
            host=self._curve(series, ("host", "roundtrip")),
            attn_w=attn_w,
            attn_1=attn_1,
            prefill_attn=prefill_attn,
            gdn_prefill=self._curve(series, ("gdn_prefill", shp.gdn_key)),
            gdn_verify=(self._gdn_verify_curve() if self._require_gdn else None),
        )

    def _gdn_rows(self, window_tok: int | None, tree: str | None) -> list[dict]:  # type: ignore[type-arg]
        shp = self.shapes
        state = _dtype_alias(shp.ssm_state_dtype)
        rows = [
            r
            for r in self._rows(self.tables.gdn)
            if (r["Hv"], r["Hk"], r["dk"], r["dv"])
            == (shp.gdn_hv, shp.gdn_hk, shp.gdn_dk, shp.gdn_dv)
            and _dtype_alias(r["state_dtype"]) == state
            and (window_tok is None or r["T"] == window_tok)
            and (tree is None or str(r["tree"]) == tree)
        ]
        # stated rule: a (kernel, window) measured at fewer than two batch sizes is no
        # curve (nothing to interpolate along B); the window counts as unmeasured for it
        batches: dict[tuple, set] = defaultdict(set)
        for r in rows:
            batches[r["kernel"], r["T"], str(r["tree"])].add(r["B"])
        return [r for r in rows if len(batches[r["kernel"], r["T"], str(r["tree"])]) >= 2]

    def _gdn_curve_from_rows(self, rows: list[dict], label: str) -> Curve:  # type: ignore[type-arg]
        spec = self.spec
        have = {r["kernel"] for r in rows}
        series = COMMIT_KERNELS[spec.commit] if spec.depth else NO_SPEC_KERNELS
        for kernels in series:
            if set(kernels) <= have:
                break
        else:
            raise ValueError(
                f"GDN verify table has no kernels for commit={spec.commit!r} at "
                f"{self.shapes.gdn_key} {label} (found {sorted(have) or 'none'}; need one of "
                f"{series})"
            )
        self._gdn_kernels = kernels
        rows = [r for r in rows if r["kernel"] in kernels]
        rows_p = [{**r, "op": "gdn_verify"} for r in rows]
        secs = self._times(rows_p, "flops", "bytes_moved", "op")
        parts = []
        for kernel in kernels:
            pts = sorted(
                (r["B"], t) for r, t in zip(rows, secs, strict=True) if r["kernel"] == kernel
            )
            parts.append((1.0, Curve.from_points(f"gdn_verify/{kernel}", *zip(*pts, strict=True))))
        summed = curve_sum("gdn_verify", parts)
        return Curve(summed.name, summed.xs, summed.ys, above="proportional")

    def _gdn_verify_curve(self) -> Curve:
        spec = self.spec
        state = _dtype_alias(self.shapes.ssm_state_dtype)
        tree = "chain" if spec.tree_widths is None else ",".join(map(str, spec.tree_widths))
        if spec.tree_widths is not None and all(x == 1 for x in spec.tree_widths):
            tree = "chain"
        w = spec.window_tok
        rows = self._gdn_rows(w, tree)
        if rows:
            return self._gdn_curve_from_rows(rows, f"state={state} T={w} tree={tree!r}")
        # Stated rule: an unmeasured window is linear in T between the nearest measured
        # windows below and above it (any measured shape); outside them: refuse.
        measured = sorted({int(r["T"]) for r in self._gdn_rows(None, None)})
        if not measured:
            shp = self.shapes
            raise ValueError(
                f"calibrated: {shp.model} at tensor_parallel_size={shp.tp} has no measured GDN "
                f"kernel rows for its per-GPU heads {shp.gdn_key} (state {state})"
            )
        lo = max((t for t in measured if t < w), default=None)
        hi = min((t for t in measured if t > w), default=None)
        if lo is None or hi is None:
            raise ValueError(
                f"GDN verify table has no window T={w} (tree={tree!r}, state={state}) and "
                f"cannot interpolate: measured windows are {measured} "
                "(or price with --step-time roofline)"
            )

        def one_shape(t: int) -> tuple[str, list[dict]]:  # type: ignore[type-arg]
            trees = sorted({str(r["tree"]) for r in self._gdn_rows(t, None)})
            # a tree prefers measured tree shapes, a chain prefers chains
            wanted = [t for t in trees if (t == "chain") == (spec.tree_widths is None)]
            pick = (wanted or trees)[0]
            return pick, self._gdn_rows(t, pick)

        (t_lo, r_lo), (t_hi, r_hi) = one_shape(lo), one_shape(hi)
        c_lo = self._gdn_curve_from_rows(r_lo, f"state={state} T={lo} tree={t_lo!r}")
        c_hi = self._gdn_curve_from_rows(r_hi, f"state={state} T={hi} tree={t_hi!r}")
        frac = (w - lo) / (hi - lo)
        xs = tuple(x for x in c_lo.xs if x in set(c_hi.xs))
        ys = tuple((1 - frac) * c_lo(x) + frac * c_hi(x) for x in xs)
        self._gdn_interp = f"T={w}: linear between T={lo} ({t_lo}) and T={hi} ({t_hi})"
        return Curve(f"gdn_verify/T{w}", xs, ys, above="proportional")

    # ------------------------------------------------------------------ pricing
    def _attn_prefill(self, n: int, ctx: int) -> float:
        shp = self.shapes
        pts = self._t.prefill_attn
        if not pts or n <= 0:
            return 0.0

        def at(c: float, curve: Curve) -> float:
            return curve(4.0 * shp.attn_hq * shp.head_dim * n * (c + n / 2.0))

        if ctx <= pts[0][0]:
            return at(pts[0][0], pts[0][1])
        for (c0, k0), (c1, k1) in pairwise(pts):
            if ctx <= c1:
                y0, y1 = at(c0, k0), at(c1, k1)
                return y0 + (y1 - y0) * (ctx - c0) / (c1 - c0)
        c_top, k_top = pts[-1]
        return at(c_top, k_top) * ctx / c_top  # stated rule: proportional to context above

    def breakdown_s(self, shape: BatchShape, *, parts: str = "step") -> dict[str, float]:
        """Seconds per part of one step. ``parts='forward_no_gdn'`` prices only what the
        issue-6 whole-step runs measured (target forward without the GDN recurrence, no
        drafts, no host); the issue-13 runs measure the whole step but the host round trip
        (``parts='step'`` less ``host``)."""
        if parts not in ("step", "forward_no_gdn"):
            raise ValueError(f"breakdown parts={parts!r} must be 'step' or 'forward_no_gdn'")
        out: dict[str, float] = {}
        self._price(shape, out, parts == "step")
        return out

    def step_time_s(self, shape: BatchShape) -> float:
        """``_price(shape, None, True)`` with the count-only terms memoised: the same
        operations in the same order on the same numbers (a test compares the two)."""
        r_dec, w = shape.num_decode_req, shape.query_tok_per_decode
        n_chunks = shape.prefill_new_tok.size
        pre_tok = int(_add(shape.prefill_new_tok)) if n_chunks else 0
        key = (r_dec, w, n_chunks, pre_tok)
        terms = self._count_terms.get(key)
        if terms is None:
            if len(self._count_terms) >= COUNT_TERMS_MEMO_MAX:
                # NOTE: keys include the prefill token total, so a long run keeps finding
                # new ones; a bounded memo keeps memory flat (a miss recomputes the same
                # numbers, so results do not depend on it)
                self._count_terms.clear()
            terms = self._count_terms[key] = self._terms(r_dec, w, n_chunks, pre_tok, True)
        return self._assemble(shape, terms, None, True)

    def _price(self, shape: BatchShape, out: dict[str, float] | None, full: bool) -> float:
        r_dec, w = shape.num_decode_req, shape.query_tok_per_decode
        n_chunks = shape.prefill_new_tok.size
        pre_tok = int(_add(shape.prefill_new_tok)) if n_chunks else 0
        return self._assemble(shape, self._terms(r_dec, w, n_chunks, pre_tok, full), out, full)

    def _terms(self, r_dec: int, w: int, n_chunks: int, pre_tok: int, full: bool) -> tuple:  # type: ignore[type-arg]
        """The terms of a step that depend only on its token counts (``full=False``: the
        forward without GDN kernels, drafts or host: dense and logits only)."""
        t, shp, spec = self._t, self.shapes, self.spec
        m = r_dec * w + pre_tok
        dense = t.tok(m) if m else 0.0
        n_logits = r_dec * w + n_chunks
        logits = t.logits(n_logits) if n_logits else 0.0
        gdn = mtp_m = logits_all = rest = host = allreduce = 0.0
        levels: list[tuple[float, int, float]] = []
        if not full:
            return dense, logits, gdn, mtp_m, logits_all, rest, (), host, allreduce
        if r_dec:
            if t.gdn_verify is None:
                raise ValueError("calibrated: decode requests but no GDN table (require_gdn=False)")
            gdn += t.gdn_verify(r_dec)
        if n_chunks:
            gdn += t.gdn_prefill(pre_tok)
        gdn *= shp.num_gdn_layers
        r_all = r_dec + n_chunks
        if spec.depth and r_all:
            mtp_m, logits_all = t.mtp_tok(m), t.logits(r_all)
            if spec.tree_widths is None:  # chain: passes 2..depth price r_all tokens each
                rest = t.draft_rest(r_all)
            else:
                level = 1
                for d in range(1, spec.depth):
                    level *= spec.tree_widths[d - 1]
                    r_d = r_all * level
                    levels.append((t.mtp_tok(r_d), r_d, t.logits(r_d)))
        host = t.host(min(max(n_logits, 1), t.host.x_max))
        if shp.tp > 1:
            layers = shp.num_gdn_layers + shp.num_attn_layers + (1 if spec.depth else 0)
            ring = 2.0 * (shp.tp - 1) / shp.tp
            allreduce = ring * 2 * layers * m * shp.hidden * 2 / self.gpu.interconnect_bytes_per_s
        return dense, logits, gdn, mtp_m, logits_all, rest, tuple(levels), host, allreduce

    def _assemble(
        self,
        shape: BatchShape,
        terms: tuple,  # type: ignore[type-arg]
        out: dict[str, float] | None,
        full: bool,
    ) -> float:
        """The step's time from its count-only ``terms`` and its attention (which depends
        on the contexts); the parts go to ``out`` when given."""
        t, shp, spec = self._t, self.shapes, self.spec
        dense, logits, gdn, mtp_m, logits_all, rest, levels, host, allreduce = terms
        r_dec, w = shape.num_decode_req, shape.query_tok_per_decode
        n_chunks = shape.prefill_new_tok.size
        attn = ctx = 0.0
        if r_dec:
            ctx = float(_add(shape.decode_context_tok)) / r_dec + w
            if w == spec.window_tok and t.attn_w is not None:
                attn = t.attn_w(r_dec, ctx)
            elif w == 1:
                attn = t.attn_1(r_dec, ctx)
            else:
                raise ValueError(
                    f"calibrated: query_tok_per_decode={w} has no attention table "
                    f"(measured for 1 and the spec window {spec.window_tok})"
                )
        pre_attn = 0.0
        if n_chunks:
            for n, c in zip(
                shape.prefill_new_tok.tolist(), shape.prefill_computed_tok.tolist(), strict=True
            ):
                pre_attn += self._attn_prefill(int(n), int(c))
        attention = shp.num_attn_layers * (attn + pre_attn)
        total = dense + attention + logits
        if out is not None:
            out.update(dense=dense, attention=attention, logits=logits)
        if not full:
            return total
        drafts = 0.0
        r_all = r_dec + n_chunks
        if spec.depth and r_all:
            drafts += mtp_m + attn + pre_attn + logits_all
            if spec.tree_widths is None:
                drafts += rest + (spec.depth - 1) * t.attn_1(r_all, ctx + 1)
            else:
                for d, (mtp_d, r_d, logits_d) in enumerate(levels, start=1):
                    drafts += mtp_d + t.attn_1(r_d, ctx + d) + logits_d
        total += gdn + drafts + host
        if shp.tp > 1:
            total += allreduce
        if out is not None:
            out.update(gdn=gdn, drafts=drafts, host=host)
            if shp.tp > 1:
                out["tp_allreduce"] = allreduce
        return total

    def describe(self) -> dict[str, object]:
        tab = self.tables
        return {
            "kind": "calibrated",
            "table_path": str(tab.manifest_path),
            "table_sha256": tab.manifest_sha256,
            "schema_version": tab.manifest.get("schema_version"),
            "gpu": self.gpu.name,
            "measured_gpu": MEASURED_GPU,
            "projection": self.projection.label if self.projection else False,
            "hardware_model": self.projection.describe() if self.projection else None,
            "model": self.shapes.model,
            "tp": self.shapes.tp,
            "commit": self.spec.commit,
            "window_tok": self.spec.window_tok,
            "depth": self.spec.depth,
            "gdn_kernels": list(self._gdn_kernels),
            "gdn_window_interpolation": self._gdn_interp,
            "split": self.split,
            "beyond_grid": list(BEYOND_GRID_RULES),
            "weights": "fp8" if self.fp8 else "bf16",
            "fp8_linears": [lin.name for lin in self.shapes.linears if self.fp8_linear(lin.name)],
            "tp_allreduce": (
                "analytical ring all-reduce of the bf16 hidden state, 2 per layer, "
                f"2 (tp-1)/tp x bytes over {self.gpu.interconnect_bytes_per_s / 1e9:.0f} GB/s "
                f"per direction ({self.gpu.name} NVLink figure: "
                f"{'; '.join(s for s in self.gpu.sources if 'NVLink' in s) or 'gpus.py'}); "
                "bandwidth only, not measured (a lower bound: multi-GPU machines are withheld)"
                if self.shapes.tp > 1
                else None
            ),
        }
