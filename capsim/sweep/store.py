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
- a point record carries the sha256 of its own content and of its steps file; a reused
  point is read in full and verified: its hash, the sweep's fingerprint, the plausibility
  rules (``capsim.sweep.plausible``, shared with the writer), and its steps file's bytes
  against the recorded hash and the point id / fingerprint inside the file (Parquet
  key-value metadata); a bad one is removed and recomputed with a warning naming it;
- ``points.parquet`` and ``matched.parquet`` have their sha256 in the manifest (``files``);
- stale ``.*.tmp`` files (a writer killed mid-write) are removed when a run takes the lock;
- a failed write (disk full, permission) raises ``SweepWriteError`` naming the path; the run
  is marked failed and every point finished before it stays on disk;
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
import os
import platform
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from capsim.io.atomic import (
    dumps_json,
    write_bytes_atomic,
    write_json_atomic,
    write_parquet_atomic,
)
from capsim.sweep.grid import Point, SweepSpec
from capsim.sweep.plausible import REQUIRED_METRICS, point_row_problem

__all__ = ["REQUIRED_METRICS", "SweepMismatchError", "SweepStore", "SweepWriteError"]

MANIFEST = "manifest.json"
LOCK = ".lock"
RECORD_FORMAT = 2
"""Point records with content hashes; older records (no hash) are recomputed."""
META_POINT_ID = "capsim.point_id"
META_FINGERPRINT = "capsim.fingerprint"
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


class SweepWriteError(ValueError):
    """A results file could not be written (disk full, permission denied...)."""


def _write_error(path: Path, exc: OSError) -> SweepWriteError:
    import errno

    code = errno.errorcode.get(exc.errno or 0, "OSError")
    return SweepWriteError(
        f"{path}: cannot write ({code}: {exc.strerror or exc}); every point finished before "
        "it is kept: free space or fix permissions, then rerun the same command to resume"
    )


def atomic_write_bytes(path: Path, data: bytes) -> None:
    try:
        write_bytes_atomic(path, data)
    except OSError as exc:
        raise _write_error(path, exc) from None


def atomic_write_json(path: Path, obj: Any) -> None:
    try:
        write_json_atomic(path, obj)
    except OSError as exc:
        raise _write_error(path, exc) from None


def atomic_write_parquet(
    path: Path, df: pd.DataFrame, metadata: dict[str, str] | None = None
) -> None:
    try:
        write_parquet_atomic(path, df, compression="zstd", metadata=metadata)
    except OSError as exc:
        raise _write_error(path, exc) from None


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def record_hash(record: dict[str, Any]) -> str:
    """sha256 of a point record's canonical JSON, without its own ``sha256`` field."""
    body = {k: v for k, v in record.items() if k != "sha256"}
    return hashlib.sha256(dumps_json(body, indent=None).encode()).hexdigest()


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


def point_record_problem(
    record: Any, point: Point, fingerprint: str | None = None, columns: Any = None
) -> str | None:
    """Why a stored point record cannot be reused (None if it can)."""
    if not isinstance(record, dict) or not isinstance(record.get("row"), dict):
        return "not a point record (no 'row' object)"
    if record.get("format") != RECORD_FORMAT or not isinstance(record.get("sha256"), str):
        return "no content hash (written by an older capsim)"
    if record_hash(record) != record["sha256"]:
        return "content does not match its sha256 (the file was changed or damaged)"
    if fingerprint is not None and record.get("fingerprint") != fingerprint:
        return f"fingerprint {record.get('fingerprint')!r} is not this sweep's"
    if record.get("point_id") != point.point_id:
        return f"point_id {record.get('point_id')!r} is not {point.point_id!r}"
    return point_row_problem(record["row"], point, record.get("wall_s"), columns)


def steps_file_problem(
    path: Path,
    want_sha256: str | None = None,
    point_id: str | None = None,
    fingerprint: str | None = None,
) -> str | None:
    """Why a steps file cannot be reused: missing, bytes not the recorded hash, not a
    Parquet file read in full, no step columns, or another point's or sweep's file."""
    import io

    import pyarrow.parquet as pq

    if not path.exists():
        return "missing"
    try:
        data = path.read_bytes()
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    if want_sha256 is not None and hashlib.sha256(data).hexdigest() != want_sha256:
        return "content does not match the sha256 its point recorded"
    try:
        table = pq.read_table(io.BytesIO(data))  # every page decoded, not only the footer
    except Exception as exc:  # pyarrow raises several types for a bad file
        return f"not a readable Parquet file ({type(exc).__name__})"
    missing = [c for c in STEPS_REQUIRED if c not in table.column_names]
    if missing:
        return f"missing columns {missing}"
    meta = table.schema.metadata or {}
    got_id = meta.get(META_POINT_ID.encode(), b"").decode(errors="replace")
    if point_id is not None and got_id != point_id:
        return f"belongs to point {got_id or '<none>'!r}, not {point_id!r}"
    got_fp = meta.get(META_FINGERPRINT.encode(), b"").decode(errors="replace")
    if fingerprint is not None and got_fp != fingerprint:
        return f"belongs to another sweep (fingerprint {got_fp[:12] or '<none>'!r})"
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
        for sub in ("points", "steps"):
            if (out / sub).exists() and not (out / sub).is_dir():
                raise SweepMismatchError(
                    f"{out / sub}: exists and is not a directory; a sweep keeps its point "
                    "files there: move it away or use another output directory"
                )
        path = out / MANIFEST
        if path.exists():
            manifest = read_manifest(path)
            if manifest.get("fingerprint") != spec.fingerprint():
                diff = spec_diff(manifest.get("spec", {}), spec.to_dict())
                shown = "; ".join(diff[:10]) + ("; ..." if len(diff) > 10 else "")
                raise SweepMismatchError(
                    f"{out} holds a sweep with a different configuration; refusing to mix "
                    f"results. Use another output directory (or delete this one). "
                    f"Differences: {shown}"
                )
            for run in manifest["runs"]:
                if isinstance(run, dict) and run.get("status") == "running":
                    run["status"] = "killed"  # it held the lock we now hold
            store = cls(out, spec, manifest, fd)
            store.remove_stale_tmp()
            return store
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

    def remove_stale_tmp(self) -> list[Path]:
        """Delete ``.*.tmp`` files a killed writer left (we hold the lock: none is live)."""
        gone = []
        for where in (self.out_dir, self.out_dir / "points", self.out_dir / "steps"):
            if not where.is_dir():
                continue
            for tmp in where.glob(".*.tmp"):
                try:
                    tmp.unlink()
                    gone.append(tmp)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    raise _write_error(tmp, exc) from None
        return gone

    def write_manifest(self) -> None:
        atomic_write_json(self.out_dir / MANIFEST, self.manifest)

    # ------------------------------------------------------------------ points
    def point_path(self, point_id: str) -> Path:
        return self.out_dir / "points" / f"{point_id}.json"

    def steps_path(self, point_id: str) -> Path:
        return self.out_dir / "steps" / f"{point_id}.parquet"

    def has(self, point_id: str) -> bool:
        return self.point_path(point_id).exists()

    @property
    def row_columns(self) -> list[str] | None:
        """The column set every row of this sweep has (recorded with the first point)."""
        cols = self.manifest.get("row_columns")
        return list(cols) if isinstance(cols, list) else None

    def reusable(self, point: Point, need_steps: bool) -> str | None:
        """None if the stored point can be reused, else why not (files named).

        The record and its steps file are read in full and verified (hashes, fingerprint,
        point id, plausibility). A point with no file is simply not done (returns ``''``);
        a bad file is removed so the point is recomputed.
        """
        path = self.point_path(point.point_id)
        if not path.exists():
            return ""
        try:
            record = json.loads(path.read_text())
            why = point_record_problem(record, point, self.spec.fingerprint(), self.row_columns)
        except (OSError, ValueError, RecursionError) as exc:
            why = f"unreadable JSON ({type(exc).__name__}: {str(exc)[:80]})"
        if why is None and need_steps:
            steps = self.steps_path(point.point_id)
            want = record.get("steps_sha256")
            bad = (
                "not recorded with its point"
                if not isinstance(want, str)
                else steps_file_problem(steps, want, point.point_id, self.spec.fingerprint())
            )
            if bad is not None:
                why = f"its steps file {steps}: {bad}"
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
        point: Point | None = None,
    ) -> None:
        """Steps first, then the point record: the record's presence means 'done'.

        With ``point`` the row must pass the plausibility rules first (``ValueError``
        naming the field otherwise: nothing is written).
        """
        if point is not None:
            why = point_row_problem(row, point, wall_s, self.row_columns)
            if why is not None:
                raise ValueError(f"point {point_id}: implausible result, not stored: {why}")
        fingerprint = self.spec.fingerprint()
        steps_sha = None
        if steps is not None:
            sp = self.steps_path(point_id)
            atomic_write_parquet(
                sp, steps, {META_POINT_ID: point_id, META_FINGERPRINT: fingerprint}
            )
            steps_sha = sha256_file(sp)
        if self.row_columns is None:
            self.manifest["row_columns"] = sorted(row)
            self.write_manifest()
        record: dict[str, Any] = {
            "format": RECORD_FORMAT,
            "point_id": point_id,
            "fingerprint": fingerprint,
            "row": row,
            "wall_s": wall_s,
            "steps_sha256": steps_sha,
        }
        record = json.loads(dumps_json(record))  # the stored form (NaN -> null) is hashed
        record["sha256"] = record_hash(record)
        atomic_write_json(self.point_path(point_id), record)

    def _record(self, point_id: str) -> dict[str, Any] | None:
        path = self.point_path(point_id)
        if not path.exists():
            return None
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError) as exc:
            raise ValueError(f"{path}: unreadable point file ({exc}); rerun the sweep") from None
        if not isinstance(rec, dict) or rec.get("sha256") != record_hash(rec):
            raise ValueError(f"{path}: content does not match its sha256; rerun the sweep")
        return rec

    def read_rows(self, point_ids: Iterable[str]) -> pd.DataFrame:
        """Rows of the given finished points, in the given order (missing ones skipped)."""
        rows = [rec["row"] for pid in point_ids if (rec := self._record(pid)) is not None]
        return pd.DataFrame(rows)

    def read_wall_s(self, point_ids: Iterable[str]) -> list[float]:
        return [float(rec["wall_s"]) for pid in point_ids if (rec := self._record(pid)) is not None]

    def record_file(self, name: str) -> None:
        """Put ``name``'s sha256 into the manifest's ``files`` (after writing it)."""
        files = self.manifest.setdefault("files", {})
        files[name] = sha256_file(self.out_dir / name)
        self.write_manifest()


def read_manifest(path: Path) -> dict[str, Any]:
    """A sweep manifest, its structure and spec fingerprint checked (SweepMismatchError)."""
    from capsim.sweep.grid import _sha

    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise SweepMismatchError(
            f"{path}: unreadable manifest ({type(exc).__name__}: {str(exc)[:80]}); refusing "
            "to mix results, use another output directory (or delete this one)"
        ) from None
    if not isinstance(manifest, dict):
        raise SweepMismatchError(f"{path}: manifest is not a JSON object; refusing to mix")
    for key, kind in (("runs", list), ("spec", dict), ("fingerprint", str)):
        if not isinstance(manifest.get(key), kind):
            raise SweepMismatchError(
                f"{path}: manifest {key}={type(manifest.get(key)).__name__}, expected a "
                f"{kind.__name__}; the manifest was edited or damaged, refusing to mix results"
            )
    if _sha(manifest["spec"]) != manifest["fingerprint"]:
        raise SweepMismatchError(
            f"{path}: the manifest's spec does not match its fingerprint "
            f"{manifest['fingerprint'][:12]} (the spec was edited); refusing to mix results"
        )
    return manifest
