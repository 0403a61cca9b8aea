"""Measured non-KV memory terms (H200): loader and lookup.

The table ``data/h200_memory_terms.csv`` is written by ``kernels/bench/memory/memory_terms.py`` on a
lent H200 (the script's docstring says what each term is and which kernel ran; every row
carries its kernel, source, command and date). One row is one measurement:

- ``term``: what was measured (kernels/MEMORY_TERMS.md has the numbers and limits):

  - ``gdn_prefill_transient`` (axis max_num_batched_tokens): scratch of vLLM's Triton/FLA
    ``chunk_gated_delta_rule`` beyond its inputs and outputs, one GDN layer (layers run one
    after another, so this is not multiplied by the layer count); not in vLLM's profiled peak;
  - ``gdn_prefill_core_path``: the same for the whole prefill half of the GDN layer core;
  - ``sampler_dummy_run`` (axis max_num_seqs): peak of vLLM's dummy sampler call over its
    bf16 logits, including the Triton top-k/top-p buffer that stays cached;
  - ``moe_workspace`` (axis max_num_batched_tokens): vLLM's fused-MoE workspace buffers,
    kept by the workspace manager after the profile run; ``moe_grouped_mm_transient``: a
    stand-in MoE forward's transient;
  - ``cudagraph_pool`` (axis capture_size): device memory each capture added, largest
    first, all vLLM capture sizes in one pool; ``cudagraph_pool_total`` (one row, the
    largest capture size): the pool for all sizes; ``cudagraph_pool_vllm_estimate``: vLLM's
    first + (n-1) x second formula on the same captures; ``cudagraph_pool_2periods``: the
    total with 8 instead of 4 layers;
- ``model``, ``tp``: the capsim preset and tensor-parallel degree whose per-GPU shapes ran;
- ``max_num_batched_tokens``, ``max_num_seqs``, ``capture_size``: the settings (0 = not
  applicable); exactly one of them is the term's axis (the one that varies across its rows);
- ``bytes``: the measured bytes on one GPU.

:meth:`MemoryTerms.lookup` interpolates linearly along the axis between measured points and
refuses (``ValueError``) any value outside the measured range: a memory term is not safe to
extrapolate (allocator rounding, kernel tiling and caches change with size).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, fields
from pathlib import Path

from capsim.calibration.interp import Curve

DEFAULT_PATH = (
    Path(__file__).resolve().parents[1] / "calibration" / "data" / "h200_memory_terms.csv"
)
AXES = ("max_num_batched_tokens", "capture_size", "max_num_seqs")
MEASURED_LABEL = "measured (H200)"


@dataclass(frozen=True, slots=True)
class MemoryTermRow:
    """One measured point of the table."""

    term: str
    model: str
    tp: int
    max_num_batched_tokens: int
    max_num_seqs: int
    capture_size: int
    bytes: int
    kernel: str
    source: str
    command: str
    date: str

    def axis_value(self, axis: str) -> int:
        return int(getattr(self, axis))


# The CSV's header: the row's fields in order
# (kernels/bench/memory/memory_terms.py writes the same).
COLUMNS = tuple(f.name for f in fields(MemoryTermRow))


@dataclass(frozen=True, slots=True)
class MemoryTermValue:
    """A looked-up term: bytes at ``x`` on ``axis``, with where the points came from."""

    term: str
    model: str
    tp: int
    axis: str
    x: int
    value_bytes: float
    kernel: str
    source: str
    date: str
    interpolated: bool
    label: str = MEASURED_LABEL


@dataclass(frozen=True, slots=True)
class _Series:
    axis: str
    rows: tuple[MemoryTermRow, ...]  # sorted along axis
    curve: Curve | None  # None for a single point


def _axis_of(rows: list[MemoryTermRow]) -> str:
    """The setting that varies across a term's rows (one point: its first non-zero setting)."""
    varying = [a for a in AXES if len({r.axis_value(a) for r in rows}) > 1]
    if len(varying) > 1:
        r = rows[0]
        raise ValueError(
            f"memory term {r.term!r} ({r.model}, tp={r.tp}): settings {varying} all vary; "
            "one axis per term"
        )
    if varying:
        return varying[0]
    nonzero = [a for a in AXES if rows[0].axis_value(a) > 0]
    return nonzero[0] if nonzero else AXES[0]


class MemoryTerms:
    """The measured table, grouped by (term, model, tp)."""

    def __init__(self, rows: list[MemoryTermRow], path: Path) -> None:
        self.path = path
        self.rows = tuple(rows)
        groups: dict[tuple[str, str, int], list[MemoryTermRow]] = {}
        for row in rows:
            groups.setdefault((row.term, row.model, row.tp), []).append(row)
        self._series: dict[tuple[str, str, int], _Series] = {}
        for key, group in groups.items():
            axis = _axis_of(group)
            group.sort(key=lambda r: r.axis_value(axis))
            xs = [r.axis_value(axis) for r in group]
            if len(set(xs)) != len(xs):
                raise ValueError(
                    f"{path}: memory term {key[0]!r} ({key[1]}, tp={key[2]}) has two rows "
                    f"at {axis}={xs}"
                )
            curve = (
                Curve.from_points(f"{key[0]}/{key[1]}/tp{key[2]}", xs, [r.bytes for r in group])
                if len(group) > 1
                else None
            )
            self._series[key] = _Series(axis, tuple(group), curve)

    def terms(self) -> tuple[str, ...]:
        return tuple(sorted({k[0] for k in self._series}))

    def keys(self) -> tuple[tuple[str, str, int], ...]:
        """Every (term, model, tp) the table holds."""
        return tuple(sorted(self._series))

    def axis(self, term: str, model: str, tp: int) -> str:
        return self._get(term, model, tp).axis

    def points(self, term: str, model: str, tp: int) -> tuple[MemoryTermRow, ...]:
        return self._get(term, model, tp).rows

    def _get(self, term: str, model: str, tp: int) -> _Series:
        series = self._series.get((term, model, tp))
        if series is None:
            have = sorted(f"{m}/tp{t}" for (k, m, t) in self._series if k == term)
            raise ValueError(
                f"memory term {term!r} has no measurement for model={model!r} tp={tp} "
                f"in {self.path} (measured: {have or 'none'})"
            )
        return series

    def lookup(self, term: str, model: str, tp: int, tokens: int) -> MemoryTermValue:
        """Bytes of ``term`` at ``tokens`` on the term's axis, linear between measured points."""
        series = self._get(term, model, tp)
        xs = [r.axis_value(series.axis) for r in series.rows]
        if not xs[0] <= tokens <= xs[-1]:
            raise ValueError(
                f"memory term {term!r} ({model}, tp={tp}): {series.axis}={tokens} is outside "
                f"the measured range [{xs[0]}, {xs[-1]}]; not extrapolated"
            )
        exact = [r for r in series.rows if r.axis_value(series.axis) == tokens]
        near = exact[0] if exact else series.rows[0]
        value = float(near.bytes) if exact or series.curve is None else series.curve(tokens)
        return MemoryTermValue(
            term=term,
            model=model,
            tp=tp,
            axis=series.axis,
            x=tokens,
            value_bytes=value,
            kernel=near.kernel,
            source=near.source,
            date=near.date,
            interpolated=not exact,
        )

    def bytes_at(self, term: str, model: str, tp: int, tokens: int) -> float:
        return self.lookup(term, model, tp, tokens).value_bytes


def _int_field(raw: dict[str, str], name: str, where: str) -> int:
    text = (raw.get(name) or "").strip()
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{where}: {name}={text!r} is not an integer") from None
    if value < 0:
        raise ValueError(f"{where}: {name}={value} must be >= 0")
    return value


def load_memory_terms(path: Path | str | None = None) -> MemoryTerms:
    """Read the measured memory-term table (default: the committed H200 table)."""
    path = Path(path) if path is not None else DEFAULT_PATH
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ValueError(f"memory terms table {path} does not exist") from None
    reader = csv.DictReader(text.splitlines())
    header = tuple(reader.fieldnames or ())
    if header != COLUMNS:
        raise ValueError(f"{path}: columns={list(header)} must be {list(COLUMNS)}")
    rows: list[MemoryTermRow] = []
    for line, raw in enumerate(reader, start=2):
        where = f"{path}:{line}"
        for name in ("term", "model"):
            if not (raw.get(name) or "").strip():
                raise ValueError(f"{where}: {name} is empty")
        tp = _int_field(raw, "tp", where)
        if tp < 1:
            raise ValueError(f"{where}: tp={tp} must be >= 1")
        rows.append(
            MemoryTermRow(
                term=raw["term"].strip(),
                model=raw["model"].strip(),
                tp=tp,
                max_num_batched_tokens=_int_field(raw, "max_num_batched_tokens", where),
                max_num_seqs=_int_field(raw, "max_num_seqs", where),
                capture_size=_int_field(raw, "capture_size", where),
                bytes=_int_field(raw, "bytes", where),
                kernel=raw["kernel"],
                source=raw["source"],
                command=raw["command"],
                date=raw["date"],
            )
        )
    if not rows:
        raise ValueError(f"{path}: no rows")
    return MemoryTerms(rows, path)
