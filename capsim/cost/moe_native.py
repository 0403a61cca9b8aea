"""vLLM's compiled MoE routing ops in place of capsim's Triton stand-ins: a measured correction.

capsim's ``moe`` rows (``capsim/calibration/data/h200_model_step.csv``) were timed with
Triton/torch stand-ins for four compiled vLLM ops (``kernels/bench/step/standins.py``). The
real vLLM 0.26 engine runs its own. ``scripts/engine_moe_ops.py`` timed both on the engine's
H200 (device call 16, 2026-12-02; ``kernels/results/h200/moe_ops_call16.csv``, copied
verbatim to ``capsim/calibration/data/h200_moe_ops.csv``), and this module turns those rows
into the per-layer excess of the stand-ins at M tokens::

    excess(M) = sum over the ops of one MoE layer of  table_impl p50 - engine_impl p50

- ``topk_softmax``, ``silu_and_mul_experts`` ([8M, 2I]), ``moe_sum``: stand-in vs vLLM's op
  (``TritonExperts`` calls ``torch.ops._C.silu_and_mul`` and ``ops.moe_sum`` directly);
- ``moe_align_block_size``: only where vLLM runs it, M * top_k * 4 > E (M > 8 here; below it
  vLLM 0.26 and 0.33 take the naive block assignment and the tables have no call either):
  its excess is interpolated over the measured counts that run it, clamped down to the
  first token count that does, and added only there (a step, not a ramp from 8 to 16);
- the shared expert's ``SiluAndMul`` is left as the tables have it: vLLM 0.26 runs it as
  ``forward_native`` inside the opaque ``moe_forward_shared`` op (``custom_ops`` 'none' with
  inductor) and, with ``compile_native=True``, torch-compiles it (``CustomOp.maybe_compile``):
  one generated Triton pointwise kernel, the same kind as the stand-in. Not timed in call 16
  (its ``torch`` rows are the eager form, 1.7-3.3 us slower; vLLM's CUDA op 0.5 us slower):
  taken as no difference, an uncertainty of about +-0.5 us per layer.

Above and below the measured token counts the excess is clamped (the largest is 512: a
prefill chunk's MoE gets the excess measured at 512 tokens, a stated rule). A measurement,
not a fit: nothing here is tuned to an engine end-to-end number.
"""

from __future__ import annotations

import csv
from bisect import bisect_left
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from capsim.calibration.interp import Curve
from capsim.cost.calibrated import CalibratedStepTime

DATA_PATH = Path(__file__).resolve().parents[1] / "calibration/data/h200_moe_ops.csv"
SOURCE = (
    "kernels/results/h200/moe_ops_call16.csv (scripts/engine_moe_ops.py on the vLLM 0.26 "
    "engine's H200, device call 16, 2026-12-02)"
)
# (op, implementation the step tables timed, implementation the vLLM 0.26 engine runs); the
# shared expert's silu_and_mul is not here (see the module docstring)
LAYER_OPS: tuple[tuple[str, str, str], ...] = (
    ("topk_softmax", "standin", "vllm"),
    ("moe_align_block_size", "standin", "vllm"),
    ("silu_and_mul_experts", "standin", "vllm"),
    ("moe_sum", "standin", "vllm"),
)


@dataclass(frozen=True, slots=True)
class MoeOpsCorrection:
    """Per-MoE-layer excess (seconds) of the stand-ins over vLLM's ops, by token count:
    ``excess_s`` without ``moe_align_block_size``, ``align_excess_s`` at ``align_tokens``
    (the counts where vLLM runs it), added from ``align_from_tok`` tokens on."""

    moe_key: str
    tokens: tuple[int, ...]
    excess_s: tuple[float, ...]
    align_tokens: tuple[int, ...]
    align_excess_s: tuple[float, ...]
    align_from_tok: int
    parts_us: tuple[tuple[tuple[str, float], ...], ...]  # per token count: (op, excess us)
    source: str

    def __post_init__(self) -> None:
        for xs, ys in ((self.tokens, self.excess_s), (self.align_tokens, self.align_excess_s)):
            if not xs or len(xs) != len(ys):
                raise ValueError(f"moe ops correction {self.moe_key}: no points or unequal")
            if any(b <= a for a, b in pairwise(xs)):
                raise ValueError(f"moe ops correction: tokens={xs} must be increasing")

    def at(self, m: float) -> float:
        """Excess seconds per MoE layer at m tokens (linear; clamped outside the grid)."""
        out = _interp(self.tokens, self.excess_s, m)
        if m >= self.align_from_tok:
            out += _interp(self.align_tokens, self.align_excess_s, m)
        return out

    def subtract(self, curve: Curve, layers: float) -> Curve:
        """``curve`` minus ``layers`` x the excess, exact at every integer token count (the
        union of both grids up to the curve's top; its rule above it is kept)."""
        top = curve.x_max
        # the excess' breakpoints, and align's step between align_from_tok - 1 and it
        knots = (*self.tokens, *self.align_tokens, self.align_from_tok - 1, self.align_from_tok)
        xs = sorted({*curve.xs, *(float(t) for t in knots if curve.xs[0] <= t <= top)})
        ys = []
        for x in xs:
            y = curve(x) - layers * self.at(x)
            if y <= 0:
                raise ValueError(
                    f"moe ops correction: {curve.name} at {x:g} tokens is {curve(x) * 1e6:.1f}"
                    f" us, not above {layers:g} x the stand-ins' excess {self.at(x) * 1e6:.1f} us"
                )
            ys.append(y)
        return Curve(f"{curve.name}(vllm moe ops)", tuple(xs), tuple(ys), curve.above)

    def describe(self) -> dict[str, object]:
        return {
            "moe_key": self.moe_key,
            "excess_us_per_layer": {t: round(self.at(t) * 1e6, 3) for t in self.tokens},
            "rule": "linear in tokens between measured counts, clamped outside them; "
            f"moe_align_block_size from {self.align_from_tok} tokens on",
            "source": self.source,
        }


def _interp(xs: tuple[int, ...], ys: tuple[float, ...], m: float) -> float:
    if m <= xs[0]:
        return ys[0]
    if m >= xs[-1]:
        return ys[-1]
    i = bisect_left(xs, m)
    return ys[i - 1] + (ys[i] - ys[i - 1]) * (m - xs[i - 1]) / (xs[i] - xs[i - 1])


def _p50(rows: list[dict], op: str, impl: str, n: int, where: Path) -> float:
    for r in rows:
        if r["op"] == op and r["impl"] == impl and int(r["tokens"]) == n:
            if r.get("error") or not r.get("p50_us"):
                raise ValueError(f"{where}: {op}/{impl} at tokens={n} has no time ({r['error']})")
            return float(r["p50_us"])
    raise ValueError(f"{where}: no row op={op} impl={impl} tokens={n}")


def from_rows(rows: list[dict], moe_key: str, where: Path, source: str) -> MoeOpsCorrection:
    """The correction from engine_moe_ops.py's CSV rows (columns op, impl, tokens, p50_us,
    in_vllm_step, error) for ``moe_key`` ('e<E>_k<topk>_...')."""
    experts, topk = (int(part[1:]) for part in moe_key.split("_")[:2])
    align_from = experts // (4 * topk) + 1  # vLLM: align when tokens * topk * 4 > experts
    tokens = sorted({int(r["tokens"]) for r in rows})
    excess, parts, align = [], [], []
    for n in tokens:
        per = []
        for op, table_impl, engine_impl in LAYER_OPS:
            d = _p50(rows, op, table_impl, n, where) - _p50(rows, op, engine_impl, n, where)
            if op != "moe_align_block_size":
                per.append((op, round(d, 3)))
            elif n >= align_from:
                per.append((op, round(d, 3)))
                align.append((n, d * 1e-6))
        parts.append(tuple(per))
        excess.append(sum(d for op, d in per if op != "moe_align_block_size") * 1e-6)
    if not align:
        raise ValueError(f"{where}: no moe_align_block_size rows at tokens >= {align_from}")
    return MoeOpsCorrection(
        moe_key, tuple(tokens), tuple(excess), tuple(n for n, _ in align),
        tuple(e for _, e in align), align_from, tuple(parts), source,
    )  # fmt: skip


def load_moe_correction(
    path: Path = DATA_PATH, moe_key: str = "e256_k8_i512_s512_h2048"
) -> MoeOpsCorrection:
    """The committed call-16 measurement (Qwen3.5-35B-A3B's MoE shape at TP1)."""
    with Path(path).open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    return from_rows(rows, moe_key, Path(path), SOURCE)


class VllmMoeOpsStepTime(CalibratedStepTime):
    """The calibrated step price with vLLM's compiled MoE ops in place of the stand-ins:
    every MoE layer of the target (``tok``) and of the MTP drafter (``mtp_tok``, hence the
    later draft passes too) is priced ``moe(M) - excess(M)``. Measured for the bf16 MoE of
    ``correction.moe_key`` on the H200; refused elsewhere, naming the field."""

    def __init__(self, *args, correction: MoeOpsCorrection | None = None, **kwargs) -> None:
        self.correction = correction if correction is not None else load_moe_correction()
        super().__init__(*args, **kwargs)

    def _token_curves(self, series: dict) -> tuple[Curve, Curve, Curve]:
        shp, corr = self.shapes, self.correction
        if shp.moe_key != corr.moe_key:
            raise ValueError(
                f"vllm moe ops: {shp.model} at tensor_parallel_size={shp.tp} has MoE shape "
                f"{shp.moe_key}; the stand-in correction is measured for {corr.moe_key} only"
            )
        if self.fp8 or self.projection is not None:
            weights = "fp8" if self.fp8 else "bf16"
            raise ValueError(
                f"vllm moe ops: weights={weights} gpu={self.gpu.name}: the stand-in correction "
                "is measured for bf16 MoE on the H200 only"
            )
        tok, mtp_tok, logits = super()._token_curves(series)
        layers = float(shp.num_gdn_layers + shp.num_attn_layers)
        mtp_layers = float(max(shp.num_mtp_layers, 1))
        return corr.subtract(tok, layers), corr.subtract(mtp_tok, mtp_layers), logits

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "moe_ops": self.correction.describe()}
