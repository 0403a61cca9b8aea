"""A sweep's results directory: atomic per-point files, the manifest, resume checks.

Layout::

    DIR/manifest.json         spec, fingerprint, seeds, calibration id, versions, git sha
    DIR/points/<point_id>.json  one finished simulation (its result row + wall time)
    DIR/steps/<point_id>.parquet  its engine-step time series
    DIR/points.parquet        one row per point and mode (rebuilt from points/ at the end)
    DIR/matched.parquet       one row per matched point (TreeWY / store-all ratios)

Invariants:
- a point is done iff ``points/<point_id>.json`` exists; it is written last, by rename,
  after its steps file, so an interrupted sweep never leaves a half point behind;
- a directory belongs to exactly one spec fingerprint: opening it with another spec
  raises ``SweepMismatchError`` naming the fields that differ (never mixes results);
- every point of a directory was priced by the same step-time model (calibration id);
  a point that reports another raises ``SweepMismatchError``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import platform
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from capsim.sweep.grid import SweepSpec

MANIFEST = "manifest.json"
FILE_MODE = 0o644  # mkstemp creates 0600; results are meant to be shared

# Keys of StepTimeModel.describe() that describe the point, not the calibration.
POINT_SPECIFIC_MODEL_KEYS: frozenset[str] = frozenset(
    {
        "gpu",
        "projection",
        "hardware_model",
        "model",
        "tp",
        "commit",
        "window_tok",
        "depth",
        "gdn_kernels",
        "gdn_window_interpolation",
        "tp_allreduce",
    }
)


class SweepMismatchError(ValueError):
    """The directory holds results of a different sweep configuration."""


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file in the same directory and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    text = json.dumps(obj, indent=1, sort_keys=True, default=_json_default, allow_nan=True)
    atomic_write_bytes(path, text.encode())


def atomic_write_parquet(path: Path, df: pd.DataFrame) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        df.to_parquet(tmp, index=False, compression="zstd")
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if isinstance(obj, tuple | set):
        return list(obj)
    return str(obj)


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(d, list | tuple) and any(isinstance(x, dict) for x in d):
        for i, v in enumerate(d):
            out.update(_flatten(v, f"{prefix}[{i}]"))
    else:
        out[prefix] = d
    return out


def spec_diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Human-readable differences between two spec dicts (``field: old -> new``)."""
    a = _flatten(json.loads(json.dumps(old, default=_json_default)))
    b = _flatten(json.loads(json.dumps(new, default=_json_default)))
    lines = []
    for key in sorted(set(a) | set(b)):
        if a.get(key, "<absent>") != b.get(key, "<absent>"):
            lines.append(f"{key}: {a.get(key, '<absent>')!r} -> {b.get(key, '<absent>')!r}")
    return lines


def git_sha(repo: Path | None = None) -> str:
    """HEAD of the capsim checkout (``+dirty`` if it has local changes), or 'unknown'."""
    where = repo or Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if not sha:
        return "unknown"
    return sha + ("+dirty" if dirty else "")


def versions() -> dict[str, str]:
    import numpy
    import pyarrow
    import simpy

    import capsim

    return {
        "python": platform.python_version(),
        "capsim": getattr(capsim, "__version__", "0.1.0"),
        "numpy": numpy.__version__,
        "pandas": pd.__version__,
        "pyarrow": pyarrow.__version__,
        "simpy": simpy.__version__,
    }


def check_writable(out_dir: Path) -> None:
    """Fail fast if ``out_dir`` cannot be created or written."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".probe.", dir=out_dir)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise ValueError(f"output directory {str(out_dir)!r} is not writable: {exc}") from None


def now_utc() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class SweepStore:
    """The results directory of one sweep spec."""

    def __init__(self, out_dir: Path, spec: SweepSpec, manifest: dict[str, Any]) -> None:
        self.out_dir = out_dir
        self.spec = spec
        self.manifest = manifest

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, out_dir: Path | str, spec: SweepSpec) -> SweepStore:
        """Create the directory, or reopen it for resume if it holds the same spec."""
        out = Path(out_dir)
        if out.exists() and not out.is_dir():
            raise ValueError(f"output {str(out)!r} exists and is not a directory")
        check_writable(out)
        path = out / MANIFEST
        if path.exists():
            manifest = json.loads(path.read_text())
            if manifest.get("fingerprint") != spec.fingerprint():
                diff = spec_diff(manifest.get("spec", {}), spec.to_dict())
                shown = "\n  ".join(diff[:20]) + ("\n  ..." if len(diff) > 20 else "")
                raise SweepMismatchError(
                    f"{out} holds a sweep with a different configuration; refusing to mix "
                    f"results. Use another output directory (or delete this one). "
                    f"Differences:\n  {shown}"
                )
            return cls(out, spec, manifest)
        if any(p.name in ("points", "steps") for p in out.iterdir()):
            raise SweepMismatchError(
                f"{out} holds sweep files but no {MANIFEST}; refusing to mix results"
            )
        manifest = {
            "kind": "capsim-sweep",
            "spec": spec.to_dict(),
            "fingerprint": spec.fingerprint(),
            "seeds": {
                "root_seed": spec.seed,
                "policy": "every point uses the root seed; simulate() derives its named "
                "streams with numpy SeedSequence, so matched points and all loads share "
                "the request sample and per-request acceptance draws",
            },
            "calibration": None,
            "versions": versions(),
            "git_sha": git_sha(),
            "created_utc": now_utc(),
            "runs": [],
        }
        store = cls(out, spec, manifest)
        store.write_manifest()
        return store

    def write_manifest(self) -> None:
        atomic_write_json(self.out_dir / MANIFEST, self.manifest)

    # ------------------------------------------------------------------ points
    def point_path(self, point_id: str) -> Path:
        return self.out_dir / "points" / f"{point_id}.json"

    def steps_path(self, point_id: str) -> Path:
        return self.out_dir / "steps" / f"{point_id}.parquet"

    def has(self, point_id: str) -> bool:
        return self.point_path(point_id).exists()

    def check_calibration(self, step_time_model: dict[str, Any]) -> None:
        """Record the first point's step-time model; refuse a point priced by another.

        Only the model's identity is compared (kind, tables and their hash, efficiencies);
        what describes the point itself (GPU, model, TP, commit mode, window, kernels
        used, projection label) legitimately differs between points of one grid.
        """
        identity = {k: v for k, v in step_time_model.items() if k not in POINT_SPECIFIC_MODEL_KEYS}
        canon = json.loads(json.dumps(identity, sort_keys=True, default=_json_default))
        if self.manifest.get("calibration") is None:
            self.manifest["calibration"] = canon
            self.manifest["calibration_id"] = hashlib.sha256(
                json.dumps(canon, sort_keys=True).encode()
            ).hexdigest()[:12]
            self.write_manifest()
        elif self.manifest["calibration"] != canon:
            diff = spec_diff(self.manifest["calibration"], canon)
            raise SweepMismatchError(
                f"{self.out_dir}: a point was priced by a different step-time model than "
                f"the points already stored; refusing to mix. Differences: {diff}"
            )

    def write_point(
        self,
        point_id: str,
        row: dict[str, Any],
        steps: pd.DataFrame | None,
        wall_s: float,
    ) -> None:
        """Steps first, then the point record: the record's presence means 'done'."""
        if steps is not None:
            atomic_write_parquet(self.steps_path(point_id), steps)
        atomic_write_json(self.point_path(point_id), {"row": row, "wall_s": wall_s})

    def read_rows(self, point_ids: Iterable[str]) -> pd.DataFrame:
        """Rows of the given finished points, in the given order (missing ones skipped)."""
        rows = []
        for pid in point_ids:
            path = self.point_path(pid)
            if path.exists():
                rows.append(json.loads(path.read_text())["row"])
        return pd.DataFrame(rows)

    def read_wall_s(self, point_ids: Iterable[str]) -> list[float]:
        out = []
        for pid in point_ids:
            path = self.point_path(pid)
            if path.exists():
                out.append(float(json.loads(path.read_text())["wall_s"]))
        return out
