"""Versioned calibration tables: schema, loader, series and the held-back split.

Files under ``capsim/calibration/data/`` (written by ``capsim.calibration.build`` from the
measured CSVs in ``kernels/results/<gpu>/``)::

    <gpu>_manifest.json           schema_version, device, dates, commands, sha256 per file
    <gpu>_model_step.csv          one row per measured operator point, column ``split``
    <gpu>_model_step_validation.csv   whole steps measured as one CUDA graph (never fitted)
    <gpu>_gdn_verify.csv          GDN verify/commit kernels (kernels issue), column ``split``

Every point belongs to one *series*: the points of one operator shape along one axis
(token count, context, batch). ``split`` is ``fit`` or ``holdout``; a seeded ~25% of each
series' interior points are held back for ``capsim calibrate --check`` and never enter
the step-time model. A series' first and last points are always ``fit`` (the model does
not extrapolate, so an end point could not be predicted).
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SCHEMA_VERSION = 1
DATA_DIR = Path(__file__).resolve().parent / "data"
HOLDOUT_FRACTION = 0.25
HOLDOUT_SEED = 6

OP_INT_FIELDS = ("m_tok", "n", "k", "batch", "q_tok", "ctx_tok", "copies")
OP_FLOAT_FIELDS = ("flops", "bytes", "p20_us", "p50_us", "p80_us")
GDN_INT_FIELDS = ("T", "B", "Hv", "Hk", "dk", "dv")
GDN_FLOAT_FIELDS = ("p20_us", "p50_us", "p80_us", "bytes_moved")
VAL_INT_FIELDS = ("tp", "num_decode_req", "q_tok", "ctx_tok", "prefill_tok")


def _typed(row: dict, ints: tuple[str, ...], floats: tuple[str, ...], where: str) -> dict:
    out = dict(row)
    for name in ints:
        try:
            out[name] = int(float(row[name]))
        except (KeyError, ValueError):
            raise ValueError(f"{where}: column {name}={row.get(name)!r} is not an int") from None
    for name in floats:
        try:
            out[name] = float(row[name])
        except (KeyError, ValueError):
            raise ValueError(f"{where}: column {name}={row.get(name)!r} is not a number") from None
        if not math.isfinite(out[name]) or out[name] < 0:
            raise ValueError(f"{where}: column {name}={row[name]!r} must be finite and >= 0")
    return out


def read_rows(
    path: Path, ints: tuple[str, ...], floats: tuple[str, ...], required: tuple[str, ...] = ()
) -> list[dict]:
    """Rows of a CSV with typed numeric columns; errors name the file, row and column."""
    with Path(path).open(newline="") as fh:
        reader = csv.DictReader(fh)
        names = reader.fieldnames or []
        missing = [c for c in (*ints, *floats, *required) if c not in names]
        if missing:
            raise ValueError(f"{path}: missing columns {missing}")
        raw = [row for row in reader.reader if row]  # blank lines skipped (as DictReader)
    fast = _typed_columns(raw, names, ints, floats)
    if fast is not None:
        return fast
    # csv.DictReader's rows, built without its per-row overhead: missing trailing fields
    # None, extra fields under the key None; each row typed on its own (errors name it)
    rows = []
    for row in raw:
        r = dict(zip(names, row, strict=False))  # ragged rows handled below
        if len(row) != len(names):
            r.update(dict.fromkeys(names[len(row) :]))
            if len(row) > len(names):
                r[None] = row[len(names) :]
        rows.append(_typed(r, ints, floats, f"{path} row {len(rows) + 2}"))
    return rows


def _typed_columns(
    raw: list[list[str]], names: list[str], ints: tuple[str, ...], floats: tuple[str, ...]
) -> list[dict] | None:
    """``_typed`` applied column by column (the same ``int(float(s))``/``float(s)``), or
    None when a row is ragged or any value would fail: the row-by-row path then names it."""
    width = len(names)
    if len(set(names)) != width or any(len(row) != width for row in raw):
        return None
    cols = [list(c) for c in zip(*raw, strict=True)] if raw else [[] for _ in names]
    try:
        for name in ints:
            j = names.index(name)
            cols[j] = list(map(int, map(float, cols[j])))
        for name in floats:
            j = names.index(name)
            vals = list(map(float, cols[j]))
            if not all(map(math.isfinite, vals)) or (vals and min(vals) < 0):
                return None
            cols[j] = vals
    except (ValueError, OverflowError):  # int(float('inf')) overflows
        return None
    return [dict(zip(names, vals, strict=True)) for vals in zip(*cols, strict=True)]


def op_series(row: dict) -> tuple[tuple, float]:
    """(series key, x) of a model_step row: the axis each operator is interpolated along."""
    op = row["op"]
    if op in ("gemm", "gemm_fp8"):
        return (op, row["n"], row["k"]), row["m_tok"]
    if op == "attn_decode":
        return (op, row["key"], row["q_tok"], row["batch"]), row["ctx_tok"]
    if op == "attn_prefill":
        return (op, row["key"], row["ctx_tok"]), row["flops"]
    return (op, row["key"]), row["m_tok"]


def gdn_series(row: dict) -> tuple[tuple, float]:
    key = (row["kernel"], row["Hv"], row["Hk"], row["dk"], row["dv"], row["state_dtype"])
    return (*key, row["T"], row["tree"]), row["B"]


def assign_splits(
    rows: list[dict], series_fn, *, seed: int = HOLDOUT_SEED, fraction: float = HOLDOUT_FRACTION
) -> list[str]:
    """``fit``/``holdout`` per row: round(fraction * n) interior points of each series.

    Series are visited in sorted key order and each draws from one seeded Generator, so
    the split depends only on the table's contents and the seed.
    """
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"holdout fraction={fraction!r} must be in [0, 1)")
    groups: dict[tuple, list[tuple[float, int]]] = {}
    for i, row in enumerate(rows):
        key, x = series_fn(row)
        groups.setdefault(tuple(str(k) for k in key), []).append((x, i))
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    split = ["fit"] * len(rows)
    for key in sorted(groups):
        pts = sorted(groups[key])
        interior = [i for _, i in pts[1:-1]]
        count = min(len(interior), round(fraction * len(pts)))
        if count:
            for i in rng.choice(interior, size=count, replace=False):
                split[int(i)] = "holdout"
    return split


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@dataclass(frozen=True, slots=True)
class CalibrationTables:
    """One GPU's measured tables as loaded (rows are plain dicts with typed numbers)."""

    gpu: str
    manifest_path: Path
    manifest_sha256: str
    manifest: dict
    ops: tuple[dict, ...]
    validation: tuple[dict, ...]
    gdn: tuple[dict, ...]

    def fit_ops(self) -> list[dict]:
        return [r for r in self.ops if r["split"] == "fit"]

    def fit_gdn(self) -> list[dict]:
        return [r for r in self.gdn if r["split"] == "fit"]


def load_tables(gpu: str = "H200", data_dir: Path | None = None) -> CalibrationTables:
    """Load and check ``<gpu>_manifest.json`` and the files it names (sha256 verified)."""
    root = Path(data_dir) if data_dir is not None else DATA_DIR
    prefix = gpu.lower()
    manifest_path = root / f"{prefix}_manifest.json"
    if not manifest_path.is_file():
        raise ValueError(f"calibration gpu={gpu!r}: no manifest {manifest_path}")
    manifest = json.loads(manifest_path.read_text())
    if manifest.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(
            f"{manifest_path}: schema_version={manifest.get('schema_version')!r}, "
            f"this capsim reads {SCHEMA_VERSION}"
        )
    files = manifest.get("files", {})
    for name, digest in files.items():
        if sha256_file(root / name) != digest:
            raise ValueError(f"{root / name}: sha256 differs from {manifest_path.name}")

    def rows(role: str, ints, floats, required=("split",)) -> tuple[dict, ...]:
        name = f"{prefix}_{role}.csv"
        if name not in files:
            return ()
        return tuple(read_rows(root / name, ints, floats, required))

    ops = rows("model_step", OP_INT_FIELDS, OP_FLOAT_FIELDS, ("op", "key", "split"))
    if not ops:
        raise ValueError(f"{manifest_path}: names no {prefix}_model_step.csv")
    return CalibrationTables(
        gpu=gpu.upper(),
        manifest_path=manifest_path,
        manifest_sha256=sha256_file(manifest_path),
        manifest=manifest,
        ops=ops,
        validation=rows("model_step_validation", VAL_INT_FIELDS, ("p50_us",), ("model",)),
        gdn=rows("gdn_verify", GDN_INT_FIELDS, GDN_FLOAT_FIELDS, ("kernel", "state_dtype", "tree")),
    )
