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
  a point that reports another raises ``SweepMismatchError``;
- a reused point file is checked (JSON, the point's keys, finite non-negative numbers) and
  so is its steps file (a readable Parquet with the step columns); a bad one is removed and
  recomputed with a warning naming it;
- one writer at a time: ``DIR/.lock`` is held (``flock``, released when the process dies)
  while a sweep runs; a second writer gets an error naming the holder's pid;
- every run is in ``manifest.json``'s ``runs``; one still marked ``running`` when the next
  run takes the lock was killed, and is marked ``killed``.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import json
import math
import os
import platform
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from capsim.io.atomic import write_bytes_atomic, write_json_atomic, write_parquet_atomic
from capsim.sweep.grid import Point, SweepSpec

MANIFEST = "manifest.json"
LOCK = ".lock"
REQUIRED_METRICS: tuple[str, ...] = (
    "num_requests",
    "duration_s",
    "output_throughput_tok_per_s",
    "ttft_p99_s",
    "peak_kv_usage",
)
"""Row fields a reused point must carry as finite numbers (downstream tables need them)."""
STEPS_REQUIRED: tuple[str, ...] = ("t_start_s", "kv_usage")
"""Columns a reused steps file must have (the time axis and the pool usage figures read)."""

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
    write_bytes_atomic(path, data)


def atomic_write_json(path: Path, obj: Any) -> None:
    write_json_atomic(path, obj)


def atomic_write_parquet(path: Path, df: pd.DataFrame) -> None:
    write_parquet_atomic(path, df, compression="zstd")


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


class SweepLockedError(ValueError):
    """Another process is writing into the same results directory."""


def _lock(out: Path) -> int:
    """Take ``out/.lock`` exclusively (non-blocking) and write our pid into it."""
    path = out / LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise SweepLockedError(
            f"--out {out}: another capsim sweep (pid {holder}) is writing into it; wait for "
            "it to finish or use another directory"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _finite_non_negative(key: str, value: Any) -> str | None:
    if value is None or isinstance(value, bool | str):
        return None
    if isinstance(value, int | float):
        if not math.isfinite(value):
            return f"{key}={value!r} is not finite"
        if value < 0:
            return f"{key}={value!r} is negative"
    return None


def point_record_problem(record: Any, point: Point) -> str | None:
    """Why a stored point record cannot be reused (None if it can)."""
    if not isinstance(record, dict) or not isinstance(record.get("row"), dict):
        return "not a point record (no 'row' object)"
    row = record["row"]
    wall = record.get("wall_s")
    if not isinstance(wall, int | float) or isinstance(wall, bool) or not math.isfinite(wall):
        return f"wall_s={wall!r} is not a finite number"
    for key, want in point.keys().items():
        got = row.get(key)
        if isinstance(want, float) and isinstance(got, int | float):
            same = math.isclose(got, want, rel_tol=1e-12) or (math.isnan(got) and math.isnan(want))
        else:
            same = got == want
        if not same:
            return f"row {key}={got!r}, expected {want!r}"
    for key in REQUIRED_METRICS:
        if not isinstance(row.get(key), int | float) or isinstance(row.get(key), bool):
            return f"row {key}={row.get(key)!r} is not a number"
    for key, value in row.items():
        why = _finite_non_negative(key, value)
        if why:
            return f"row {why}"
    return None


def steps_file_problem(path: Path) -> str | None:
    """Why a steps file cannot be reused (None if it is a Parquet file with the step columns)."""
    import pyarrow.parquet as pq

    if not path.exists():
        return "missing"
    try:
        meta = pq.read_metadata(path)
        names = set(meta.schema.names)
    except Exception as exc:  # pyarrow raises several types for a bad file
        return f"not a readable Parquet file ({type(exc).__name__})"
    missing = [c for c in STEPS_REQUIRED if c not in names]
    if missing:
        return f"missing columns {missing}"
    return None


class SweepStore:
    """The results directory of one sweep spec (hold it with ``with`` while writing)."""

    def __init__(
        self, out_dir: Path, spec: SweepSpec, manifest: dict[str, Any], lock_fd: int | None = None
    ) -> None:
        self.out_dir = out_dir
        self.spec = spec
        self.manifest = manifest
        self._lock_fd = lock_fd

    def __enter__(self) -> SweepStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the directory lock."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, out_dir: Path | str, spec: SweepSpec) -> SweepStore:
        """Create the directory, or reopen it for resume if it holds the same spec.

        Takes the directory's lock; call ``close()`` (or use ``with``) when done.
        """
        out = Path(out_dir)
        if str(out_dir).strip() == "":
            raise ValueError("--out '': name a results directory")
        if out.exists() and not out.is_dir():
            raise ValueError(f"output {str(out)!r} exists and is not a directory")
        check_writable(out)
        fd = _lock(out)
        try:
            return cls._open_locked(out, spec, fd)
        except BaseException:
            os.close(fd)
            raise

    @classmethod
    def _open_locked(cls, out: Path, spec: SweepSpec, fd: int) -> SweepStore:
        path = out / MANIFEST
        if path.exists():
            try:
                manifest = json.loads(path.read_text())
                if not isinstance(manifest, dict):
                    raise ValueError("not a JSON object")
            except ValueError as exc:
                raise SweepMismatchError(
                    f"{path}: unreadable manifest ({exc}); refusing to mix results, use "
                    "another output directory (or delete this one)"
                ) from None
            if manifest.get("fingerprint") != spec.fingerprint():
                diff = spec_diff(manifest.get("spec", {}), spec.to_dict())
                shown = "; ".join(diff[:10]) + ("; ..." if len(diff) > 10 else "")
                raise SweepMismatchError(
                    f"{out} holds a sweep with a different configuration; refusing to mix "
                    f"results. Use another output directory (or delete this one). "
                    f"Differences: {shown}"
                )
            for run in manifest.get("runs", []):
                if isinstance(run, dict) and run.get("status") == "running":
                    run["status"] = "killed"  # it held the lock we now hold
            return cls(out, spec, manifest, fd)
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
        store = cls(out, spec, manifest, fd)
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

    def reusable(self, point: Point, need_steps: bool) -> str | None:
        """None if the stored point can be reused, else why not (files named).

        A point with no file is simply not done (returns ``''``); a bad file is removed so
        the point is recomputed.
        """
        path = self.point_path(point.point_id)
        if not path.exists():
            return ""
        try:
            why = point_record_problem(json.loads(path.read_text()), point)
        except (OSError, ValueError) as exc:
            why = f"unreadable JSON ({exc})"
        if why is None and need_steps:
            bad = steps_file_problem(self.steps_path(point.point_id))
            if bad is not None:
                why = f"its steps file {self.steps_path(point.point_id)}: {bad}"
        if why is None:
            return None
        path.unlink(missing_ok=True)
        return f"{path}: {why}"

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

    def _record(self, point_id: str) -> dict[str, Any] | None:
        path = self.point_path(point_id)
        if not path.exists():
            return None
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: unreadable point file ({exc}); rerun the sweep") from None
        return rec if isinstance(rec, dict) else None

    def read_rows(self, point_ids: Iterable[str]) -> pd.DataFrame:
        """Rows of the given finished points, in the given order (missing ones skipped)."""
        rows = [rec["row"] for pid in point_ids if (rec := self._record(pid)) is not None]
        return pd.DataFrame(rows)

    def read_wall_s(self, point_ids: Iterable[str]) -> list[float]:
        return [float(rec["wall_s"]) for pid in point_ids if (rec := self._record(pid)) is not None]
